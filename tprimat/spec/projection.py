"""Projected step time of a spec on a target device: a roofline of the traced operations plus the layout's
communication. Pure arithmetic over data: the operations come from a fake-tensor trace
(``tprimat.backends.native.opcount``), the ceilings from the hardware table or a ``tprimat preflight`` file.

Model, each assumption stated in the result's ``projection.assumptions``:
- An operation takes max(FLOPs / compute ceiling, bytes / memory bandwidth), plus (CPU, synchronous) or at
  least (GPU, launched ahead) the per-operation overhead a preflight measured; a micro batch on one device is the
  sum over its operations (one decoder layer traced, times the layers of the heaviest pipeline stage, plus the
  output head and loss). Tensor parallelism divides each layer's work evenly over ``tp``; context parallelism
  gives each rank seq/cp queries against all keys.
- Linear layers run at the matmul ceiling of the training precision, attention (BF16, also under FP8) at what
  the stack's fused kernel was measured to reach (``tprimat.spec.kernels``: FlashAttention-2 under torch's SDPA,
  cuDNN under Transformer Engine), other operations at the memory bandwidth, one by one as eager PyTorch runs
  them (compile's fusion is not modelled). A power cap below the TDP is not modelled (stated when set). Full
  recompute repeats the layer's forward; selective recompute repeats attention (Megatron-style), every k-th
  layer (native, DeepSpeed) or every operation but attention and every other matmul (torchtitan's op SAC).
- Collectives are rings: all-reduce moves 2(n-1)/n of the buffer, all-gather and reduce-scatter (n-1)/n, over
  the group's slowest link (inside a node when the group fits in one; across nodes, one NIC per member the
  group has in each node, as NCCL/RCCL spread rings over every NIC, capped by the in-node links).
  Tensor-parallel and pipeline transfers are exposed; FSDP, data-parallel and context-parallel traffic
  overlaps compute and only its excess over the compute it hides behind is exposed, on GPUs; on a CPU, FSDP and
  data-parallel traffic is exposed whole (gloo's thread needs the cores the compute uses), and so it is where the
  stack reduces gradients after the backward (the DeepSpeed engine below ZeRO-3).
- The pipeline bubble is (pp - 1) micro-batch times per step (1F1B and GPipe alike), (pp - 1) / vp under an
  interleaved schedule (Narayanan et al. 2021, Megatron-LM's interleaved 1F1B); the optimizer step
  reads and writes 28 bytes per local parameter (AdamW in fp32: parameter, gradient, two moments).
- One learned term (``tprimat.spec.op_gap``): on a GPU whose ceilings come from the hardware table, each traced
  operation adds a gap beyond its roofline (kernel launch, fill and drain, a small GEMM's last wave), learned from
  the development rows alone by least median error and scored leave-one-family-out (``bench/op_gap.py``).
- Context parallelism's all-to-all (parallelism.cp_comm_type=a2a, Megatron-core's Ulysses-style CP): each rank
  attends over the whole sequence with heads / cp (its kernel at the full sequence's throughput), and the all-to-alls
  of Q, K, V and the output, forward and backward, are exposed.
- On Blackwell, cuDNN's attention runs at what NVIDIA's cuDNN benchmark measured on the part itself
  (``kernels.CUDNN_ON_DEVICE``; FP8 under training.fp8.attention).
- Gradients reduce over the group the framework holds them in: data-parallel x context-parallel ranks for
  Megatron-core and torchtitan, data-parallel ranks alone otherwise.
- LoRA (training.peft=lora): the trace builds the adapters and freezes the base, so its backward holds only the
  GEMMs autograd runs (input gradients through frozen weights, no weight gradients but the adapters'); gradient
  traffic and the optimizer step cover the adapters alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from tprimat.spec import flops, hardware, keeps, kernels, op_gap, record
from tprimat.spec.compat import te_scaling
from tprimat.spec.frameworks import model_as_built
from tprimat.spec.schema import TprimatConf, ac_period, all_to_all_cp, full_recompute_layers, lora_of, pipeline_split

ADAMW_BYTES_PER_PARAM = 28.0  # read parameter, gradient, exp_avg, exp_avg_sq; write parameter and both moments
FLASH_NOTE = "attention at the stack's fused kernel's measured throughput, scaled by the device's matmul ceiling"
ASSUMPTIONS = (
    "roofline per traced operation: max(FLOPs / ceiling, bytes / memory bandwidth), eager op by op",
    "tensor parallelism splits each layer's work evenly; context parallelism: seq/cp queries against all keys (a ring), "
    "or all queries with heads / cp and exposed all-to-alls (cp_comm_type=a2a)",
    FLASH_NOTE + " at the sequence each call sees (seq/cp under context parallelism)",
    "ring collectives over the group's slowest link (across nodes: one NIC per local member of the group); TP and "
    "pipeline transfers exposed, FSDP/DP/CP traffic overlapped with compute (only its excess exposed)",
    "pipeline bubble (pp - 1) / vp micro-batch times per step; AdamW step 28 B per local parameter over HBM",
    "a learned gap per traced operation on a GPU (tprimat.spec.op_gap: its value, rows and cross-validated error "
    "in the sources); gradients reduced over data-parallel x context-parallel ranks where the framework holds them so",
    "fp8 under Transformer Engine (Megatron-LM, NeMo, Primus): its quantize kernels over HBM, the unfused inputs "
    "and the norms' outputs forward and every output gradient backward, read in BF16 and written row-wise in FP8, and "
    "column-wise where the weight trains and the GPU needs the copy (not Blackwell); current scaling reads each input "
    "once more for its amax (its amax all-reduce under sequence parallelism not modelled)",
)


@dataclass(frozen=True)
class OpCost:
    """One traced operation (or a sum of identical ones) for one micro batch on one device."""

    kind: str  # matmul | attention | memory
    flops: float
    bytes: float


@dataclass(frozen=True)
class Work:
    """One micro batch's operations, by part (``layer``: one decoder layer, ``head``: final norm, output and
    loss, ``embedding``) and phase (``fwd``, ``bwd``), as traced at the layout's local shapes before TP."""

    parts: dict  # {part: {"fwd": [OpCost], "bwd": [OpCost]}}

    def ops(self, part: str, phase: str) -> list[OpCost]:
        return list(self.parts.get(part, {}).get(phase, ()))


