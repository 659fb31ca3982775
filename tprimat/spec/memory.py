"""Per-device memory estimate for training: weights, gradients, optimizer state, activations, per framework.

An estimate for planning (will it fit?), not a measurement. What each framework keeps is data with its source
(``tprimat.spec.keeps``: weights, gradient buffer and its dtype, master weights and Adam moments, the group the
sharded state divides over, fp8 weight copies, which activation model applies). Assumptions, stated so they can
be checked:
- DeepSpeed's ZeRO 1-3 add one gradient-reduction bucket of ``reduce_bucket_size`` elements (5e8, 0.93 GiB in
  bf16) whatever the model's size (``keeps.DEEPSPEED_REDUCE_BUCKET_ELEMENTS``).
- Sharding: fsdp (FSDP2, Megatron FSDP) / ZeRO-3 shard all three; ZeRO-2 gradients and optimizer; ZeRO-1 (Megatron's
  distributed optimizer) the optimizer; over dp, or dp * cp where the framework's data-parallel group holds the
  context-parallel ranks too (Megatron-core, torchtitan).
- Megatron-core frameworks (Megatron-LM, NeMo, Primus, Megatron-DeepSpeed): ``megatron_activation_bytes`` below,
  Korthikanti et al. 2022's tally with flash attention and a Llama-style layer; the loss term is Megatron-LM's own
  (theoretical_memory_usage.py: 4 B per token per (hidden + vocab), sharded over tp).
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
- LoRA (training.peft=lora): the base's weights as the framework keeps them plus the adapters; gradients and
  optimizer state for the adapters alone. Megatron-core's activations lose the inputs of its frozen GEMMs
  (``gemm_inputs``: Transformer Engine's own rule); the other stacks' are counted as for full training, an upper
  bound (``dry_run=deep`` traces them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from tprimat.spec import flops, keeps
from tprimat.spec.flops import dims, heaviest_stage_params, mlp_matrices
from tprimat.spec.frameworks import model_as_built
from tprimat.spec.schema import TprimatConf, ac_period, full_recompute_layers, lora_of, padded_vocab, pipeline_split

GIB = 2**30
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


def estimate(spec: TprimatConf, dp: int, grad_accum_steps: int) -> MemoryEstimate:
    par, keep = spec.parallelism, keeps.of(spec)
    params = heaviest_stage_params(model_as_built(spec), par.pp, *pipeline_split(spec)) / par.tp  # the stage that must fit
    group = keeps.gradient_group(spec, dp)
    stage = 3 if par.fsdp else par.zero_stage
    w_shard = group if stage >= 3 else 1
    g_shard = group if stage >= 2 else 1
    o_shard = group if stage >= 1 else 1
    linear = stage_linear_params(spec) / par.tp
    unit = fsdp_unit_params(spec) / par.tp if keep.activations == "torch" and stage >= 3 and group > 1 else 0.0
    trained = params  # what has gradients and optimizer state: every parameter, or LoRA's adapters alone
    lora = lora_of(spec)
    if lora is not None:
        trained = flops.trained_stage_params(spec.model, par.pp, lora, *pipeline_split(spec)) / par.tp
        params += trained
    weights = params * keep.weight_bytes / w_shard + linear * keep.fp8_weight_bytes + unit * 2
    unit_grads = unit * 4 if lora is None else 0.0  # a frozen unit produces no weight gradients
    grads = trained * keep.grad_bytes / g_shard + unit_grads + keep.bucket_elements * keep.grad_bytes
    overhead = 0.5 if spec.platform.name == "cpu" else 1.5
    activations = (megatron_activation_bytes(spec, grad_accum_steps) if keep.activations == "megatron"
                   else activation_bytes(spec, grad_accum_steps))
    return MemoryEstimate(weights / GIB, grads / GIB,
                          trained * keep.optimizer_bytes / o_shard / GIB, activations / GIB, overhead)


def fsdp_unit_params(spec: TprimatConf) -> float:
    """FSDP2 (native, torchtitan, DeepSpeed ZeRO-3 alike) gathers one unit's bf16 weights at a time and produces its
    unsharded fp32 gradients before the reduce-scatter: the largest unit (a decoder layer, or the embedding / output
    head of vocab x hidden) is held whole for a moment, 2 + 4 B per parameter."""
    return max(flops.layer_params(spec.model), padded_vocab(model_as_built(spec)) * spec.model.hidden_size)


def stage_linear_params(spec: TprimatConf) -> float:
    """The decoder layers' parameters on the heaviest stage (what fp8 GEMMs cast), norms included (negligible)."""
    return flops.layer_params(spec.model) * max(flops.stages_of(spec))


