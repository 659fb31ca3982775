"""What each framework keeps in device memory per parameter, and which activation model applies: data with sources.

``tprimat.spec.memory`` turns these into an estimate. Bytes are per parameter of the device's stage before
sharding; ``optimizer_bytes`` is the fp32 master copy (where the model copy is not fp32) plus Adam's two moments.
"""

from __future__ import annotations

from dataclasses import dataclass

from tprimat.spec.schema import TprimatConf


@dataclass(frozen=True)
class Keeps:
    weight_bytes: float  # the model copy the forward reads
    grad_bytes: float  # the gradient buffer the backward accumulates into
    optimizer_bytes: float  # fp32 master weights (if the model copy is not fp32) + Adam m and v
    fp8_weight_bytes: float  # per decoder-layer parameter under training.precision=fp8 (cast weights kept for the backward)
    shards_over_cp: bool  # the sharded state divides over dp * cp (else dp)
    activations: str  # "megatron" (Megatron-core's saved tensors) | "torch" (the native decoder's, traced)
    source: str
    bucket_elements: int = 0  # a gradient-reduction buffer allocated whole, in the gradients' dtype (DeepSpeed ZeRO)


MEGATRON_CORE = ("megatron", "primus", "nemo")
# DeepSpeed's zero_optimization.reduce_bucket_size default (deepspeed/runtime/zero/config.py), which tprimat's
# generated config states: ZeRO 1-3 allocate one bucket of this many elements in the gradients' dtype whatever the
# model's size (runtime/zero/stage3.py: the IPG bucket; stage_1_and_2.py setup_buckets), 0.93 GiB in bf16.
DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000


def deepspeed_bucket(spec: TprimatConf) -> int:
    """Elements of the reduce bucket the DeepSpeed engine (framework=deepspeed, or the Trainer's DeepSpeed
    integration) allocates under ZeRO 1-3; none at stage 0. (Megatron-DeepSpeed's bf16 pipeline engine runs
    DeepSpeed's BF16_Optimizer, not this path.)"""
    engine = spec.framework.name in ("deepspeed", "transformers")
    return DEEPSPEED_REDUCE_BUCKET_ELEMENTS if engine and spec.parallelism.zero_stage else 0


def of(spec: TprimatConf) -> Keeps:
    name, tr, bucket = spec.framework.name, spec.training, deepspeed_bucket(spec)
    if tr.precision == "fp32":
        return Keeps(4, 4, 8, 0, name in (*MEGATRON_CORE, "torchtitan"),
                     "megatron" if name in (*MEGATRON_CORE, "megatron_deepspeed") else "torch",
                     "fp32 training: fp32 weights and gradients, Adam's two fp32 moments", bucket)
    if name in MEGATRON_CORE:
        grads = 4 if tr.grad_reduce_in_fp32 else 2
        return Keeps(2, grads, 12, 1 if tr.precision == "fp8" else 0, True, "megatron", MEGATRON_SOURCE)
    if name == "megatron_deepspeed":
        return Keeps(2, 4, 12, 0, False, "megatron",
                     "Megatron-DeepSpeed: bf16 model, DeepSpeed's bf16 optimizer with fp32 gradient accumulation "
                     "and fp32 master + moments (ZeRO-1 over dp)")
    if name == "deepspeed" or (name == "transformers" and spec.parallelism.zero_stage):
        return Keeps(2, 2, 12, 0, False, "torch",
                     "DeepSpeed bf16 (the engine casts the module to bf16; the Transformers Trainer's DeepSpeed "
                     "integration hands it the same engine): 2 + 2 + 12 B per parameter, the ZeRO paper's "
                     "mixed-precision accounting (Rajbhandari et al. 2020, K = 12), stage 1-3 sharding over dp, and "
                     "ZeRO 1-3's reduce bucket (reduce_bucket_size elements, deepspeed/runtime/zero)", bucket)
    if name == "torchtitan":
        return Keeps(4, 4, 8, 0, True, "torch",
                     "torchtitan FSDP2: fp32 sharded parameters and gradients (MixedPrecisionPolicy param_dtype bf16, "
                     "reduce_dtype fp32: bf16 copies are gathered per block), Adam moments fp32, sharded over the "
                     "dp_shard x cp mesh (torchtitan parallelize_llama)")
    return Keeps(4, 4, 8, 0, False, "torch",
                 "fp32 weights under bf16 autocast (native, the Transformers Trainer's bf16=True): fp32 gradients and "
                 "Adam moments")


def gradient_group(spec: TprimatConf, dp: int) -> int:
    """The ranks a framework reduces gradients and shards its optimizer over: data-parallel x context-parallel ranks
    where it holds them there (Megatron-core's DDP and distributed optimizer take the data-parallel group
    with_context_parallel; torchtitan shards over its dp_shard x cp mesh), else the data-parallel ranks."""
    return dp * (spec.parallelism.cp if of(spec).shards_over_cp else 1)


MEGATRON_SOURCE = ("Megatron-core: bf16 weights; gradients in fp32 (Megatron-LM forces fp32 accumulation and reduction "
                   "for bf16 unless --grad-reduce-in-bf16; NeMo/Megatron-Bridge grad_reduce_in_fp32, set false by "
                   "NVIDIA's performance recipes); the distributed optimizer's fp32 master + Adam m, v (12 B, "
                   "theoretical_memory_usage.py: 6 + 12/dp B per parameter) sharded over the data-parallel group, "
                   "context-parallel ranks included; Transformer Engine keeps the fp8 cast of each GEMM weight for "
                   "the backward (1 B)")
