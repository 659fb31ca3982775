"""The projection: its arithmetic on hand-computed cases, the ceilings it reads, the operation trace against
the FLOPs formulas, and the projection a dry run, a CPU run and compare carry."""

from __future__ import annotations

import json

import pytest

from tests.conftest import QUICK, run_inprocess
from tprimat.compare.groups import build_groups, group_summary
from tprimat.compare.load import Loaded
from tprimat.compose import compose
from tprimat.spec import flops, keeps
from tprimat.spec.build import build_spec
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.projection import Ceilings, Group, OpCost, Work, ceilings, link_gb_s, op_time_s, project
from tprimat.spec.validate import validate

TABLE = ["platform=nvidia", "platform.gpu=h100", "model=llama_tiny"]
# 100 TFLOP/s, 1000 GB/s memory, 100 GB/s in a node, 10 GB/s per GPU across nodes: round numbers to check by hand
ROUND = Ceilings(100.0, 100.0, 1000.0, 100.0, 10.0)
# one layer: forward a 2-TFLOP matmul moving 1 GB (0.02 s) and an elementwise op moving 3 GB (0.003 s);
# backward a 4-TFLOP matmul moving 2 GB (0.04 s): 0.063 s per layer per micro batch
WORK = Work({"layer": {"fwd": [OpCost("matmul", 2e12, 1e9), OpCost("memory", 0.0, 3e9)],
                       "bwd": [OpCost("matmul", 4e12, 2e9)]}})
LAYER_S = 0.02 + 0.003 + 0.04


def spec_of(*overrides):
    """No recompute unless asked (the H100's tuned settings recompute every other layer)."""
    return build_spec(compose([*TABLE, "training.activation_checkpointing=none", *overrides]))


@pytest.mark.parametrize("framework,k,extra_per_layer", [("native", 2, 0.023 / 2), ("native", 4, 0.023 / 4),
                                                         ("megatron", 2, 0.0), ("torchtitan", 2, 0.003)])
def test_selective_recompute_costs_the_recomputed_forward(framework, k, extra_per_layer):
    """Native recomputes every k-th layer's whole forward (0.023 s per layer); Megatron-style selective
    recompute redoes the core attention only (no attention op in this work: nothing); torchtitan's op SAC saves
    the first matmul's output and reruns the elementwise op (0.003 s)."""
    spec = spec_of("platform.devices_per_node=1", "parallelism.fsdp=false", "training.global_batch_size=4",
                   "training.micro_batch_size=2", f"framework={framework}", "framework.path=.",
                   "training.activation_checkpointing=selective", f"training.ac_frequency={k}")
    p = project(spec, WORK, ROUND, dp=1, accum=2, peak_tflops=None)
    assert p["breakdown_s"]["compute_s"] == pytest.approx(2 * 4 * (LAYER_S + extra_per_layer))


@pytest.mark.parametrize("layers,rerun", [(None, 4), (4, 4), (1, 1), (3, 3)])
def test_full_recompute_of_the_first_n_layers_reruns_their_forward_alone(layers, rerun):
    """Megatron's block method (training.recompute_num_layers=N): the first N of llama_tiny's 4 layers rerun their
    forward (0.023 s each) in the backward; null (uniform) and N = 4 rerun every one."""
    spec = spec_of("platform.devices_per_node=1", "parallelism.fsdp=false", "training.global_batch_size=4",
                   "training.micro_batch_size=2", "framework=megatron", "framework.path=.",
                   "training.activation_checkpointing=full", f"training.recompute_num_layers={layers or 'null'}")
    assert not [p for p in validate(spec, DetectedHardware("cpu", "test", 1, 0.0, None), dry_run=True) if "recompute" in p]
    p = project(spec, WORK, ROUND, dp=1, accum=2, peak_tflops=None)
    assert p["breakdown_s"]["compute_s"] == pytest.approx(2 * (4 * LAYER_S + rerun * 0.023))