def in_flight_micro_batches(spec: TprimatConf, grad_accum_steps: int) -> float:
    """Micro batches whose activations the first pipeline stage holds at once: 1 without pipelining, pp under
    1F1B (fewer when there are fewer micro batches), all of them under GPipe; an interleaved schedule (vp > 1)
    holds 1 + (pp - 1) / (pp * vp) times 1F1B's (Megatron-LM theoretical_memory_usage.py)."""
    par = spec.parallelism
    if par.pp == 1:
        return 1
    if par.pp_schedule != "1f1b":
        return grad_accum_steps
    if par.vp > 1:
        return par.pp * (1 + (par.pp - 1) / (par.pp * par.vp))
    return min(par.pp, grad_accum_steps)


def megatron_activation_bytes(spec: TprimatConf, grad_accum_steps: int) -> float:
    """Megatron-core's saved tensors per token of one layer (Korthikanti et al. 2022, Table 2, with flash attention
    and a Llama-style layer; dropout off): the inputs of the two norms and of the two column-parallel GEMMs (QKV,
    FC1; TE's fused norm+linear saves the norm output as the GEMM input), sharded over tp only under sequence
    parallelism; q/k/v and the attention output (flash attention's saved tensors, the output also the projection's
    input), the FC1 output and the activation's output (gated: gate and up, then their product), sharded over tp.
    fp8 GEMMs save their inputs in fp8 (1 B). Selective recompute (core attention) saves nothing more with flash
    attention; full recompute keeps each layer's input and rebuilds one layer at a time in the backward.
    The loss: 4 B per token per (hidden + vocab), sharded over tp, on the last stage (theoretical_memory_usage.py)."""
    d, par, tr = dims(model_as_built(spec)), spec.parallelism, spec.training
    half = 4 if tr.precision == "fp32" else 2
    qkv_in, proj_in, fc1_in, fc2_in = gemm_inputs(spec, half)
    tokens = tr.micro_batch_size * tr.seq_length / par.cp
    seq_shard = par.tp if par.sequence_parallel else 1
    gated = spec.model.mlp == "swiglu"
    replicated = 2 * d.hidden * half + d.hidden * (qkv_in + fc1_in)  # norm inputs; QKV and FC1 inputs
    split = ((d.q_size + 2 * d.kv_size) * half + d.q_size * (half + proj_in)
             + d.ffn * (2 if gated else 1) * half + d.ffn * fc2_in)  # q/k/v, attention out, FC1 out, FC2 in
    per_layer = tokens * (replicated / seq_shard + split / par.tp)
    layer_input = tokens * d.hidden * half / seq_shard

    def stage(layers: int) -> tuple[float, float]:
        """One micro batch's saved tensors on a stage of ``layers``, and one layer rebuilt in its backward."""
        recomputed = recomputed_layers(spec, layers) if tr.activation_checkpointing == "full" else 0
        return recomputed * layer_input + (layers - recomputed) * per_layer, per_layer if recomputed else 0.0

    # the first stage holds the most micro batches in flight, the last one the loss (Megatron's uneven split: each
    # has a layer fewer than the middle stages, whose fewer micro batches in flight outweigh their one more layer)
    ranks = flops.stages_of(spec)
    (first_micro, first_rebuilt), (last_micro, last_rebuilt) = stage(ranks[0]), stage(ranks[-1])
    loss = tokens * 4 * (d.hidden + d.vocab) / par.tp
    first = first_micro * in_flight_micro_batches(spec, grad_accum_steps) + first_rebuilt
    return max(first, last_micro + last_rebuilt + loss) if par.pp > 1 else first + loss


