"""Per-device memory estimate for training: weights, gradients, optimizer state, activations.

An estimate for planning (will it fit?), not a measurement. Assumptions, stated so they can be checked:
- Mixed precision keeps fp32 master weights. Frameworks with a bf16 model copy (Megatron-LM, NeMo, Primus)
  hold 2 B/param weights + 4 B/param fp32 gradients + 12 B/param optimizer (master + Adam m, v); autocast
  frameworks (native, transformers, DeepSpeed, torchtitan) hold fp32 weights (4) + fp32 grads (4) + Adam (8).
- Sharding over dp: fsdp / ZeRO-3 shard all three; ZeRO-2 gradients and optimizer; ZeRO-1 the optimizer.
- Activations per token per layer follow the decoder's saved tensors with fused (flash / SDPA) attention:
  fp32 RMSNorm inputs and outputs (on the sequence shard under sequence parallelism), the normalised inputs of
  attention and FFN in the compute dtype (sequence parallelism all-gathers them to the full sequence before
  the column-parallel linears, and the gathered tensors are what is saved), bf16 q/k/v and attention output,
  four SwiGLU intermediates. bf16 autocast (native without FSDP2) casts an input once per linear that reads
  it, and each linear saves its own copy: the attention input three times (q, k, v), the FFN input twice.
  Full recompute keeps only layer inputs.
- The loss: the logits in the compute dtype (held by the caller through the backward), the fp32 log-softmax
  output, the loss gradient and the log-softmax input gradient: half + 12 B per token per vocab entry at the
  peak of its backward (a trace of the head alone gives 14.3 B in bf16). Sharded over tp where the framework
  computes a vocab-parallel loss; full on every tp rank where the output layer gathers them (native).
- bf16 autocast over fp32 weights (native without FSDP2) caches the bf16 copy of every weight it casts in the
  forward until the backward has used it: 2 B per local parameter, counted with the activations.
- These terms come from tracing the native layouts over fake tensors (``dry_run=deep``, ``bench/memory.py
  --activations``); docs/benchmarks.md has the table.
- 1F1B pipelines keep up to pp micro batches in flight on the first stage, GPipe all of them.
- A fixed runtime overhead (CUDA/HIP context, library workspaces): 1.5 GiB on GPUs, 0.5 GiB on CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from tprimat.spec import flops
from tprimat.spec.flops import dims, heaviest_stage_params, mlp_matrices
from tprimat.spec.schema import TprimatConf, ac_period, padded_vocab

GIB = 2**30
# bf16 weights, fp32 gradients and fp32 master weights + moments (Megatron-DeepSpeed: DeepSpeed's bf16 optimizer)
BF16_MODEL_COPY_FRAMEWORKS = ("megatron", "nemo", "primus", "megatron_deepspeed")
VOCAB_PARALLEL_LOSS_FRAMEWORKS = ("megatron", "nemo", "primus", "torchtitan", "megatron_deepspeed")  # logits
# stay sharded over tp
AUTOCAST_FRAMEWORKS = ("native",)  # bf16 autocast over fp32 weights without FSDP2


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


def activation_bytes(spec: TprimatConf, grad_accum_steps: int, in_flight: Optional[int] = None) -> float:
    """Activations (and the autocast weight cache) of the heaviest pipeline stage; ``in_flight``: micro batches
    held at once (default: the schedule's), 1 for one micro batch as ``dry_run=deep`` traces it."""
    d = dims(spec.model)
    par, tr = spec.parallelism, spec.training
    tokens = tr.micro_batch_size * tr.seq_length / par.cp
    half = 4 if tr.precision == "fp32" else 2
    seq_shard = par.tp if par.sequence_parallel else 1
    if spec.model.norm == "layernorm":  # two LayerNorms keep their input: the fp32 residual stream under autocast
        norms = 2 * d.hidden * (4 if autocasts(spec) else half)
    else:  # two RMSNorms (computed in fp32): fp32 input and normalised output
        norms = 2 * 2 * d.hidden * 4
    ffn_inputs = mlp_matrices(spec.model) - 1  # gate and up (SwiGLU), up (GELU)
    copies = 3 + ffn_inputs if autocasts(spec) else 2  # the attention and FFN inputs, cast per linear under autocast
    gathered = copies * d.hidden * half  # in the compute dtype (full sequence under SP: gathered)
    ffn_saved = 4 if spec.model.mlp == "swiglu" else 2  # gate, up, silu(gate), product | up, gelu(up)
    split = (2 * d.q_size + 2 * d.kv_size + ffn_saved * d.ffn) * half  # (rotated) q/k, v, attention out, MLP
    per_layer_token = norms / seq_shard + gathered + split / par.tp
    layers = d.layers / par.pp
    full_layer = tokens * per_layer_token
    input_only = tokens * d.hidden * 4 / seq_shard
    recomputed = recomputed_layers(spec, layers)
    per_micro = recomputed * input_only + (layers - recomputed) * full_layer
    if in_flight is None:
        in_flight = 1
        if par.pp > 1:
            in_flight = min(par.pp, grad_accum_steps) if par.pp_schedule == "1f1b" else grad_accum_steps
    # The backward's transient peak: the loss's logits at its start, or, later, one recomputed layer (its
    # activations and autocast weight copies), whichever is larger; the logits are freed before any recompute.
    layer_cache = flops.layer_params(spec.model) / par.tp * 2 if autocasts(spec) else 0.0
    transient = max(logits_bytes(spec, tokens, half), full_layer + layer_cache if recomputed else 0.0)
    return per_micro * in_flight + transient + autocast_cache_bytes(spec) - recomputed * layer_cache


def recomputed_layers(spec: TprimatConf, layers: float) -> float:
    """Layers of the heaviest stage whose activations are recomputed: all (full), every k-th from the first
    (selective, ``training.ac_frequency``), none."""
    mode = spec.training.activation_checkpointing
    if mode == "full":
        return layers
    if mode == "selective":
        return math.ceil(layers / ac_period(spec.training.ac_frequency))
    return 0


def logits_bytes(spec: TprimatConf, tokens: float, half: int) -> float:
    tp, vocab = spec.parallelism.tp, padded_vocab(spec.model)
    shard = tp if spec.framework.name in VOCAB_PARALLEL_LOSS_FRAMEWORKS else 1  # native: gathered to every tp rank
    return tokens * vocab * (half + 12) / shard


def autocasts(spec: TprimatConf) -> bool:
    """Whether the framework runs bf16 autocast over fp32 weights (the native backend without FSDP2)."""
    par, plat = spec.parallelism, spec.platform
    fsdp2 = par.fsdp and plat.devices_per_node * plat.nodes > 1
    return spec.framework.name in AUTOCAST_FRAMEWORKS and spec.training.precision != "fp32" and not fsdp2


def autocast_cache_bytes(spec: TprimatConf) -> float:
    """bf16 copies of the local weights that autocast casts in the forward and keeps for the backward (a
    recomputed layer's copies are made again in the backward: ``activation_bytes`` takes those off)."""
    par = spec.parallelism
    return heaviest_stage_params(spec.model, par.pp) / par.tp * 2 if autocasts(spec) else 0.0
