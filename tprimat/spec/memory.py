"""Per-device memory estimate for training: weights, gradients, optimizer state, activations.

An estimate for planning (will it fit?), not a measurement. Assumptions, stated so they can be checked:
- Mixed precision keeps fp32 master weights. Frameworks with a bf16 model copy (Megatron-LM, NeMo, Primus)
  hold 2 B/param weights + 4 B/param fp32 gradients + 12 B/param optimizer (master + Adam m, v); autocast
  frameworks (native, transformers, DeepSpeed, torchtitan) hold fp32 weights (4) + fp32 grads (4) + Adam (8).
- Sharding over dp: fsdp / ZeRO-3 shard all three; ZeRO-2 gradients and optimizer; ZeRO-1 the optimizer.
- Activations per token per layer follow the decoder's saved tensors with fused (flash / SDPA) attention:
  fp32 RMSNorm inputs and outputs, bf16 q/k/v and attention output, four SwiGLU intermediates;
  logits cost 10 B per token per vocab entry
  (bf16 logits, fp32 upcast for cross-entropy, fp32 gradient). Full recompute keeps only layer inputs.
- 1F1B pipelines keep up to pp micro batches in flight on the first stage, GPipe all of them.
- A fixed runtime overhead (CUDA/HIP context, library workspaces): 1.5 GiB on GPUs, 0.5 GiB on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from tprimat.spec.flops import dims, heaviest_stage_params
from tprimat.spec.schema import TprimatConf

GIB = 2**30
BF16_MODEL_COPY_FRAMEWORKS = ("megatron", "nemo", "primus")


@dataclass(frozen=True)
class MemoryEstimate:
    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    activations_gib: float
    overhead_gib: float

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.grads_gib + self.optimizer_gib + self.activations_gib + self.overhead_gib

    def as_dict(self) -> dict:
        return {"weights_gib": self.weights_gib, "grads_gib": self.grads_gib, "optimizer_gib": self.optimizer_gib,
                "activations_gib": self.activations_gib, "overhead_gib": self.overhead_gib,
                "total_gib": self.total_gib}


def state_bytes_per_param(spec: TprimatConf) -> tuple[float, float, float]:
    if spec.training.precision != "fp32" and spec.framework.name in BF16_MODEL_COPY_FRAMEWORKS:
        return 2.0, 4.0, 12.0
    return 4.0, 4.0, 8.0


def estimate(spec: TprimatConf, dp: int, grad_accum_steps: int) -> MemoryEstimate:
    par = spec.parallelism
    params = heaviest_stage_params(spec.model, par.pp) / par.tp  # the stage that must fit (traced: plan --deep)
    w, g, o = state_bytes_per_param(spec)
    stage = 3 if par.fsdp else par.zero_stage
    w_shard = dp if stage >= 3 else 1
    g_shard = dp if stage >= 2 else 1
    o_shard = dp if stage >= 1 else 1
    overhead = 0.5 if spec.platform.name == "cpu" else 1.5
    return MemoryEstimate(params * w / w_shard / GIB, params * g / g_shard / GIB, params * o / o_shard / GIB,
                          activation_bytes(spec, grad_accum_steps) / GIB, overhead)


def activation_bytes(spec: TprimatConf, grad_accum_steps: int) -> float:
    d = dims(spec.model)
    par, tr = spec.parallelism, spec.training
    tokens = tr.micro_batch_size * tr.seq_length / par.cp
    half = 4 if tr.precision == "fp32" else 2
    replicated = 2 * (2 * d.hidden * 4 + d.hidden * half)  # two RMSNorms: fp32 input + normalised, cast
    split = (2 * d.q_size + 2 * d.kv_size + 4 * d.ffn) * half  # rotated q/k, v, attention out, SwiGLU
    per_layer_token = (replicated / (par.tp if par.sequence_parallel else 1)) + split / par.tp
    layers = d.layers / par.pp
    full_layer = tokens * per_layer_token
    input_only = tokens * d.hidden * 4 / (par.tp if par.sequence_parallel else 1)
    mode = tr.activation_checkpointing
    if mode == "full":
        per_micro = layers * input_only + full_layer
    elif mode == "selective":  # every other layer recomputed
        per_micro = (layers / 2) * (full_layer + input_only) + full_layer
    else:
        per_micro = layers * full_layer
    logits = tokens * d.vocab * 10 / par.tp
    in_flight = 1
    if par.pp > 1:
        in_flight = min(par.pp, grad_accum_steps) if par.pp_schedule == "1f1b" else grad_accum_steps
    return per_micro * in_flight + logits