# Transformer Engine's bytes an element (read BF16 2, write FP8 row-wise 1, column-wise 1 on Hopper where the weight
# takes a gradient; current scaling reads the BF16 tensor once more for its amax: 2) and, for a fused norm's output,
# beyond the BF16 output the trace counts: delayed writes 1 byte for 2 and transposes it (read 1, write 1) for the
# column-wise copy; current writes BF16, then reads it (2) and writes FP8 (1, and 1 column-wise)
CAST = {("delayed", 1): 4, ("delayed", 0): 3, ("current", 1): 6, ("current", 0): 5}
NORM = {("delayed", 1): -1 + 2, ("delayed", 0): -1, ("current", 1): 3 + 1, ("current", 0): 3}


@pytest.mark.parametrize("framework,peft,recompute,recipe,col,reruns", [
    ("megatron", "none", "none", "delayed", 1, 0), ("nemo", "none", "none", "delayed", 1, 0),
    ("primus", "none", "none", "delayed", 1, 0), ("nemo", "lora", "none", "delayed", 0, 0),
    ("megatron", "none", "full", "delayed", 1, 4), ("megatron", "none", "none", "current", 1, 0),
    ("megatron", "none", "none", "tensorwise", 1, 0), ("nemo", "lora", "none", "current", 0, 0),
    ("torchtitan", "none", "none", "tensorwise", None, 0)])
def test_transformer_engines_fp8_quantization_moves_its_bytes_by_hand(framework, peft, recompute, recipe, col, reruns):
    """Transformer Engine's FP8 quantize kernels at HBM speed (1000 GB/s here), llama_tiny by hand (hidden 256, ffn
    896, 8 heads of 32, 2 KV heads: q 256, kv 64) over 2 x 256 tokens on an H100. Forward: the output projection's
    input (256) and the down projection's (896), cast; the two fused norms' outputs (2 x 256). Backward: the output
    gradients of QKV (256 + 2 x 64), the output projection (256), gate and up (2 x 896) and down (256), cast. No
    column-wise copy when the base is frozen (LoRA), whose adapted QKV takes its norm's output in BF16 (NeMo's and
    Megatron-Bridge's peft/utils.py: return_layernorm_output) and casts it; tensorwise is current scaling under Megatron-core (its
    --fp8-recipe tensorwise); a fully recomputed layer quantizes its forward again; torchtitan's torchao float8 is not
    Transformer Engine: nothing added."""
    spec = spec_of("platform.devices_per_node=1", "parallelism.fsdp=false", "training.global_batch_size=4",
                   "training.micro_batch_size=2", f"framework={framework}", "framework.path=.",
                   "training.precision=fp8", f"training.fp8.recipe={recipe}", f"training.peft={peft}",
                   f"training.activation_checkpointing={recompute}")
    p = project(spec, WORK, ROUND, dp=1, accum=2, peak_tflops=None)
    scaling = {"tensorwise": "current"}.get(recipe, recipe)
    cast, norm = (CAST[scaling, col], NORM[scaling, col]) if col is not None else (0, 0)
    # LoRA's default targets adapt QKV: its norm returns its BF16 output to the adapter and is cast after, unfused
    norms = 512 * 256 * (norm + cast if peft == "lora" else 2 * norm)
    forward = (512 * (256 + 896) * cast + norms) / 1000e9
    backward = 512 * (384 + 256 + 2 * 896 + 256) * cast / 1000e9
    rerun = reruns * (0.023 + forward)  # Megatron's full recompute: every layer's forward again
    assert p["breakdown_s"]["compute_s"] == pytest.approx(2 * (4 * (LAYER_S + forward + backward) + rerun))


SP2 = ["parallelism.tp=2", "parallelism.sequence_parallel=true", "platform.devices_per_node=2"]