@dataclass(frozen=True)
class Ceilings:
    matmul_tflops: float  # the training precision's linear layers
    attention_tflops: float  # attention: BF16 kernels, also under FP8
    memory_gb_s: float
    intra_node_gb_s: Optional[float]  # per direction, per GPU
    inter_node_gb_s: Optional[float]
    sources: dict = field(default_factory=dict)
    op_overhead_s: float = 0.0  # per operation: dispatch (and launch) cost, measured by tprimat preflight
    synchronous: bool = False  # CPU: an operation's overhead adds to its work; GPU: launches run ahead
    attention_bwd_tflops: Optional[float] = None  # the attention kernel's backward, when it differs
    op_gap_s: float = 0.0  # per operation on a GPU beyond its roofline: learned (``tprimat.spec.op_gap``)


def ceilings(spec: TprimatConf, preflight: Optional[dict] = None) -> tuple[Optional[Ceilings], Optional[str]]:
    """The target's ceilings: a ``tprimat preflight`` file's measurements first, else the hardware table's
    published figures; (None, why) when neither knows the device."""
    if preflight is not None:
        return preflight_ceilings(preflight, spec.training.precision)
    if spec.platform.name == "cpu":
        return None, "a CPU has no published ceilings: pass a tprimat preflight file (--preflight)"
    key = spec.platform.gpu
    device, bandwidth = hardware.lookup(key), hardware.BANDWIDTHS.get(key or "")
    if device is None or bandwidth is None:
        return None, f"platform.gpu={key}: no peak or bandwidth in the hardware table"
    matmul, why = matmul_ceiling(spec, device)
    if matmul is None:
        return None, why
    capped = f" (platform.power_limit_w={spec.platform.power_limit_w:g} W: {kernels.POWER_CAP_NOTE})" \
        if kernels.power_capped(spec.platform.power_limit_w, device.tdp_w) else ""
    (fwd, bwd), attention_source = attention_ceilings(spec, device)
    gap = op_gap.learned()
    return Ceilings(matmul, fwd, bandwidth.hbm_gb_s, bandwidth.link_gb_s, hardware.INTER_NODE_GB_S,
                    {"matmul": why + capped, "attention": attention_source, "memory": bandwidth.source,
                     "intra_node": bandwidth.source, "inter_node": hardware.INTER_NODE_SOURCE,
                     "op_gap": op_gap.source(gap)},
                    attention_bwd_tflops=bwd, op_gap_s=gap.seconds if gap else 0.0), None


