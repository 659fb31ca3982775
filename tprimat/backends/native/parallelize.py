"""How the native model is wrapped for training: activation checkpointing and torch.compile.

Kept apart from model.py (torchtitan's split): multi-process sharding (DDP, FSDP2, TP, PP) lands here too.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Checkpointed(nn.Module):
    """Recompute a block's activations in the backward pass instead of keeping them."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, *args, use_reentrant=False)


def apply_activation_checkpointing(model: nn.Module, mode: str) -> None:
    """``full``: every block; ``selective``: every other block (torchtitan's layer-selective option)."""
    if mode == "none":
        return
    every = 1 if mode == "full" else 2
    for i, block in enumerate(model.layers):
        if i % every == 0:
            model.layers[i] = Checkpointed(block)


def apply_compile(model: nn.Module) -> None:
    """Compile each block separately (as torchtitan does): the same code is reused by every layer."""
    for i, block in enumerate(model.layers):
        model.layers[i] = torch.compile(block)