def gemm_inputs(spec: TprimatConf, half: int) -> tuple[float, float, float, float]:
    """Bytes per element Megatron-core's QKV, output projection, FC1 and FC2 save of their input for the backward.
    Trained: the GEMM's input in its dtype (1 B under fp8; the projection's fp8 copy beside flash attention's own
    bf16 output, which is counted with the attention). LoRA (Transformer Engine's own rule: ``Linear`` saves its input
    only if ``weight.requires_grad``, ``LayerNormLinear`` and ``LayerNormMLP`` free a frozen GEMM's input): a frozen
    GEMM saves none; an adapted one's adapter saves the bf16 input (Megatron-Bridge's LoRA asks the fused norm for
    its output, ``return_layernorm_output``), which for the projection is the attention output already counted."""
    gemm_in = 1 if spec.training.precision == "fp8" else half
    lora = lora_of(spec)
    if lora is None:
        return gemm_in, (gemm_in if spec.training.precision == "fp8" else 0), gemm_in, gemm_in
    adapted = set(lora.targets)
    return (half if "linear_qkv" in adapted else 0, 0, half if "linear_fc1" in adapted else 0,
            half if "linear_fc2" in adapted else 0)


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
    fp8 = tr.precision == "fp8"  # torchao Float8Linear: each linear saves its own fp8 cast of its input (1 B)
    copies = 3 + ffn_inputs if autocasts(spec) or fp8 else 2  # the attention and FFN inputs, cast per linear
    gathered = copies * d.hidden * (1 if fp8 else half)  # (full sequence under SP: gathered)
    ffn_saved = 4 if spec.model.mlp == "swiglu" else 2  # gate, up, silu(gate), product | up, gelu(up)
    fc2_input = d.ffn * (1 if fp8 else half)  # the product | gelu(up): the last linear's input
    out_proj_fp8 = d.q_size if fp8 else 0  # the attention output's fp8 copy (SDPA keeps its own bf16 one)
    split = (2 * d.q_size + 2 * d.kv_size + (ffn_saved - 1) * d.ffn) * half + fc2_input + out_proj_fp8
    per_layer_token = norms / seq_shard + gathered + split / par.tp
    layers = max(flops.stages_of(spec))  # the stage with the most
    full_layer = tokens * per_layer_token
    input_only = tokens * d.hidden * 4 / seq_shard
    recomputed = recomputed_layers(spec, layers)
    per_micro = recomputed * input_only + (layers - recomputed) * full_layer
    if op_level_sac(spec):  # every layer keeps its input, the attention output and every other GEMM output
        mm_out = d.q_size + 2 * d.kv_size + 2 * d.hidden + (mlp_matrices(spec.model) - 1) * d.ffn
        per_micro = layers * tokens * (d.hidden * half / seq_shard + (d.q_size + mm_out / 2) * half / par.tp)
    if in_flight is None:
        in_flight = in_flight_micro_batches(spec, grad_accum_steps)
    # The backward's transient peak: the loss's logits at its start, or, later, one recomputed layer (its
    # activations and cast weight copies), whichever is larger; the logits are freed before any recompute.
    layer_cache = flops.layer_params(spec.model) / par.tp * weight_cache_bytes(spec)
    rebuilt = full_layer + layer_cache if recomputed or op_level_sac(spec) else 0.0
    transient = max(logits_bytes(spec, tokens, half), rebuilt)
    return per_micro * in_flight + transient + autocast_cache_bytes(spec) - recomputed * layer_cache


def op_level_sac(spec: TprimatConf) -> bool:
    """torchtitan's selective checkpointing is op-level by default (``selective_ac_option = "op"``): it saves the
    outputs of SDPA and of every other matmul and recomputes the rest, in every layer (torchtitan
    parallelize_llama ``_apply_ac``)."""
    return spec.framework.name == "torchtitan" and spec.training.activation_checkpointing == "selective"


def weight_cache_bytes(spec: TprimatConf) -> int:
    """Bytes per local parameter of the cast weights the forward keeps for the backward: torchao float8 keeps each
    linear's fp8 weight (1 B), bf16 autocast over fp32 weights its bf16 copy (2 B), else none."""
    if spec.training.precision == "fp8":
        return 1
    return 2 if autocasts(spec) else 0


def recomputed_layers(spec: TprimatConf, layers: float) -> float:
    """Layers of the heaviest stage whose activations are recomputed: all (full), or the first N (full under
    ``training.recompute_num_layers``, Megatron's block method), every k-th from the first (selective,
    ``training.ac_frequency``), none."""
    mode = spec.training.activation_checkpointing
    if mode == "full":
        return full_recompute_layers(spec.training, layers)
    if mode == "selective":
        return math.ceil(layers / ac_period(spec.training.ac_frequency))
    return 0


def logits_bytes(spec: TprimatConf, tokens: float, half: int) -> float:
    tp, vocab = spec.parallelism.tp, padded_vocab(model_as_built(spec))
    shard = tp if spec.framework.name in VOCAB_PARALLEL_LOSS_FRAMEWORKS else 1  # native: gathered to every tp rank
    # above the logits: 12 bytes eager (the fp32 upcast, its softmax, its gradient), 2 for torchtitan's compiled
    # loss (the fused kernel keeps the logits' bf16 gradient only): both traced by bench/loss_memory.py (12.00 and
    # 2.02 bytes per logit element, 2026-11-27, inductor on this CPU; docs/benchmarks.md)
    if spec.framework.name == "torchtitan" and spec.training.compile:
        return tokens * vocab * (half + 2) / shard
    return tokens * vocab * (half + 12) / shard


def autocasts(spec: TprimatConf) -> bool:
    """Whether the framework runs bf16 autocast over fp32 weights (the native backend without FSDP2; FSDP2 casts
    through its mixed-precision policy, on one process too since 2026-11-26)."""
    return (spec.framework.name in AUTOCAST_FRAMEWORKS and spec.training.precision != "fp32"
            and not spec.parallelism.fsdp)


def autocast_cache_bytes(spec: TprimatConf) -> float:
    """Cast copies of the local weights that the forward makes and keeps for the backward (``weight_cache_bytes``;
    a recomputed layer's copies are made again in the backward: ``activation_bytes`` takes those off)."""
    par = spec.parallelism
    return heaviest_stage_params(model_as_built(spec), par.pp, *pipeline_split(spec)) / par.tp * weight_cache_bytes(spec)
