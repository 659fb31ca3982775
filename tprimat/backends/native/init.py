"""Meta-device initialisation, in torchtitan's order: the model is built on the meta device (no memory), laid
out (pipeline split, TP/SP, FSDP2, recompute, compile), and only then does each rank allocate its own shards
(``to_empty``) and fill them. A 70B model with tp=8 and FSDP never exists whole on any rank.

Every parameter's initial value is a function of the seed, its name and its shape alone: it is drawn full size,
one parameter at a time, on the rank's device from a generator seeded by (seed, name), and cut to this rank's
shard (``distribute_tensor`` with each rank's own copy, no communication). Every layout therefore starts from
exactly the model a single process builds. Weights are Normal(0, 0.02), output projections scaled by
1/sqrt(2 * layers) (GPT-2 / Megatron), biases zero, norms one; a LoRA adapter's A is Kaiming-uniform (bound
1/sqrt(fan_in), as ``nn.Linear``, PEFT and NeMo's ``column_init_method: kaiming`` draw it) and its B zero.
"""

from __future__ import annotations

import hashlib
import math

import torch
from torch import nn

from tprimat.backends.native.lora import is_adapter
from tprimat.spec.schema import ModelConf

WRAPPERS = ("_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.", "module.")
CHECKPOINTED = ".block."  # parallelize.Checkpointed keeps the wrapped block as ``block``
STD = 0.02
SCALED = ("attention.wo.weight", "feed_forward.w2.weight")


def canonical(fqn: str) -> str:
    """A parameter's name in the plain model, whatever wrappers (compile, recompute, FSDP, DDP) added."""
    for wrapper in WRAPPERS:
        fqn = fqn.replace(wrapper, "")
    return fqn.replace(CHECKPOINTED, ".")


def seed_of(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "little") & (2**63 - 1)


def initial_value(name: str, shape: torch.Size, cfg: ModelConf, seed: int, device: torch.device) -> torch.Tensor:
    """The full-size initial value of parameter ``name`` (float32)."""
    if name.endswith("norm.weight"):
        return torch.ones(shape, device=device)
    if name.endswith(".bias") or (is_adapter(name) and name.endswith(".b.weight")):
        return torch.zeros(shape, device=device)
    generator = torch.Generator(device=device).manual_seed(seed_of(seed, name))
    if is_adapter(name):  # an adapter's A: (rank, fan_in)
        bound = 1.0 / math.sqrt(shape[-1])
        return torch.empty(shape, device=device).uniform_(-bound, bound, generator=generator)
    std = STD / math.sqrt(2 * cfg.num_layers) if name.endswith(SCALED) else STD
    return torch.empty(shape, device=device).normal_(0.0, std, generator=generator)


def to_empty_keeping_ties(model: nn.Module, device: torch.device) -> None:
    """``model.to_empty(device)`` with tied parameters (GPT-2's embedding and output head) still one parameter:
    a plain ``to_empty`` gives each module its own new tensor off the meta device, silently untying them; with
    the swap conversion each parameter object keeps its identity, and with it every module that holds it."""
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.to_empty(device=device)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)


def materialize(model: nn.Module, cfg: ModelConf, seed: int, device: torch.device) -> None:
    """Allocate this rank's shards of a meta-device model on ``device`` and give them their initial values."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    from tprimat.backends.native.model import head_dim_of, rope_frequencies

    to_empty_keeping_ties(model, device)
    with torch.no_grad():
        for fqn, param in model.named_parameters():
            full = initial_value(canonical(fqn), param.shape, cfg, seed, device)
            if isinstance(param, DTensor):
                full = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
            param.copy_(full.to(param.dtype))
        for module in model.modules():
            if "inv_freq" in getattr(module, "_buffers", {}):
                module.inv_freq = rope_frequencies(cfg, head_dim_of(cfg)).to(device)