def attention_ceilings(spec: TprimatConf, device: hardware.DeviceSpec) -> tuple[tuple[float, float], str]:
    """((forward, backward) TFLOP/s of the stack's attention kernel on the device, its source); FP32 attention
    runs no fused BF16 kernel: the BF16 matmul ceiling, as before."""
    bf16, bf16_source = bf16_ceiling(device)
    if spec.training.precision == "fp32":
        return (bf16, bf16), bf16_source
    seq = call_tokens(spec)
    on_device = measured_attention(spec, device, seq)
    if on_device is not None:
        return on_device[0], f"{on_device[1]} at {seq:g} tokens a call"
    kernel, scale = kernels.attention_kernel(spec.framework.name), bf16 / kernels.H100_MAMF_TFLOPS
    fwd, bwd = kernel.tflops(seq)
    fp8_note = "; FP8 attention (training.fp8.attention): no FP8 figure measured on this device, its BF16 kernel's" \
        if fp8_attention(spec) else ""
    return (fwd * scale, bwd * scale), (f"{kernel.name} at {seq:g} tokens a call: {kernel.source}, x the device's "
                                        f"matmul ceiling / H100's ({bf16_source}){fp8_note}")


def call_tokens(spec: TprimatConf) -> float:
    """The queries one attention kernel call holds: seq/cp under a ring (a ring step), the whole sequence under
    all-to-all context parallelism (its heads / cp instead) or without CP."""
    return spec.training.seq_length / (1 if all_to_all_cp(spec) else spec.parallelism.cp)


def fp8_attention(spec: TprimatConf) -> bool:
    return spec.training.precision == "fp8" and spec.training.fp8.attention


def measured_attention(spec: TprimatConf, device: hardware.DeviceSpec,
                       seq: float) -> Optional[tuple[tuple[float, float], str]]:
    """cuDNN's attention as measured on this device (or on a part of its architecture, at the same fraction of the
    matmul ceiling) for calls of ``seq`` tokens, in FP8 under training.fp8.attention; None for a stack that runs
    another kernel or a device without such a figure."""
    if kernels.STACK_ATTENTION.get(spec.framework.name) != "cudnn":
        return None
    kin = kernels.CUDNN_SAME_ARCHITECTURE.get(device.key, device.key)
    tables = kernels.CUDNN_ON_DEVICE.get(kin)
    if tables is None:
        return None
    kernel = tables["fp8" if fp8_attention(spec) else "bf16"]
    scale = 1.0 if kin == device.key else bf16_ceiling(device)[0] / bf16_ceiling(hardware.DEVICES[kin])[0]
    fwd, bwd = kernel.tflops(seq)
    kin_note = "" if kin == device.key else f", x this part's matmul ceiling / {kin}'s (the same architecture)"
    return (fwd * scale, bwd * scale), f"{kernel.name}: {kernel.source}{kin_note}"


def bf16_ceiling(device: hardware.DeviceSpec) -> tuple[float, str]:
    """The measured BF16 matmul ceiling (MAMF) of the device, its die or its architecture, else its spec peak."""
    measured = mamf_ceiling(device, hardware.MAMF_BF16_TFLOPS, device.bf16_tflops, "BF16")
    return measured or (device.bf16_tflops, device.source + " (spec peak: no published measured ceiling)")