@pytest.mark.parametrize("gpu,recipe,overrides,forward,backward", [
    # Blackwell's FP8 GEMMs take any layout: no column-wise copies (3 bytes an element; the norms write 1 for 2)
    ("b200", "delayed", [], 512 * (256 + 896) * 3 - 2 * 512 * 256, 512 * (384 + 2 * 896 + 2 * 256) * 3),
    # and under current scaling each cast reads its input once more (5), each norm's output is cast after it (3)
    ("b200", "current", [], 512 * (256 + 896) * 5 + 2 * 512 * 256 * 3, 512 * (384 + 2 * 896 + 2 * 256) * 5),
    # tp 2 with sequence parallelism on an H100: the output and down projections' inputs and QKV's and up/gate's
    # gradients split over tp (4 bytes); the norms write their 256-token shards row-wise (1 for 2), copied
    # column-wise after the all-gather, over all 512 tokens (read 1, write 1); the output and down projections'
    # gradients quantized row-wise on the 256-token shard (3) and copied column-wise over all 512 (2)
    ("h100", "delayed", SP2, 512 * (256 + 896) / 2 * 4 - 2 * 256 * 256 + 2 * 512 * 256 * 2,
     512 * (384 + 2 * 896) / 2 * 4 + 2 * (256 * 256 * 3 + 512 * 256 * 2)),
    ("h100", "current", SP2, 512 * (256 + 896) / 2 * 6 + 2 * 256 * 256 * 3 + 2 * 512 * 256 * 2,
     512 * (384 + 2 * 896) / 2 * 6 + 2 * (256 * 256 * 5 + 512 * 256 * 2)),
    # tp 2 without it: the norms' outputs whole on every rank, transposed in place; those two gradients whole (4 bytes)
    ("h100", "delayed", ["parallelism.tp=2", "platform.devices_per_node=2"],
     512 * (256 + 896) / 2 * 4 + 2 * 512 * 256 * 1, 512 * (384 + 2 * 896) / 2 * 4 + 2 * 512 * 256 * 4),
    # LoRA on QKV and up/gate (frozen base: row-wise casts alone, 3 bytes) under sequence parallelism: both norms
    # return their BF16 output gathered for the adapters, cast on the 256-token shard and over all 512 gathered tokens
    ("h100", "delayed", [*SP2, "training.peft=lora", "training.lora.targets=[linear_qkv,linear_fc1]",
                         "framework.pretrained_checkpoint=/ckpt"],
     512 * (256 + 896) / 2 * 3 + 2 * (256 + 512) * 256 * 3,
     512 * (384 + 2 * 896) / 2 * 3 + 2 * 256 * 256 * 3)])
def test_fp8_quantize_bytes_follow_the_gpu_the_scaling_and_the_layout_by_hand(gpu, recipe, overrides, forward, backward):
    """llama_tiny (hidden 256, ffn 896, q 256, kv 64) over 2 x 256 tokens at 1000 GB/s, Megatron-LM."""
    from tprimat.spec.projection import fp8_quantize_s

    spec = build_spec(compose(["platform=nvidia", f"platform.gpu={gpu}", "model=llama_tiny", "framework=megatron",
                               "framework.path=.", "training.precision=fp8", f"training.fp8.recipe={recipe}",
                               "training.micro_batch_size=2", "training.global_batch_size=4", "parallelism.fsdp=false",
                               *overrides]))
    assert fp8_quantize_s(spec, ROUND) == pytest.approx((forward / 1000e9, backward / 1000e9))


def test_data_parallel_step_by_hand():
    spec = spec_of("platform.devices_per_node=2", "parallelism.fsdp=false", "training.global_batch_size=8",
                   "training.micro_batch_size=2")
    p = project(spec, WORK, ROUND, dp=2, accum=2, peak_tflops=None)
    params = flops.param_counts(spec.model)[0]  # llama_tiny, pp=1: the whole model on every rank
    compute = 2 * 4 * LAYER_S  # 2 micro batches x 4 layers
    all_reduce = 2 * (2 - 1) / 2 * params * 4 / 100e9  # fp32 gradients (native), ring over 2 ranks in a node
    exposed = max(0.0, all_reduce - 4 * 0.04)  # hidden behind the last micro batch's backward
    step = compute + exposed + params * 28 / 1000e9
    assert p["step_time_s"] == pytest.approx(step, rel=1e-12)
    assert p["breakdown_s"]["compute_s"] == pytest.approx(compute)
    assert p["tokens_per_s_per_device"] == pytest.approx(8 * spec.training.seq_length / step / 2)
    assert p["mfu"] is None  # no peak given


