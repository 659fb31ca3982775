"""One native training run: build model and optimizer, then optimizer steps of gradient-accumulated micro batches."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tprimat.backends.native.data import SyntheticTokens
from tprimat.backends.native.model import Decoder
from tprimat.backends.native.optim import build_optimizer, lr_at, set_lr
from tprimat.backends.native.parallelize import apply_activation_checkpointing, apply_compile
from tprimat.config.schema import TprimatConf
from tprimat.plan import Plan


def pick_device(spec: TprimatConf) -> torch.device:
    if spec.platform.name in ("nvidia", "amd"):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def autocast(spec: TprimatConf, device: torch.device):
    if spec.training.precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass
class NativeTrainer:
    spec: TprimatConf
    plan: Plan
    device: torch.device

    def __post_init__(self) -> None:
        tr = self.spec.training
        torch.manual_seed(tr.seed)
        with torch.device(self.device):
            model = Decoder(self.spec.model)
        apply_activation_checkpointing(model, tr.activation_checkpointing)
        if tr.compile:
            apply_compile(model)
        self.model: nn.Module = model
        self.optimizer = build_optimizer(model, tr)
        self.data = SyntheticTokens(self.spec.model.vocab_size, tr.seq_length, tr.seed, tr.global_batch_size)
        self.vocab_size = self.spec.model.vocab_size

    def micro_loss(self, step: int, micro: int) -> torch.Tensor:
        mbs, dp_rank = self.spec.training.micro_batch_size, 0
        inputs, targets = self.data.rows(step, micro * mbs * self.plan.dp + dp_rank * mbs, mbs)
        inputs = inputs.to(self.device, non_blocking=True)
        targets = targets.to(self.device, non_blocking=True)
        with autocast(self.spec, self.device):
            logits = self.model(inputs)
        return F.cross_entropy(logits.float().view(-1, self.vocab_size), targets.reshape(-1))

    def step(self, step: int) -> tuple[torch.Tensor, torch.Tensor, float]:
        """One optimizer step (0-based index); returns (mean loss, pre-clip grad norm, lr) as device tensors."""
        lr = lr_at(step, self.spec.training)
        set_lr(self.optimizer, lr)
        accum = self.plan.grad_accum_steps
        total = torch.zeros((), device=self.device)
        for micro in range(accum):
            loss = self.micro_loss(step, micro) / accum
            loss.backward()
            total += loss.detach()
        clip = self.spec.training.optimizer.grad_clip
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip > 0 else float("inf"))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total, grad_norm, lr