def mamf_ceiling(device: hardware.DeviceSpec, table: dict, peak: Optional[float],
                 label: str) -> Optional[tuple[float, str]]:
    """A measured matmul ceiling (``table``: MAMF by part) of the device, of its die, or its spec ``peak`` at the
    fraction of its spec peak a part of its architecture reaches; None where none is measured."""
    die = hardware.MAMF_SAME_DIE.get(device.key, device.key)
    for key in dict.fromkeys((device.key, die)):
        if key in table:
            return table[key], f"{label} {hardware.MAMF_SOURCE}" + (f" ({key}, the same die)" if key != device.key else "")
    kin = hardware.MAMF_SAME_ARCHITECTURE.get(device.key)
    if kin not in table or not peak:
        return None
    fraction = table[kin] / (hardware.DEVICES[kin].fp8_tflops if label == "FP8" else hardware.DEVICES[kin].bf16_tflops)
    return peak * fraction, (f"spec peak x {fraction:.3f}, the fraction of its {label} spec peak {kin} (the same "
                             f"architecture) reaches: {label} {hardware.MAMF_SOURCE}; no measured ceiling of this part")


def matmul_ceiling(spec: TprimatConf, device: hardware.DeviceSpec,
                   precision: Optional[str] = None) -> tuple[Optional[float], str]:
    """(TFLOP/s of the precision's linear layers, its source), or (None, why not)."""
    precision = precision or spec.training.precision
    bf16, bf16_source = bf16_ceiling(device)
    if precision == "fp8":
        if device.fp8_tflops is None:
            return None, f"no fp8 peak for {device.name} in the hardware table"
        measured = mamf_ceiling(device, hardware.MAMF_FP8_TFLOPS, device.fp8_tflops, "FP8")
        return measured or (device.fp8_tflops * bf16 / device.bf16_tflops,
                            "fp8 spec peak x the BF16 ceiling / BF16 peak ratio (no published FP8 matmul ceiling)")
    if precision == "fp32":
        if device.fp32_tflops is None:
            return None, f"no fp32 peak for {device.name} in the hardware table"
        return device.fp32_tflops, device.source + " (non-tensor FP32 peak)"
    return bf16, bf16_source


def preflight_ceilings(pf: dict, precision: str) -> tuple[Optional[Ceilings], Optional[str]]:
    matmul = (pf.get("matmul_tflops") or {}).get("bf16" if precision == "fp8" else precision)
    memory = pf.get("memory_gb_s")
    if not matmul or not memory:
        return None, f"the preflight file has no {precision} matmul or memory bandwidth measurement"
    busbw = (pf.get("allreduce") or {}).get("max_busbw_gbps")
    where = f"tprimat preflight on {pf.get('device_name')} ({pf.get('created_at')})"
    attention = pf.get("attention_tflops") or pf["matmul_tflops"].get("bf16") or matmul
    return Ceilings(matmul, attention, memory, busbw, busbw,
                    {"matmul": where, "attention": where, "memory": where,
                     "intra_node": where if busbw else "not measured",
                     "inter_node": where if busbw else "not measured"},
                    (pf.get("op_overhead_us") or 0.0) / 1e6, pf.get("platform") == "cpu"), None


def op_time_s(op: OpCost, c: Ceilings, backward: bool = False) -> float:
    attention = c.attention_bwd_tflops if backward and c.attention_bwd_tflops else c.attention_tflops
    tflops = attention if op.kind == "attention" else c.matmul_tflops
    work = max(op.flops / (tflops * 1e12), op.bytes / (c.memory_gb_s * 1e9))
    return work + c.op_overhead_s if c.synchronous else max(work, c.op_overhead_s) + c.op_gap_s


def phase_s(ops: list[OpCost], c: Ceilings, flops_scale: float = 1.0, attention_scale: float = 1.0,
            backward: bool = False) -> float:
    return sum(op_time_s(OpCost(op.kind, op.flops * (attention_scale if op.kind == "attention" else flops_scale),
                                op.bytes * flops_scale), c, backward) for op in ops)