# Two nodes of two GPUs, CP 2, DP 2, 1 MB/s per NIC: the traffic outlasts the compute it hides behind. Megatron-core
# reduces gradients over data-parallel x context-parallel ranks (its DDP's group with_context_parallel) and torchtitan
# shards over its dp_shard x cp mesh: 4 ranks, neighbours adjacent, two in each node, so the ring runs over two NICs
# a node. (Over data-parallel ranks alone, a CP group apart, it would be 2 ranks on one NIC a node.)
CP_ACROSS_NODES = ["platform.devices_per_node=2", "platform.nodes=2", "parallelism.cp=2",
                   "training.global_batch_size=2", "training.micro_batch_size=1"]
SLOW_NICS = Ceilings(100.0, 100.0, 1000.0, 100.0, 0.001)


def test_megatron_reduces_gradients_over_data_and_context_parallel_ranks_by_hand():
    spec = spec_of("framework=megatron", "framework.path=.", "parallelism.fsdp=false", "parallelism.zero_stage=0",
                   *CP_ACROSS_NODES)
    p = project(spec, WORK, SLOW_NICS, dp=2, accum=1, peak_tflops=None)
    params = flops.param_counts(spec.model)[0]
    all_reduce = 2 * (4 - 1) / 4 * params * 4 / (0.001e9 * 2)  # fp32 gradients, 4 ranks, two NICs a node
    assert p["breakdown_s"]["dp_s"] == pytest.approx(all_reduce - 4 * 0.04)  # less the last backward (4 layers)


def test_torchtitan_shards_over_data_and_context_parallel_ranks_by_hand():
    spec = spec_of("framework=torchtitan", "parallelism.fsdp=true", "parallelism.zero_stage=0", *CP_ACROSS_NODES)
    p = project(spec, WORK, SLOW_NICS, dp=2, accum=1, peak_tflops=None)
    params = flops.param_counts(spec.model)[0]
    gather = (4 - 1) / 4 * params * 2 / (0.001e9 * 2)  # bf16 parameters gathered per block
    scatter = (4 - 1) / 4 * params * 4 / (0.001e9 * 2)  # fp32 gradients reduce-scattered
    assert p["breakdown_s"]["fsdp_s"] == pytest.approx(2 * gather + scatter - 4 * LAYER_S)
    assert p["breakdown_s"]["optimizer_s"] == pytest.approx(params / 4 * 28 / 1000e9)  # sharded over all 4 ranks


@pytest.mark.parametrize("framework,stage", [("deepspeed", 0), ("deepspeed", 2), ("deepspeed", 3),
                                             ("transformers", 2), ("transformers", 0)])
def test_the_deepspeed_engine_hides_gradient_traffic_only_where_it_overlaps_it(framework, stage):
    """DeepSpeed's own ZeroConfig says where its engine reduces gradients beside the backward (overlap_comm, left
    unset by tprimat: on by default at stage 3 alone); the Trainer without ZeRO is torch DDP, which always does. Two
    GPUs of one node at 1 MB/s: an overlapped all-reduce is exposed less the last backward, another one whole."""
    zero = pytest.importorskip("deepspeed.runtime.zero.config")
    spec = spec_of(f"framework={framework}", "parallelism.fsdp=false", f"parallelism.zero_stage={stage}",
                   "platform.devices_per_node=2", "training.global_batch_size=2", "training.micro_batch_size=1")
    p = project(spec, WORK, Ceilings(100.0, 100.0, 1000.0, 0.001, 0.001), dp=2, accum=1, peak_tflops=None)
    engine = framework == "deepspeed" or stage > 0
    overlaps = zero.DeepSpeedZeroConfig(stage=stage).overlap_comm if engine else True
    all_reduce = 2 * (2 - 1) / 2 * flops.param_counts(spec.model)[0] * keeps.of(spec).grad_bytes / 0.001e9
    assert p["breakdown_s"]["dp_s"] == pytest.approx(all_reduce - (4 * 0.04 if overlaps else 0.0))


