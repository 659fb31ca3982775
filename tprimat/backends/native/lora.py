"""Low-rank adapters (training.peft=lora): the base model's weights frozen, an adapter beside each target.

An adapter adds (alpha / rank) * B A dropout(x) to its linear layer's output (Hu et al. 2021; NeMo's and
Megatron-core's LoRA, dropout before A as MLPerf's config sets ``dropout_position: pre``). Targets are named
as Megatron-core names its linear layers (``LORA_TARGETS``): ``linear_qkv`` one adapter on the fused query,
key and value projection (one A, one B as wide as q, k and v together), ``linear_proj`` the attention's output,
``linear_fc1`` the MLP's first layer (gate and up together when gated), ``linear_fc2`` its second. The adapters
live beside the layers they adapt (``attention.lora_qkv``), so every base parameter keeps its name and its
initial value: a LoRA model starts as exactly the model it adapts (B = 0).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from tprimat.spec.schema import LoraConf

ADAPTER = ".lora_"  # in every adapter parameter's name, in no base parameter's


class Adapter(nn.Module):
    def __init__(self, in_features: int, out_features: int, lora: LoraConf):
        super().__init__()
        self.dropout = nn.Dropout(lora.dropout)
        self.a = nn.Linear(in_features, lora.rank, bias=False)
        self.b = nn.Linear(lora.rank, out_features, bias=False)
        self.scale = lora.alpha / lora.rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(self.dropout(x))) * self.scale


def adapter(target: str, lora: Optional[LoraConf], in_features: int, out_features: int) -> Optional[Adapter]:
    """The adapter of ``target`` when LoRA adapts it, else None."""
    return Adapter(in_features, out_features, lora) if lora is not None and target in lora.targets else None


def is_adapter(name: str) -> bool:
    return ADAPTER in f".{name}"


def freeze_base(model: nn.Module) -> None:
    """Every parameter but the adapters' stops requiring gradients: no weight gradient is computed for it, and
    the optimizer, DDP and FSDP see only the adapters."""
    for name, param in model.named_parameters():
        param.requires_grad_(is_adapter(name))