@dataclass(frozen=True)
class Group:
    name: str
    size: int
    stride: int  # ranks between neighbours: tp innermost, then cp, dp, pp (torchtitan's mesh order)


def link_gb_s(group: Group, per_node: int, c: Ceilings) -> Optional[float]:
    """Inside a node: the GPU's link bandwidth. Spanning nodes: the rings run over one NIC per member the
    group has in each node, capped by the in-node links."""
    if group.size * group.stride <= per_node:
        return c.intra_node_gb_s
    if c.inter_node_gb_s is None or c.intra_node_gb_s is None:
        return c.inter_node_gb_s
    local_members = min(group.size, max(1, per_node // group.stride))
    return min(c.intra_node_gb_s, c.inter_node_gb_s * local_members)


def ring_s(kind: str, buffer_bytes: float, group: Group, per_node: int, c: Ceilings) -> Optional[float]:
    """One ring collective's time: all-reduce 2(n-1)/n x the buffer, all-gather / reduce-scatter / all-to-all
    (n-1)/n (what each rank sends)."""
    n = group.size
    if n == 1 or buffer_bytes == 0:
        return 0.0
    bandwidth = link_gb_s(group, per_node, c)
    if bandwidth is None:
        return None
    share = 2 * (n - 1) / n if kind == "all_reduce" else (n - 1) / n if kind != "p2p" else 1.0
    return share * buffer_bytes / (bandwidth * 1e9)


@dataclass(frozen=True)
class Micro:
    """One micro batch on the heaviest (last) pipeline stage."""

    total_s: float
    attention_fwd_s: float  # one layer's attention forward
    layer_bwd_s: float  # one layer's backward
    layers: int


def op_sac_recomputed(ops: list[OpCost]) -> list[OpCost]:
    """torchtitan's op SAC (``tprimat.spec.kernels.OP_SAC_SOURCE``): every forward operation is rerun but
    attention and every other matmul (the 1st, 3rd, ... are saved; the 2nd, 4th, ... recomputed)."""
    matmuls, rerun = 0, []
    for op in ops:
        matmuls += op.kind == "matmul"
        if op.kind == "memory" or (op.kind == "matmul" and matmuls % 2 == 0):
            rerun.append(op)
    return rerun


def recompute_s(spec: TprimatConf, work: Work, c: Ceilings, layer_f: float) -> float:
    """The forward recomputed per layer: full recompute reruns it whole; selective recompute reruns every k-th
    layer whole (native, DeepSpeed: ``training.ac_frequency``), all but attention and every other matmul
    (torchtitan's op SAC), or the core attention (Megatron-style frameworks)."""
    par, recompute = spec.parallelism, spec.training.activation_checkpointing
    forward = work.ops("layer", "fwd")
    if recompute == "full":  # per layer of the stage: the first N rerun (Megatron's block method), else all
        layers = max(flops.stages_of(spec))
        return layer_f * full_recompute_layers(spec.training, layers) / layers
    if recompute != "selective":
        return 0.0
    if spec.framework.name in ("native", "deepspeed"):
        return layer_f / ac_period(spec.training.ac_frequency)
    rerun = op_sac_recomputed(forward) if spec.framework.name in kernels.OP_SAC_FRAMEWORKS else \
        [o for o in forward if o.kind == "attention"]
    return phase_s(rerun, c, 1 / par.tp, par.cp / par.tp)


def fp8_quantize_s(spec: TprimatConf, c: Ceilings) -> tuple[float, float]:
    """One layer's forward and backward seconds in Transformer Engine's FP8 quantize kernels (``kernels.TE_FP8_SOURCE``),
    at HBM bandwidth, under the scaling the launch runs (``compat.te_scaling``: delayed or current). A cast reads the
    BF16 tensor (2 bytes an element) and writes it row-wise in FP8 (1), and column-wise (1 more) where the weight
    takes a gradient and the GPU's FP8 GEMMs need the transposed copy (not Blackwell's: ``kernels.TE_FP8_NO_TRANSPOSE``);
    current scaling reads it once more first, for its amax (``kernels.TE_CURRENT_SCALING``).
    Forward: the output and down projections' inputs, and the fused norms' outputs (QKV's and up/gate's inputs:
    ``norm_bytes``, or a cast where LoRA adapts the linear; under sequence parallelism their column-wise copy is made
    after the all-gather, over the whole sequence). Backward: every linear's output gradient; the output and down
    projections' are the whole sequence on every rank, or under sequence parallelism a shard quantized row-wise,
    gathered, and copied column-wise over the whole sequence."""
    tr, par = spec.training, spec.parallelism
    if tr.precision != "fp8" or spec.framework.name not in kernels.TE_FP8_FRAMEWORKS or not c.memory_gb_s:
        return 0.0, 0.0
    model = model_as_built(spec)
    d = flops.dims(model)
    gated = flops.mlp_matrices(model) - 1  # the up projection's outputs: gate and up (SwiGLU), or up alone
    lora = lora_of(spec)
    transposed = lora is None and record.GPU_CLASSES.get(spec.platform.gpu) not in kernels.TE_FP8_NO_TRANSPOSE
    col = 1 if transposed else 0
    current = te_scaling(spec) == "current"
    cast = 3 + (2 if current else 0)  # read BF16, write FP8 row-wise; current scaling's amax pass reads it first
    tp, sp = par.tp, par.sequence_parallel and par.tp > 1
    tokens = tr.micro_batch_size * tr.seq_length / par.cp  # this rank's whole sequence (its CP share)
    # the two fused norms, before QKV and before up/gate: a LoRA-adapted one returns its BF16 output for the adapter
    # (return_layernorm_output, Megatron-Bridge's and NeMo's peft/utils.py), so TE casts it after, unfused; under
    # sequence parallelism they ask for it gathered (return_layernorm_output_gathered): TE gathers it in BF16 and
    # casts the shard and the whole gathered sequence (layernorm_linear.py)
    adapted = sum(name in lora.targets for name in ("linear_qkv", "linear_fc1")) if lora else 0
    local = tokens / tp if sp else tokens
    fused = norm_bytes(current, col if not sp else 0)
    norms = local * d.hidden * (2 - adapted) * fused + adapted * (local + (tokens if sp else 0)) * d.hidden * cast
    sharded = tokens * (d.q_size + d.ffn) / tp * (cast + col)  # output and down projections' inputs, split over tp
    gathered = 2 * tokens * d.hidden * 2 * col if sp else 0.0  # QKV's and up/gate's column-wise copies after the gather
    outputs = tokens * ((d.q_size + 2 * d.kv_size) + gated * d.ffn) / tp * (cast + col)  # QKV's and up/gate's gradients
    row_parallel = 2 * (tokens / tp * d.hidden * cast + tokens * d.hidden * 2 * col if sp else tokens * d.hidden * (cast + col))
    bandwidth = c.memory_gb_s * 1e9
    return (sharded + norms + gathered) / bandwidth, (outputs + row_parallel) / bandwidth


def norm_bytes(current: bool, col: int) -> int:
    """Bytes an element a fused norm's FP8 output moves beyond the BF16 output the operation trace counts
    (``kernels.TE_FP8_NORM``): delayed scaling writes FP8 in the norm (1 byte for 2) and transposes it where a
    column-wise copy is needed (read and write, 1 byte each); current scaling writes BF16 with its amax, then casts it
    (read 2, write 1, and the column-wise byte in the same pass)."""
    return 3 + col if current else -1 + 2 * col


def micro_batch(spec: TprimatConf, work: Work, c: Ceilings) -> Micro:
    """The slowest pipeline stage's micro batch: its layers, the output head and loss on the last stage, the
    embedding where there is one stage (Megatron's uneven split: a middle stage of more layers may be slowest)."""
    par = spec.parallelism
    scale, attn = 1 / par.tp, par.cp / par.tp
    quantize_f, quantize_b = fp8_quantize_s(spec, c)
    layer_f = phase_s(work.ops("layer", "fwd"), c, scale, attn) + quantize_f  # a recomputed layer quantizes again
    attention_f = phase_s([o for o in work.ops("layer", "fwd") if o.kind == "attention"], c, scale, attn)
    layer_b = phase_s(work.ops("layer", "bwd"), c, scale, attn, backward=True) + quantize_b
    extra_f = recompute_s(spec, work, c, layer_f)
    head = phase_s(work.ops("head", "fwd"), c, scale) + phase_s(work.ops("head", "bwd"), c, scale, backward=True)
    embedding = phase_s(work.ops("embedding", "fwd") + work.ops("embedding", "bwd"), c) if par.pp == 1 else 0.0
    per_layer = layer_f + extra_f + layer_b
    ranks = flops.stages_of(spec)
    stages = [(n * per_layer + (head if i == len(ranks) - 1 else 0.0), n) for i, n in enumerate(ranks)]
    total, layers = max(stages)
    return Micro(total + embedding, attention_f, layer_b, layers)


def communication(spec: TprimatConf, c: Ceilings, dp: int, accum: int, micro: Micro) -> Optional[dict]:
    """Exposed seconds per step of each kind of traffic; None when a needed link bandwidth is unknown."""
    par, tr, model = spec.parallelism, spec.training, model_as_built(spec)
    tp, pp, cp, per_node = par.tp, par.pp, par.cp, spec.platform.devices_per_node
    act_bytes = 4 if tr.precision == "fp32" else 2
    activation = tr.micro_batch_size * tr.seq_length / cp * model.hidden_size * act_bytes
    stage_params = flops.heaviest_stage_params(model, pp, *pipeline_split(spec)) / tp
    trained = flops.trained_stage_params(model, pp, lora_of(spec), *pipeline_split(spec)) / tp  # LoRA: adapters
    grad_bytes = keeps.of(spec).grad_bytes
    # the gradients' group (``keeps.gradient_group``): with its context-parallel ranks, neighbours a TP group apart;
    # without them, a TP x CP group apart
    group = keeps.gradient_group(spec, dp)
    dp_group = Group("dp", group, tp * (dp * cp // group))
    tp_layer = ring_s("all_reduce", activation, Group("tp", tp, 1), per_node, c)  # or one AG + one RS (SP)
    kv = tr.micro_batch_size * tr.seq_length * 2 * flops.dims(model).kv_size * act_bytes / tp
    cp_layer = ring_s("all_gather", kv, Group("cp", cp, tp), per_node, c)
    # all-to-all CP: Q, K, V in and the output out, each rank's seq/cp tokens (the query and output as wide as the
    # activation), as many again backward (the output's gradient in, Q's, K's and V's out): on the critical path
    a2a_layer = ring_s("all_to_all", 2 * activation / tp + kv / cp, Group("cp", cp, tp), per_node, c)
    gather = ring_s("all_gather", stage_params * act_bytes, dp_group, per_node, c)
    scatter = ring_s("reduce_scatter", trained * grad_bytes, dp_group, per_node, c)
    reduce = ring_s("all_reduce", trained * grad_bytes, dp_group, per_node, c)
    p2p = ring_s("p2p", activation, Group("pp", pp, tp * cp * dp), per_node, c)
    if None in (tp_layer, cp_layer, a2a_layer, gather, scatter, reduce, p2p):
        return None
    layers, compute_s = micro.layers, accum * micro.total_s
    rerun = full_recompute_layers(tr, layers) if tr.activation_checkpointing == "full" else 0
    tp_collectives = 4 * layers + 2 * rerun  # 2 forward, 2 backward, and a recomputed layer's forward again
    # what data-parallel traffic hides behind: the compute, on a GPU (NCCL/RCCL on their own streams); nothing on a
    # CPU, where gloo's thread needs the cores the compute uses (measured: a 2-node CPU step is its compute plus the
    # whole all-reduce, 0.384 + 0.38 s against 0.790 s, docs/benchmarks.md)
    # and nothing where the stack reduces gradients after the backward (the DeepSpeed engine below ZeRO-3:
    # ``kernels.gradients_overlap``)
    overlapped = kernels.gradients_overlap(spec.framework.name, par.zero_stage)
    hides = 0.0 if spec.platform.name == "cpu" or not overlapped else 1.0
    return {"tp_s": accum * tp_collectives * tp_layer,
            "pp_p2p_s": (accum + pp - 1) * 2 * p2p if pp > 1 else 0.0,
            "cp_s": accum * (2 * layers + rerun) * a2a_layer if all_to_all_cp(spec) else
            max(0.0, accum * layers * (2 * cp_layer - 3 * micro.attention_fwd_s)),
            "fsdp_s": max(0.0, accum * (2 * gather + scatter) - hides * compute_s) if par.fsdp else 0.0,
            "dp_s": 0.0 if par.fsdp else max(0.0, reduce - hides * layers * micro.layer_bwd_s)}  # the last backward


def project(spec: TprimatConf, work: Work, c: Ceilings, dp: int, accum: int, peak_tflops: Optional[float]) -> dict:
    """The projection of one spec: step time, throughput, and where the time goes."""
    par, tr = spec.parallelism, spec.training
    world = dp * par.tp * par.pp * par.cp
    micro = micro_batch(spec, work, c)
    comm = communication(spec, c, dp, accum, micro)
    if comm is None:
        return unavailable("the layout communicates but no link bandwidth is known (run tprimat preflight "
                           "--ranks N, or use a device in the hardware table)")
    trained = flops.trained_stage_params(model_as_built(spec), par.pp, lora_of(spec), *pipeline_split(spec))
    sharded_over = keeps.gradient_group(spec, dp) if par.fsdp or par.zero_stage >= 1 else 1
    local_params = trained / par.tp / sharded_over
    optimizer_s = local_params * ADAMW_BYTES_PER_PARAM / (c.memory_gb_s * 1e9)
    compute_s, bubble_s = accum * micro.total_s, (par.pp - 1) / par.vp * micro.total_s
    step_s = compute_s + bubble_s + sum(comm.values()) + optimizer_s
    tokens_per_s_per_device = tr.global_batch_size * tr.seq_length / step_s / world
    tflops = flops.flops_per_token(model_as_built(spec), tr.seq_length, lora=lora_of(spec)) * tokens_per_s_per_device / 1e12
    return {"available": True, "reason": None, "step_time_s": step_s,
            "tokens_per_s_per_device": tokens_per_s_per_device, "tflops_per_device": tflops,
            "mfu": tflops / peak_tflops if peak_tflops else None,
            "breakdown_s": {"compute_s": compute_s, "bubble_s": bubble_s, **comm, "optimizer_s": optimizer_s},
            "micro_batch_s": micro.total_s, "micro_batches": accum,
            "ceilings": {"matmul_tflops": c.matmul_tflops, "attention_tflops": c.attention_tflops,
                         "memory_gb_s": c.memory_gb_s, "intra_node_gb_s": c.intra_node_gb_s,
                         "inter_node_gb_s": c.inter_node_gb_s, "op_overhead_s": c.op_overhead_s,
                         "op_gap_s": c.op_gap_s},
            "sources": dict(c.sources), "assumptions": [*ASSUMPTIONS, *power_cap_note(spec)]}


def power_cap_note(spec: TprimatConf) -> list[str]:
    device = hardware.lookup(spec.platform.gpu) if spec.platform.name != "cpu" else None
    capped = device is not None and kernels.power_capped(spec.platform.power_limit_w, device.tdp_w)
    return [f"platform.power_limit_w={spec.platform.power_limit_w:g} W: {kernels.POWER_CAP_NOTE}"] if capped else []


def unavailable(reason: str) -> dict:
    return {"available": False, "reason": reason, "step_time_s": None, "tokens_per_s_per_device": None,
            "tflops_per_device": None, "mfu": None}