def test_fsdp_traffic_hides_behind_compute_and_shards_the_optimizer_by_hand():
    spec = spec_of("platform.devices_per_node=2", "parallelism.fsdp=true", "training.global_batch_size=8",
                   "training.micro_batch_size=2")
    slow = Ceilings(100.0, 100.0, 1000.0, 0.01, 0.01)  # 10 MB/s links: FSDP traffic outlasts the compute
    p = project(spec, WORK, slow, dp=2, accum=2, peak_tflops=None)
    params = flops.param_counts(spec.model)[0]
    gather, scatter = (2 - 1) / 2 * params * 2 / 0.01e9, (2 - 1) / 2 * params * 4 / 0.01e9  # bf16 params, fp32 grads
    compute = 2 * 4 * LAYER_S
    assert p["breakdown_s"]["fsdp_s"] == pytest.approx(2 * (2 * gather + scatter) - compute)
    assert p["breakdown_s"]["optimizer_s"] == pytest.approx(params / 2 * 28 / 1000e9)


def test_tensor_parallel_collectives_are_exposed_by_hand():
    spec = spec_of("platform.devices_per_node=2", "parallelism.tp=2", "training.global_batch_size=8",
                   "training.micro_batch_size=2")
    p = project(spec, WORK, ROUND, dp=1, accum=4, peak_tflops=989.4)
    activation = 2 * spec.training.seq_length * spec.model.hidden_size * 2  # bf16
    tp = 4 * 4 * 4 * (2 * (2 - 1) / 2 * activation / 100e9)  # micro batches x layers x 4 all-reduces
    params = flops.param_counts(spec.model)[0] / 2
    step = 4 * 4 * LAYER_S / 2 + tp + params * 28 / 1000e9
    assert p["breakdown_s"]["tp_s"] == pytest.approx(tp)
    assert p["step_time_s"] == pytest.approx(step, rel=1e-12)
    tflops = flops.flops_per_token(spec.model, spec.training.seq_length) * p["tokens_per_s_per_device"] / 1e12
    assert p["mfu"] == pytest.approx(tflops / 989.4)


def test_pipeline_bubble_is_pp_minus_one_micro_batches():
    spec = spec_of("platform.devices_per_node=2", "parallelism.pp=2", "training.global_batch_size=8",
                   "training.micro_batch_size=2")
    p = project(spec, WORK, ROUND, dp=1, accum=4, peak_tflops=None)
    micro = 2 * LAYER_S  # 4 layers over 2 stages
    assert p["micro_batch_s"] == pytest.approx(micro)
    assert p["breakdown_s"]["bubble_s"] == pytest.approx((2 - 1) * micro)
    assert p["breakdown_s"]["compute_s"] == pytest.approx(4 * micro)


def test_an_interleaved_pipelines_bubble_is_divided_by_vp():
    """Megatron-LM's interleaved 1F1B (Narayanan et al. 2021): the bubble is (pp - 1) / vp micro-batch times.
    4 stages of 2 chunks over 8 layers (1 layer a chunk), 8 micro batches: 3 / 2 = 1.5 micro-batch times."""
    spec = spec_of("platform.devices_per_node=4", "parallelism.pp=4", "parallelism.vp=2", "model.num_layers=8",
                   "training.global_batch_size=16", "training.micro_batch_size=2", "framework=megatron")
    p = project(spec, WORK, ROUND, dp=1, accum=8, peak_tflops=None)
    micro = 2 * LAYER_S  # 8 layers over 4 stages
    assert p["micro_batch_s"] == pytest.approx(micro)
    assert p["breakdown_s"]["bubble_s"] == pytest.approx(3 / 2 * micro)


def test_a_group_across_nodes_rings_over_one_nic_per_local_member():
    assert link_gb_s(Group("tp", 8, 1), 8, ROUND) == 100.0  # fits in a node
    assert link_gb_s(Group("dp", 16, 1), 8, ROUND) == pytest.approx(min(100.0, 10.0 * 8))
    assert link_gb_s(Group("dp", 8, 4), 8, ROUND) == pytest.approx(10.0 * 2)  # stride 4: two members per node
    assert link_gb_s(Group("dp", 4, 8), 8, ROUND) == pytest.approx(10.0)  # one member per node


