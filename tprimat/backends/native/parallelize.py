"""How the native model is laid out and wrapped for training; model.py holds only the model.

One device mesh ("pp", "dp", "tp") per run. Applied in torchtitan's order: pipeline split, tensor
parallelism (DTensor column/row-wise plans, optional sequence parallelism), activation checkpointing,
torch.compile, then data parallelism (FSDP2 ``fully_shard`` with mixed precision, or DDP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

from tprimat.backends.native.init import materialize
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf, ac_period


@dataclass
class Layout:
    """Where this rank sits: its coordinates on the (pp, dp, tp) mesh; no mesh for a single process."""

    mesh: Optional[object] = None  # torch.distributed.device_mesh.DeviceMesh
    dp: int = 1
    tp: int = 1
    pp: int = 1
    dp_rank: int = 0
    pp_rank: int = 0

    def group(self, dim: str):
        return self.mesh[dim].get_group() if self.mesh is not None else None

    @property
    def first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1


def make_layout(plan: Plan, device: torch.device, fsdp: bool = False) -> Layout:
    """The device mesh of the run's process group; none for one process, unless FSDP2 is asked for: then a one-rank
    mesh, so that parallelism.fsdp=true trains an FSDP2 module on one device as it does on many."""
    if not dist.is_initialized() or (dist.get_world_size() == 1 and not fsdp):
        return Layout()
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (plan.pp, plan.dp, plan.tp), mesh_dim_names=("pp", "dp", "tp"))
    return Layout(mesh, plan.dp, plan.tp, plan.pp, mesh["dp"].get_local_rank(), mesh["pp"].get_local_rank())


def split_pipeline_stage(model: nn.Module, layout: Layout) -> None:
    """Keep this stage's contiguous share of the layers; only the first stage embeds, only the last projects."""
    if len(model.layers) % layout.pp:
        raise ValueError(f"model.num_layers={len(model.layers)} cannot be split into parallelism.pp={layout.pp} "
                         "equal pipeline stages")
    per_stage = len(model.layers) // layout.pp
    keep = {str(i) for i in range(layout.pp_rank * per_stage, (layout.pp_rank + 1) * per_stage)}
    for name in [n for n in model.layers if n not in keep]:
        del model.layers[name]
    if not layout.first_stage:
        model.tok_embeddings = model.pos_embeddings = None
    if not layout.last_stage:
        model.norm = None
        model.output = None


