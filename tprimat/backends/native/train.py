"""One native training run on this rank: build and lay out the model, then optimizer steps of
gradient-accumulated micro batches (or pipeline schedules of them)."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from tprimat.backends.common import SyntheticTokens, build_optimizer, lr_at, optimizer_settings, set_lr
from tprimat.backends.native.model import Decoder
from tprimat.backends.native.parallelize import Layout, clip_grad_norm, make_layout, parallelize, uses_autocast
from tprimat.measure.profile import DATA_RANGE
from tprimat.spec.compat import CUDA_GRAPH_MODES
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf, lora_of


def embeddings_tied(model: nn.Module):
    """Whether the output head holds the embedding's very parameter on this rank (None: a stage without both)."""
    inner = getattr(model, "module", model)  # DDP wraps the model
    embedding, output = getattr(inner, "tok_embeddings", None), getattr(inner, "output", None)
    if embedding is None or output is None:
        return None
    return output.weight is embedding.weight


def trained_params(model: nn.Module) -> int:
    """Parameters that get gradients, read off the live model (whole sizes, also for sharded ones): every one, or
    under LoRA the adapters alone."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class NativeTrainer:
    def __init__(self, spec: TprimatConf, plan: Plan, device: torch.device, layout: Layout | None = None):
        self.spec, self.plan, self.device = spec, plan, device
        self.layout = layout or make_layout(plan, device, spec.parallelism.fsdp)
        tr = spec.training
        torch.manual_seed(tr.seed)
        with torch.device("meta"):  # no memory: each rank allocates only its shards once laid out
            model = Decoder(spec.model, tr.seed, lora_of(spec))
        self.model: nn.Module = parallelize(model, spec, self.layout, device)
        self.probe = ComputeProbe(self.model)
        self.max_grad_norm = tr.optimizer.grad_clip  # what ``step`` clips to
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.model, tr)
        self.data = SyntheticTokens(spec.model.vocab_size, tr.seq_length, tr.seed, tr.global_batch_size)
        self.autocast = uses_autocast(spec, self.layout)
        self.schedule = self._pipeline_schedule() if self.layout.pp > 1 else None
        self.cuda_graphs = tr.compile and tr.compile_mode in CUDA_GRAPH_MODES and device.type == "cuda"

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
        with torch.profiler.record_function(DATA_RANGE):  # "data loading" in a profile's breakdown
            inputs, targets = self.data.rows(step, first, mbs)
            return inputs.to(self.device, non_blocking=True), targets.to(self.device, non_blocking=True)

    def _accumulate(self, step: int) -> torch.Tensor:
        total = torch.zeros((), device=self.device)
        accum = self.plan.grad_accum_steps
        for micro in range(accum):
            self._set_grad_sync(micro == accum - 1)
            inputs, targets = self._rows(step, micro)
            self.probe.batch(inputs.shape[0], accum)
            with self._precision():
                logits = self.model(inputs)
            loss = self._loss(logits, targets)
            loss.backward()
            total += loss.detach()
        return total

    def _set_grad_sync(self, sync: bool) -> None:
        """Reduce gradients across data-parallel ranks only after the last micro batch."""
        from torch.distributed.fsdp import FSDPModule
        from torch.nn.parallel import DistributedDataParallel

        if isinstance(self.model, FSDPModule):
            self.model.set_requires_gradient_sync(sync)
        elif isinstance(self.model, DistributedDataParallel):
            self.model.require_backward_grad_sync = sync

    def _pipeline(self, step: int) -> torch.Tensor:
        micro = [self._rows(step, m) for m in range(self.plan.grad_accum_steps)]
        inputs = torch.cat([x for x, _ in micro])
        targets = torch.cat([y for _, y in micro])
        self.probe.batch(micro[0][0].shape[0], self.schedule._n_microbatches)
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
        """What this trainer actually ran, read back from live state: the optimizer's parameter groups and
        learning rate, the micro batches it fed in the last step, the dtype its matmuls produced, the float8
        modules and data-parallel wrapper the model holds, the clipping ``step`` applied."""
        from torch.distributed.fsdp import FSDPModule
        from torch.nn.parallel import DistributedDataParallel

        return {**optimizer_settings(self.optimizer), "grad_clip": self.max_grad_norm,
                "lr_last": self.optimizer.param_groups[0]["lr"], "lr_schedule": "tprimat warmup_cosine",
                "micro_batch_size": self.probe.micro_batch_size, "grad_accum_steps": self.probe.micro_batches,
                "precision": self.probe.precision(self.model),
                "layout": {"dp": self.layout.dp, "tp": self.layout.tp, "pp": self.layout.pp,
                           "fsdp": isinstance(self.model, FSDPModule),
                           "ddp": isinstance(self.model, DistributedDataParallel)},
                "embeddings_tied": embeddings_tied(self.model), "trained_params": trained_params(self.model),
                **optimisations(self.model)}

    def step(self, step: int) -> tuple[torch.Tensor, torch.Tensor, float]:
        """One optimizer step (0-based); returns (global mean loss, pre-clip grad norm, lr)."""
        lr = lr_at(step, self.spec.training)
        set_lr(self.optimizer, lr)
        if self.cuda_graphs:
            # One generation of CUDA-graph outputs per optimizer step, its micro batches and their gradients in it.
            # On an H100, with no mark and with a mark before every micro batch, the second micro batch failed
            # ("accessing tensor output of CUDAGraphs that has been overwritten"); with this one mark per step the
            # losses and gradient norms equal the default mode's.
            torch.compiler.cudagraph_mark_step_begin()
        loss = self._pipeline(step) if self.schedule else self._accumulate(step)
        if self.layout.dp > 1:
            dist.all_reduce(loss, group=self.layout.group("dp"))
            loss = loss / self.layout.dp
        grad_norm = clip_grad_norm(self.params, self.max_grad_norm,
                                   self.layout.group("pp") if self.layout.pp > 1 else None)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss, grad_norm, lr


class ComputeProbe:
    """Observes a model while it trains: the micro batches fed per step and the dtype its blocks' first linear
    layers' matmuls produced (bf16 under autocast or FSDP mixed precision, fp32 otherwise)."""

    def __init__(self, model: nn.Module):
        self.dtype: torch.dtype | None = None
        self.micro_batch_size: int | None = None
        self.micro_batches: int | None = None
        for linear in first_linears(model):
            linear.register_forward_hook(self._record)

    def _record(self, module: nn.Module, inputs, output: torch.Tensor) -> None:
        self.dtype = output.dtype

    def batch(self, rows: int, micro_batches: int) -> None:
        self.micro_batch_size, self.micro_batches = rows, micro_batches

    def precision(self, model: nn.Module) -> str:
        """fp8 when float8 linears hold the GEMMs, else the observed matmul dtype (None: no forward seen)."""
        if any(type(m).__name__ == "Float8Linear" for m in model.modules()):
            return "fp8"
        return {torch.bfloat16: "bf16", torch.float32: "fp32", None: None}.get(self.dtype, str(self.dtype))