def test_ceilings_come_from_the_table_with_sources_or_say_why_not():
    c, why = ceilings(spec_of())
    assert why is None and c.matmul_tflops == 794.5 and c.memory_gb_s == 3350.0 and c.intra_node_gb_s == 450.0
    assert "mamf" in c.sources["matmul"].lower()
    fp8, _ = ceilings(spec_of("training.precision=fp8"))
    # ml-engineering's MAMF table (since bfbb33a), FP8 float8_e4m3fn: H100 SXM 1,402.6, H200 1,453.4 (its own row, not
    # H100's by the same die), B200 3,432.5, B300 3,353.3, GB200 3,615.6; BF16: A100 271.2, B300 1,769, GB200 1,822.
    # MI300X measures none, so its FP8 ceiling is its FP8 peak at its BF16 MAMF's fraction of peak (2,614.9 x 668.4 /
    # 1,307.4)
    assert fp8.matmul_tflops == 1402.6 and "FP8" in fp8.sources["matmul"]
    for gpu, platform, fp8_mamf, bf16_mamf in (("h200", "nvidia", 1453.4, 794.5), ("b200", "nvidia", 3432.5, 1745.0),
                                               ("b300", "nvidia", 3353.3, 1769.0), ("gb200", "nvidia", 3615.6, 1822.0)):
        both = [ceilings(build_spec(compose([f"platform={platform}", f"platform.gpu={gpu}", "model=llama_tiny", *p])))[0]
                for p in ([], ["training.precision=fp8"])]
        assert (both[0].matmul_tflops, both[1].matmul_tflops) == (bf16_mamf, fp8_mamf), gpu
    a100, _ = ceilings(build_spec(compose(["platform=nvidia", "platform.gpu=a100", "model=llama_tiny"])))
    assert a100.matmul_tflops == 271.2
    mi300x, _ = ceilings(build_spec(compose(["platform=amd", "platform.gpu=mi300x", "model=llama_tiny",
                                             "training.precision=fp8"])))
    assert mi300x.matmul_tflops == pytest.approx(2614.9 * 668.4 / 1307.4)
    # GB300 measures none: B300's (its Blackwell Ultra die) fractions of its spec peaks, 1,769 / 2,250 and 3,353.3 / 4,500
    gb300 = [ceilings(build_spec(compose(["platform=nvidia", "platform.gpu=gb300", "model=llama_tiny", *p])))[0]
             for p in ([], ["training.precision=fp8"])]
    assert gb300[0].matmul_tflops == pytest.approx(2500 * 1769 / 2250)
    assert gb300[1].matmul_tflops == pytest.approx(5000 * 3353.3 / 4500)
    h200, _ = ceilings(build_spec(compose(["platform=nvidia", "platform.gpu=h200", "model=llama_tiny"])))
    assert h200.matmul_tflops == 794.5 and h200.memory_gb_s == 4800.0 and "same die" in h200.sources["matmul"]
    none, why = ceilings(build_spec(compose(["platform=cpu", "model=llama_tiny"])))
    assert none is None and "preflight" in why


# FlashAttention-3's paper (arXiv 2407.08608), figs. 5-6, head dim 128, read off its bars: seq 8k, 4k, 1k; and 3k
# (between 2k's 484/465 and 4k's 518/499, at log2(3072/2048) = 0.585 of the way)
@pytest.mark.parametrize("framework,seq,cp,fwd,bwd", [
    ("torchtitan", 8192, 1, 333.0, 318.0), ("megatron", 8192, 1, 529.0, 518.0), ("megatron", 4096, 1, 518.0, 499.0),
    ("megatron", 8192, 8, 410.0, 408.0), ("torchtitan", 8192, 2, 319.0, 310.0),
    ("megatron", 3072, 1, 484.0 + 0.585 * 34, 465.0 + 0.585 * 34)])