def apply_tensor_parallel(model: nn.Module, layout: Layout, sequence_parallel: bool) -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    tp_mesh = layout.mesh["tp"]
    seq = Shard(1) if sequence_parallel else Replicate()
    top = {}
    if model.tok_embeddings is not None:
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if model.output is not None:
        top["output"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate())
        if sequence_parallel:
            top["norm"] = SequenceParallel()
    parallelize_module(model, tp_mesh, top)
    if model.cfg.tie_embeddings and model.tok_embeddings is not None and model.output is not None and \
            model.output.weight.placements == model.tok_embeddings.weight.placements:
        # both sharded along the vocabulary: the head takes the embedding's parameter again (parallelize_module
        # gave each its own), as Megatron's vocabulary-parallel tied embedding does
        model.output.weight = model.tok_embeddings.weight
    for block in model.layers.values():
        plan = {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=seq),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=seq),
        }
        if block.feed_forward.gated:
            plan["feed_forward.w3"] = ColwiseParallel()
        if sequence_parallel:
            plan.update({
                "attention_norm": SequenceParallel(), "ffn_norm": SequenceParallel(),
                "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                                desired_input_layouts=(Replicate(), None, None)),
                "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            })
        parallelize_module(block, tp_mesh, plan)


class Checkpointed(nn.Module):
    """Recompute a block's activations in the backward pass instead of keeping them."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, *args, use_reentrant=False)


def apply_activation_checkpointing(model: nn.Module, mode: str, every_k: int = 2) -> None:
    """``full``: every block; ``selective``: every ``every_k``-th block (``training.ac_frequency``; torchtitan's
    layer-selective option)."""
    if mode == "none":
        return
    every = 1 if mode == "full" else every_k
    for name in list(model.layers):
        if int(name) % every == 0:
            model.layers[name] = Checkpointed(model.layers[name])


def apply_compile(model: nn.Module, mode: str = "default") -> None:
    """Compile each block separately (as torchtitan does): the same code is reused by every layer. ``mode``:
    torch.compile's (``training.compile_mode``; the CUDA-graph modes are refused on GPUs by the backend's check)."""
    for name in list(model.layers):
        model.layers[name] = torch.compile(model.layers[name], mode=None if mode == "default" else mode)


def apply_fsdp(model: nn.Module, layout: Layout, precision: str) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dp_mesh = layout.mesh["dp"]
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if precision != "fp32" \
        else MixedPrecisionPolicy()
    for block in model.layers.values():
        fully_shard(block, mesh=dp_mesh, mp_policy=mp)
    fully_shard(model, mesh=dp_mesh, mp_policy=mp)


def apply_ddp(model: nn.Module, layout: Layout, device: torch.device) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                   process_group=layout.group("dp"))


def apply_float8(model: nn.Module, recipe: str = "tensorwise") -> None:
    """fp8 GEMMs through torchao float8 training with dynamic scaling, per tensor (``tensorwise``) or per row
    (``rowwise``, ``training.fp8.recipe``); the output projection stays bf16."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                               module_filter_fn=lambda module, fqn: fqn != "output")


def parallelize(model: nn.Module, spec: TprimatConf, layout: Layout, device: torch.device,
                allocate: bool = True) -> nn.Module:
    """The layout applied in torchtitan's order; a meta-device model then gets this rank's shards only
    (``allocate=False``: left on meta, for ``deep.py``'s fake-world checks)."""
    par, tr = spec.parallelism, spec.training
    if layout.pp > 1:
        split_pipeline_stage(model, layout)
    if tr.precision == "fp8":
        apply_float8(model, tr.fp8.recipe)
    if layout.tp > 1:
        apply_tensor_parallel(model, layout, par.sequence_parallel)
    apply_activation_checkpointing(model, tr.activation_checkpointing, ac_period(tr.ac_frequency))
    if tr.compile:
        apply_compile(model, tr.compile_mode)
    fsdp = par.fsdp and layout.mesh is not None
    if fsdp:
        apply_fsdp(model, layout, tr.precision)
    if allocate and next(model.parameters()).is_meta:  # built on the meta device: this rank's shards only
        materialize(model, spec.model, tr.seed, device)
    if not fsdp and layout.dp > 1 and allocate:  # DDP replicates: it needs the real tensors (and changes no shard)
        return apply_ddp(model, layout, device)
    return model


def uses_autocast(spec: TprimatConf, layout: Layout) -> bool:
    """FSDP2 casts parameters itself (MixedPrecisionPolicy); everything else uses bf16 autocast (fp8 GEMMs
    run inside torchao's float8 linears, the rest in bf16)."""
    return spec.training.precision != "fp32" and not (spec.parallelism.fsdp and layout.mesh is not None)


def clip_grad_norm(parameters: list[nn.Parameter], max_norm: float, pp_group=None) -> torch.Tensor:
    """Global grad norm over plain, DDP, FSDP2 (sharded) and TP (DTensor) gradients, summed over pipeline
    stages; clips in place when ``max_norm > 0``. Returns the pre-clip norm."""
    from torch.distributed.tensor import DTensor

    by_mesh: dict = {}
    for p in parameters:
        if p.grad is not None:
            key = id(p.grad.device_mesh) if isinstance(p.grad, DTensor) else None
            by_mesh.setdefault(key, []).append(p.grad)
    squares = []
    for grads in by_mesh.values():
        norm = torch.nn.utils.get_total_norm(grads, 2.0)
        norm = norm.full_tensor() if isinstance(norm, DTensor) else norm
        squares.append(norm.float() ** 2)
    total_sq = torch.stack(squares).sum() if squares else torch.zeros(())
    if pp_group is not None:
        dist.all_reduce(total_sq, group=pp_group)
    total = total_sq.sqrt()
    if max_norm > 0:
        coef = min(1.0, max_norm / (total.item() + 1e-6))
        if coef < 1.0:
            for grads in by_mesh.values():
                for g in grads:
                    g.mul_(coef)
    return total
