"""AdamW with linear warm-up and cosine decay to min_lr (Megatron-LM's schedule)."""

from __future__ import annotations

import math

import torch
from torch import nn

from tprimat.config.schema import TrainingConf


def lr_at(step: int, training: TrainingConf) -> float:
    """Learning rate for optimizer step ``step`` (0-based): linear warm-up, then cosine to min_lr."""
    opt = training.optimizer
    if opt.warmup_steps and step < opt.warmup_steps:
        return opt.lr * (step + 1) / opt.warmup_steps
    decay_steps = max(training.max_steps - opt.warmup_steps, 1)
    progress = min((step - opt.warmup_steps) / decay_steps, 1.0)
    return opt.min_lr + 0.5 * (opt.lr - opt.min_lr) * (1 + math.cos(math.pi * progress))


def build_optimizer(model: nn.Module, training: TrainingConf) -> torch.optim.Optimizer:
    """Weight decay on matrices only (not on norms and biases), as Megatron-LM and torchtitan do."""
    opt = training.optimizer
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": opt.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr_at(0, training), betas=(opt.beta1, opt.beta2), eps=opt.eps)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def optimizer_settings(optimizer) -> dict:
    """What an optimizer actually holds (unwrapping Accelerate / DeepSpeed wrappers): class, betas, eps, decay."""
    groups = optimizer.param_groups
    return {"optimizer": type(getattr(optimizer, "optimizer", optimizer)).__name__, "betas": list(groups[0]["betas"]),
            "eps": groups[0]["eps"], "weight_decay": max(g["weight_decay"] for g in groups)}


def batch_phrase(micro_batch_size: int, seq_length: int, dp: int, grad_accum_steps: int, precision: str) -> str:
    return (f"{dp} data-parallel process(es), {grad_accum_steps} x {micro_batch_size} sequences of {seq_length} "
            f"per device and step, {precision}")