def test_attention_runs_at_the_stacks_kernel_as_its_authors_measured_it(framework, seq, cp, fwd, bwd):
    """On an H100 (the GPU FlashAttention-3's paper measured), attention runs at the published TFLOP/s of the
    kernel the stack calls (FlashAttention-2 under torch's SDPA, cuDNN under Transformer Engine) for the sequence
    one call sees: seq/cp under context parallelism, one ring step's queries."""
    c, _ = ceilings(spec_of(f"framework={framework}", "framework.path=.", f"training.seq_length={seq}",
                            f"parallelism.cp={cp}"))
    op = OpCost("attention", 1e12, 0.0)  # beyond the learned per-operation gap (tests/test_op_gap.py)
    assert op_time_s(op, c) - c.op_gap_s == pytest.approx(1e12 / (fwd * 1e12), rel=1e-3)
    assert op_time_s(op, c, backward=True) - c.op_gap_s == pytest.approx(1e12 / (bwd * 1e12), rel=1e-3)


def test_a_power_cap_is_not_modelled_and_says_so():
    """No published measurement of training throughput against a power cap backs a law: a capped H100 keeps the
    uncapped ceilings and names the cap as not modelled. The 96 GB HBM2e part of torchtitan's hosts is found by its
    name, moves 2.4 TB/s and has the 500 W default limit its benchmark states, so 500 W there is no cap at all."""
    full, _ = ceilings(spec_of())
    capped, _ = ceilings(spec_of("platform.power_limit_w=500"))
    assert (capped.matmul_tflops, capped.attention_tflops, capped.memory_gb_s) == \
        (full.matmul_tflops, full.attention_tflops, full.memory_gb_s)
    assert "power_limit_w=500 W" in capped.sources["matmul"] and "not modelled" in capped.sources["matmul"]
    assert "power_limit_w" not in ceilings(spec_of("platform.power_limit_w=900"))[0].sources["matmul"]  # above TDP
    from tprimat.spec.hardware import device_key_from_name

    assert device_key_from_name("NVIDIA H100 96GB HBM2e") == "h100_96gb"
    assert device_key_from_name("NVIDIA H100 80GB HBM3") == "h100"
    grand_teton, _ = ceilings(spec_of("platform.gpu=h100_96gb", "platform.power_limit_w=500"))
    assert grand_teton.memory_gb_s == 2400.0 and grand_teton.matmul_tflops == full.matmul_tflops
    assert "power_limit_w" not in grand_teton.sources["matmul"]


def test_torchtitans_op_sac_reruns_the_second_fourth_and_sixth_matmul_of_a_llama_layer():
    """torchtitan saves every other mm: of q, k, v, o, w1, w3, w2 it reruns k, o and w3, by hand
    (h*kv + q*h + h*ffn) / (h*q + 2 h*kv + q*h + 3 h*ffn) of the forward's matmul FLOPs, and every elementwise op."""
    from tprimat.backends.native.opcount import trace_work
    from tprimat.spec.projection import op_sac_recomputed

    spec = spec_of("training.micro_batch_size=1", "training.seq_length=64")
    fwd = trace_work(spec).ops("layer", "fwd")
    d = flops.dims(spec.model)
    expected = (d.kv_size + d.q_size + d.ffn) / (2 * d.q_size + 2 * d.kv_size + 3 * d.ffn)
    rerun = op_sac_recomputed(fwd)
    assert sum(o.flops for o in rerun) / sum(o.flops for o in fwd if o.kind == "matmul") == pytest.approx(expected)
    assert [o for o in fwd if o.kind == "memory"] == [o for o in rerun if o.kind == "memory"]
    assert not [o for o in rerun if o.kind == "attention"]


def test_the_trace_counts_the_flops_the_formulas_give():
    from tprimat.backends.native.opcount import trace_work

    spec = spec_of("training.micro_batch_size=2", "training.seq_length=128")
    work = trace_work(spec)
    d, tokens = flops.dims(spec.model), 2 * 128
    linear = 2 * tokens * (d.hidden * (d.q_size + 2 * d.kv_size) + d.q_size * d.hidden + 3 * d.hidden * d.ffn)
    attention = 4 * 2 * d.heads * 128 * 128 * d.head_dim / 2  # causal
    fwd, bwd = work.ops("layer", "fwd"), work.ops("layer", "bwd")
    assert sum(o.flops for o in fwd if o.kind == "matmul") == linear
    assert sum(o.flops for o in bwd if o.kind == "matmul") == 2 * linear  # input and weight gradients
    assert sum(o.flops for o in fwd if o.kind == "attention") == attention
    assert sum(o.flops for o in bwd if o.kind == "attention") == 2.5 * attention
    head = sum(o.flops for o in work.ops("head", "fwd") if o.kind == "matmul")
    assert head == 2 * tokens * d.hidden * d.vocab
    assert all(o.bytes > 0 for o in fwd)