def first_linears(model: nn.Module) -> list[nn.Linear]:
    """The first linear layer of each decoder block, alike in every block: torch.compile guards a compiled block on
    its hooks, and a hook on the first block's alone compiled the blocks twice, forward and backward (a second
    graph for the blocks without it: 2026-11-29, llama_tiny on a CPU, twice the compile time)."""
    layers = getattr(getattr(model, "module", model), "layers", None)  # DDP wraps the model
    blocks = list(layers.values()) if isinstance(layers, nn.ModuleDict) and len(layers) else [model]
    found = (next((m for m in block.modules() if isinstance(m, nn.Linear)), None) for block in blocks)
    return [linear for linear in found if linear is not None]


def optimisations(model: nn.Module) -> dict:
    """The optimisation matrix as the live model holds it: which layers recompute, how many blocks are compiled,
    the float8 linears' weight scaling (tensorwise, or axiswise for the rowwise recipe)."""
    from tprimat.backends.native.parallelize import Checkpointed

    modules = list(model.modules())
    float8 = next((m for m in modules if type(m).__name__ == "Float8Linear"), None)
    return {"recomputed_layers": sum(isinstance(m, Checkpointed) for m in modules),
            "compiled_layers": sum(type(m).__name__ == "OptimizedModule" for m in modules),
            "fp8_scaling": float8.config.cast_config_weight.scaling_granularity.value if float8 is not None else None}

