"""One native training run on this rank: build and lay out the model, then optimizer steps of
gradient-accumulated micro batches (or pipeline schedules of them)."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from tprimat.backends.native.data import SyntheticTokens
from tprimat.backends.native.model import Decoder
from tprimat.backends.native.optim import build_optimizer, lr_at, optimizer_settings, set_lr
from tprimat.backends.native.parallelize import Layout, clip_grad_norm, make_layout, parallelize, uses_autocast
from tprimat.config.schema import TprimatConf
from tprimat.plan import Plan


def pick_device(spec: TprimatConf) -> torch.device:
    if spec.platform.name in ("nvidia", "amd"):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class NativeTrainer:
    def __init__(self, spec: TprimatConf, plan: Plan, device: torch.device, layout: Layout | None = None):
        self.spec, self.plan, self.device = spec, plan, device
        self.layout = layout or make_layout(plan, device)
        tr = spec.training
        torch.manual_seed(tr.seed)  # every rank builds the same full model, then keeps its shard
        with torch.device(device):
            model = Decoder(spec.model)
        self.model: nn.Module = parallelize(model, spec, self.layout, device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.model, tr)
        self.data = SyntheticTokens(spec.model.vocab_size, tr.seq_length, tr.seed, tr.global_batch_size)
        self.autocast = uses_autocast(spec, self.layout)
        self.schedule = self._pipeline_schedule() if self.layout.pp > 1 else None

    def _precision(self):
        if self.autocast:
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @staticmethod
    def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean token cross-entropy of one micro batch (pipeline schedules scale it by 1/micro batches)."""
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def _loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Scaled by 1/accumulation steps so that accumulated gradients are a mean over the global batch."""
        return self._cross_entropy(logits, targets) / self.plan.grad_accum_steps

    def _pipeline_schedule(self):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        stage = PipelineStage(self.model, self.layout.pp_rank, self.layout.pp, self.device,
                              group=self.layout.group("pp"))
        schedule = ScheduleGPipe if self.spec.parallelism.pp_schedule == "gpipe" else Schedule1F1B
        return schedule(stage, n_microbatches=self.plan.grad_accum_steps, loss_fn=self._cross_entropy)

    def _rows(self, step: int, micro: int):
        mbs = self.spec.training.micro_batch_size
        first = micro * mbs * self.plan.dp + self.layout.dp_rank * mbs
        inputs, targets = self.data.rows(step, first, mbs)
        return inputs.to(self.device, non_blocking=True), targets.to(self.device, non_blocking=True)

    def _accumulate(self, step: int) -> torch.Tensor:
        total = torch.zeros((), device=self.device)
        accum = self.plan.grad_accum_steps
        for micro in range(accum):
            self._set_grad_sync(micro == accum - 1)
            inputs, targets = self._rows(step, micro)
            with self._precision():
                logits = self.model(inputs)
            loss = self._loss(logits, targets)
            loss.backward()
            total += loss.detach()
        return total

    def _set_grad_sync(self, sync: bool) -> None:
        """Reduce gradients across data-parallel ranks only after the last micro batch."""
        if hasattr(self.model, "set_requires_gradient_sync"):  # FSDP2
            self.model.set_requires_gradient_sync(sync)
        elif hasattr(self.model, "require_backward_grad_sync"):  # DDP
            self.model.require_backward_grad_sync = sync

    def _pipeline(self, step: int) -> torch.Tensor:
        micro = [self._rows(step, m) for m in range(self.plan.grad_accum_steps)]
        inputs = torch.cat([x for x, _ in micro])
        targets = torch.cat([y for _, y in micro])
        losses: list[torch.Tensor] = []
        with self._precision():
            if self.layout.first_stage:
                self.schedule.step(inputs)
            elif self.layout.last_stage:
                self.schedule.step(target=targets, losses=losses)
            else:
                self.schedule.step()
        total = torch.stack(losses).mean().detach() if losses else torch.zeros((), device=self.device)
        dist.all_reduce(total, group=self.layout.group("pp"))  # only the last stage holds the loss
        return total

    def effective_settings(self) -> dict:
        """What this trainer actually runs, read back from its optimizer and layout."""
        return {**optimizer_settings(self.optimizer), "grad_clip": self.spec.training.optimizer.grad_clip,
                "micro_batch_size": self.spec.training.micro_batch_size, "grad_accum_steps": self.plan.grad_accum_steps,
                "lr_schedule": "tprimat warmup_cosine", "precision": self.spec.training.precision,
                "layout": {"dp": self.layout.dp, "tp": self.layout.tp, "pp": self.layout.pp,
                           "fsdp": bool(self.spec.parallelism.fsdp and self.layout.mesh is not None),
                           "ddp": type(self.model).__name__ == "DistributedDataParallel"}}

    def step(self, step: int) -> tuple[torch.Tensor, torch.Tensor, float]:
        """One optimizer step (0-based); returns (global mean loss, pre-clip grad norm, lr)."""
        lr = lr_at(step, self.spec.training)
        set_lr(self.optimizer, lr)
        loss = self._pipeline(step) if self.schedule else self._accumulate(step)
        if self.layout.dp > 1:
            dist.all_reduce(loss, group=self.layout.group("dp"))
            loss = loss / self.layout.dp
        grad_norm = clip_grad_norm(self.params, self.spec.training.optimizer.grad_clip,
                                   self.layout.group("pp") if self.layout.pp > 1 else None)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss, grad_norm, lr