def test_a_dry_run_carries_its_projection(tmp_path):
    outcome = run_inprocess(tmp_path, [*TABLE, "platform.devices_per_node=2", "dry_run=true"])
    p = outcome.result["projection"]
    assert p["available"] and p["step_time_s"] > 0 and p["mfu"] < 1
    assert set(p["breakdown_s"]) >= {"compute_s", "bubble_s", "tp_s", "fsdp_s", "dp_s", "optimizer_s"}
    assert p["sources"]["memory"].startswith("NVIDIA H100")


def test_a_cpu_run_is_projected_from_a_preflight_file_and_compare_puts_them_side_by_side(tmp_path):
    preflight = tmp_path / "preflight.json"
    preflight.write_text(json.dumps({"kind": "tprimat_preflight", "device_name": "this CPU", "platform": "cpu",
                                     "created_at": "now", "matmul_tflops": {"fp32": 0.1, "bf16": 0.5},
                                     "memory_gb_s": 20.0, "op_overhead_us": 5.0,
                                     "attention_tflops": 0.01}))
    outcome = run_inprocess(tmp_path / "run", ["platform=cpu", *QUICK, f"benchmark.preflight_file={preflight}"])
    p = outcome.result["projection"]
    ceiling = {"fp32": 0.1, "bf16": 0.5}[outcome.result["spec"]["training"]["precision"]]  # this CPU's best one
    assert p["available"] and p["ceilings"]["matmul_tflops"] == ceiling and p["ceilings"]["op_overhead_s"] == 5e-6
    assert p["ceilings"]["attention_tflops"] == 0.01
    [group] = build_groups([Loaded(tmp_path / "run" / "result.json", outcome.result)])
    s = group_summary(group)
    assert s["projected_tokens_per_s_per_device"] == p["tokens_per_s_per_device"]
    assert s["measured_vs_projected"] == pytest.approx(s["tokens_per_s_per_device"] / p["tokens_per_s_per_device"])
    no_file = run_inprocess(tmp_path / "plain", ["platform=cpu", *QUICK])
    assert no_file.result["projection"]["available"] is False
    assert "preflight" in no_file.result["projection"]["reason"]


def test_layouts_of_one_model_shape_share_one_trace_and_the_traces_kept_are_bounded(monkeypatch):
    """plan --best projects ~100 layouts of a handful of shapes: tp, pp and fsdp change how the pre-TP work is split,
    not the work, so they share one trace, equal to a trace taken afresh; a new shape (cp halves the local
    sequence) is traced anew; past TRACED_KEEP shapes the oldest is dropped."""
    from tprimat.backends.native import opcount

    monkeypatch.setattr(opcount, "TRACED", {})
    monkeypatch.setattr(opcount, "TRACED_KEEP", 2)
    base = ["platform=nvidia", "platform.gpu=h100", "model=llama", "training.precision=fp32"]
    first = opcount.trace_work(spec_of(*base))
    assert opcount.trace_work(spec_of(*base, "parallelism.tp=2", "parallelism.pp=2")) is first
    assert opcount.trace_work(spec_of(*base, "parallelism.fsdp=true")) is first  # fp32: the same weights either way
    afresh = opcount.trace_model(spec_of(*base).model, (1, 8192), fp32_weights=True, autocast=False)
    assert afresh.parts == first.parts
    halved = opcount.trace_work(spec_of(*base, "parallelism.cp=2"))
    assert halved is not first and halved.ops("layer", "fwd") != first.ops("layer", "fwd")
    opcount.trace_work(spec_of(*base, "training.seq_length=1024"))
    assert len(opcount.TRACED) == 2 and first not in opcount.TRACED.values()  # the oldest shape went first
