"""Attention as the stacks run it: cuDNN's figures measured on Blackwell itself (BF16 and FP8), FP8 attention
(training.fp8.attention) and all-to-all context parallelism (parallelism.cp_comm_type=a2a): the figures against the
benchmark's own times, the projection's lookup and traffic by hand, the keys' refusals and the launches' settings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.test_external import NO_HARDWARE
from tests.test_projection import ROUND, WORK, spec_of
from tprimat.backends.external.megatron import as_cli, megatron_settings
from tprimat.backends.external.nemo import bridge_settings, nemo2_settings
from tprimat.compose import compose
from tprimat.spec import kernels
from tprimat.spec.build import build_spec
from tprimat.spec.plan import make_plan
from tprimat.spec.projection import OpCost, ceilings, op_time_s, project
from tprimat.spec.validate import validate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import mlperf_layouts  # noqa: E402
import mlperf_projection_rows  # noqa: E402

# cudnn-frontend benchmark/sdpa_benchmark_training/artifacts/sdpa_fp8_benchmark_results_NVIDIA_<GPU>.csv: the
# forward and backward times in ms it measured (batch 1, 128 query heads, head dim 128, causal), not its TFLOP/s
TIMES_MS = [("b200", "bf16", 8192, 1.589, 5.526), ("b200", "fp8", 8192, 1.464, 4.382),
            ("b200", "bf16", 4096, 0.482, 1.650), ("b200", "fp8", 32768, 19.751, 55.593),
            ("gb200", "bf16", 8192, 1.389, 4.539), ("gb200", "fp8", 16384, 4.327, 16.020),
            ("gb300", "bf16", 8192, 1.281, 4.778), ("gb300", "fp8", 8192, 1.060, 3.632),
            ("gb300", "fp8", 2048, 0.133, 0.599)]


@pytest.mark.parametrize("gpu,precision,seq,fwd_ms,bwd_ms", TIMES_MS)
def test_the_cudnn_figures_are_the_flops_of_the_benchmarks_own_times(gpu, precision, seq, fwd_ms, bwd_ms):
    """Causal attention's forward does 4 b h s^2 d / 2 FLOPs and its backward 2.5 times that (the convention the
    operation trace counts in): the TFLOP/s held for each device are those of the times it measured."""
    forward_flops = 4 * 1 * 128 * seq * seq * 128 / 2
    fwd, bwd = kernels.CUDNN_ON_DEVICE[gpu][precision].tflops(seq)
    assert fwd == pytest.approx(forward_flops / (fwd_ms * 1e-3) / 1e12, rel=5e-3)
    assert bwd == pytest.approx(2.5 * forward_flops / (bwd_ms * 1e-3) / 1e12, rel=5e-3)


def blackwell(gpu, *overrides, framework="megatron"):
    return spec_of(f"platform.gpu={gpu}", f"framework={framework}", "framework.path=.", "training.seq_length=8192",
                   *overrides)


def kernel_tflops(c, backward=False):
    op = OpCost("attention", 1e12, 0.0)
    return 1.0 / (op_time_s(op, c, backward) - c.op_gap_s)


def test_transformer_engines_attention_on_blackwell_runs_at_cudnns_measured_figure():
    """B200 at 8,192 tokens, its CSV's row: 1,384.231 / 994.850 TFLOP/s in BF16, 1,502.114 / 1,254.687 in FP8."""
    c, _ = ceilings(blackwell("b200", "training.precision=fp8", "training.fp8.recipe=current"))
    assert (kernel_tflops(c), kernel_tflops(c, True)) == pytest.approx((1384.231, 994.850), rel=1e-3)
    c, _ = ceilings(blackwell("b200", "training.precision=fp8", "training.fp8.recipe=current",
                              "training.fp8.attention=true", framework="nemo"))
    assert (kernel_tflops(c), kernel_tflops(c, True)) == pytest.approx((1502.114, 1254.687), rel=1e-3)
    assert "measured on B200" in c.sources["attention"] and "cudnn-frontend" in c.sources["attention"]


def test_a_part_without_its_own_figure_takes_its_architectures_at_its_matmul_ceiling():
    """B300 (no figure of its own): GB300's, scaled by the two parts' BF16 ceilings, each the same fraction of a
    spec peak (2,250 and 2,500 TFLOP/s): x 0.9. torchtitan's SDPA on B200 is not cuDNN: H100's FlashAttention-2
    figure at the B200's matmul ceiling (1,745 / 794.5), as before."""
    c, _ = ceilings(blackwell("b300"))
    assert (kernel_tflops(c), kernel_tflops(c, True)) == pytest.approx((1716.056 * 0.9, 1150.498 * 0.9), rel=1e-3)
    assert "gb300" in c.sources["attention"]
    c, _ = ceilings(blackwell("b200", framework="torchtitan"))
    assert kernel_tflops(c) == pytest.approx(333.0 * 1745.0 / 794.5, rel=1e-3)


def test_fp8_attention_without_a_measured_fp8_figure_says_it_takes_bf16s():
    c, _ = ceilings(spec_of("framework=nemo", "framework.path=.", "training.seq_length=8192",
                            "training.precision=fp8", "training.fp8.recipe=current", "training.fp8.attention=true"))
    assert kernel_tflops(c) == pytest.approx(529.0, rel=1e-3)  # H100's cuDNN BF16 figure (FlashAttention-3's paper)
    assert "no FP8 figure measured on this device" in c.sources["attention"]


def test_all_to_all_context_parallelism_attends_over_the_whole_sequence():
    """CP 2 as a ring: each call holds 4,096 queries (B200 BF16 1,141.140 TFLOP/s); as all-to-all, all 8,192 with
    half the heads (1,384.231)."""
    ring, _ = ceilings(blackwell("b200", "parallelism.cp=2"))
    a2a, _ = ceilings(blackwell("b200", "parallelism.cp=2", "parallelism.cp_comm_type=a2a"))
    assert kernel_tflops(ring) == pytest.approx(1141.140, rel=1e-3)
    assert kernel_tflops(a2a) == pytest.approx(1384.231, rel=1e-3)


def test_all_to_all_traffic_is_exposed_by_hand():
    """llama_tiny (hidden 256, 2 KV heads of 32), seq 256, CP 2 in a node at 100 GB/s, 4 layers: each layer sends
    (n-1)/n of Q, the output (seq/cp x hidden, bf16) and K, V (seq/cp x 2 x 64, bf16) forward, as much backward."""
    spec = spec_of("framework=megatron", "framework.path=.", "platform.devices_per_node=2", "parallelism.cp=2",
                   "parallelism.cp_comm_type=a2a", "training.seq_length=256", "training.global_batch_size=1",
                   "training.micro_batch_size=1")
    p = project(spec, WORK, ROUND, dp=1, accum=1, peak_tflops=None)
    per_layer = (2 - 1) / 2 * (2 * 128 * 256 * 2 + 128 * 2 * 64 * 2) / 100e9
    assert p["breakdown_s"]["cp_s"] == pytest.approx(4 * 2 * per_layer)


@pytest.mark.parametrize("overrides,expected", [
    (["training.fp8.attention=true"], "FP8 attention needs training.precision=fp8"),
    (["framework=megatron", "framework.path=.", "training.precision=fp8", "training.fp8.recipe=current",
      "training.fp8.attention=true"], "Megatron-LM's command line has no flag for it"),
    (["framework=torchtitan", "training.precision=fp8", "training.fp8.attention=true"],
     "scaled_dot_product_attention in BF16"),
    (["framework=torchtitan", "parallelism.cp=2", "parallelism.cp_comm_type=a2a", "platform.devices_per_node=2"],
     "all-to-all context parallelism is Megatron-core's"),
    (["framework=megatron", "framework.path=.", "parallelism.cp=4", "parallelism.cp_comm_type=a2a",
      "platform.devices_per_node=4"], "each rank's 8 query and 2 key/value heads"),
    (["parallelism.cp_comm_type=ring"], "parallelism.cp_comm_type=ring"),
])
def test_fp8_attention_and_all_to_all_cp_are_refused_by_key_where_they_cannot_run(overrides, expected):
    problems = "\n".join(validate(spec_of(*overrides), NO_HARDWARE, dry_run=True))
    assert expected in problems


def test_the_launches_carry_both_settings_where_the_framework_takes_them():
    spec = spec_of("framework=nemo", "framework.path=.", "training.precision=fp8", "training.fp8.recipe=current",
                   "training.fp8.attention=true", "parallelism.cp=2", "parallelism.cp_comm_type=a2a",
                   "platform.devices_per_node=2")
    bridge = {row[0]: row[1:] for row in bridge_settings(spec)}
    assert bridge["cp_comm_type"] == ("model.cp_comm_type", "model.cp_comm_type", "a2a")
    assert bridge["fp8_dot_product_attention"] == ("mixed_precision.fp8_dot_product_attention",
                                                   "model.fp8_dot_product_attention", True)
    nemo2 = {row[0]: row[1:] for row in nemo2_settings(spec)}
    assert nemo2["cp_comm_type"] == ("model.config.cp_comm_type", "model.config.cp_comm_type", "a2a")
    assert nemo2["fp8_dot_product_attention"][0] == "trainer.plugins.fp8_dot_product_attention"
    megatron = spec_of("framework=megatron", "framework.path=.", "parallelism.cp=2", "parallelism.cp_comm_type=a2a",
                       "platform.devices_per_node=2")
    argv = as_cli(megatron_settings(megatron, make_plan(megatron, NO_HARDWARE)))
    assert argv[argv.index("--cp-comm-type") + 1] == "a2a"
    plain = spec_of("framework=nemo", "framework.path=.", "parallelism.cp=2", "platform.devices_per_node=2")
    assert not {"cp_comm_type", "fp8_dot_product_attention"} & {row[0] for row in bridge_settings(plain)}


def candidate(cp_comm=None, yaml=True, missing=()):
    return {"cp_comm": cp_comm, "yaml": yaml, "missing": list(missing), "env": {}}


@pytest.mark.parametrize("candidates,expected", [
    ([candidate("a2a")], "a2a"),  # NVIDIA's LoRA yaml: ${oc.env:CP_COMM_TYPE,'a2a'}
    ([candidate()], "p2p"),  # a yaml without the key: Megatron-core's default
    ([candidate(yaml=False)], None),  # no yaml in the submission: its container's decides
    ([candidate("a2a", missing=["config_common.sh"])], None),
    ([candidate("a2a"), candidate("p2p")], None),  # the candidates disagree
])
def test_an_mlperf_configs_cp_exchange_is_what_it_sets_or_unknown(candidates, expected):
    assert mlperf_layouts.cp_comm_of(candidates) == expected


def test_an_mlperf_row_is_projected_with_its_cp_exchange_and_fp8_attention():
    row = {"round": "v5.1", "submitter": "NVIDIA", "system": "s", "benchmark": "llama2_70b_lora",
           "accelerator": "NVIDIA Blackwell GPU (B200-SXM-180GB)", "nodes": 8, "devices_per_node": 8, "tp": 1, "pp": 1,
           "cp": 8, "vp": None, "micro_batch_size": 1, "global_batch_size": 8, "precision": "fp8",
           "fp8_recipe": "delayed", "fp8_attention": True, "cp_comm_type": "a2a", "tokens_per_s_per_device": 1.0,
           "config": "c.sh"}
    overrides = mlperf_projection_rows.expressed(row)["overrides"]
    assert "parallelism.cp_comm_type=a2a" in overrides and "training.fp8.attention=true" in overrides
    spec = build_spec(compose(overrides))
    problems = "\n".join(validate(spec, NO_HARDWARE, dry_run=True))
    assert "cp_comm_type" not in problems and "fp8.attention" not in problems


@pytest.mark.parametrize("exchange", ["allgather", "a2a+p2p"])
def test_an_mlperf_row_with_a_cp_exchange_the_spec_lacks_is_listed_with_why(exchange):
    """Megatron-core also has all-gather and hierarchical (a2a+p2p) context parallelism: a row that ran them is not
    projected as a ring, it is listed."""
    row = {"benchmark": "llama2_70b_lora", "accelerator": "NVIDIA Blackwell GPU (GB200)", "tokens_per_s_per_device": 1.0,
           "tp": 1, "pp": 1, "cp": 8, "vp": None, "micro_batch_size": 1, "global_batch_size": 8, "precision": "fp8",
           "fp8_recipe": None, "cp_comm_type": exchange, "match": "unique"}
    assert f"context parallelism's exchange {exchange}" in mlperf_projection_rows.why_not(row)
    assert mlperf_projection_rows.why_not({**row, "cp_comm_type": "a2a"}) is None


def test_a_logs_printed_model_config_says_its_cp_exchange():
    """NeMo's LoRA runs print their model config at start (Lambda's and Supermicro's v5.1 GB300 logs:
    `` 0:   cp_comm_type: a2a``); a repr of it elsewhere in the log (``cp_comm_type='a2a',``) is not that line."""
    log = "\n".join([":::MLLOG {\"key\": \"submission_org\", \"value\": \"x\"}", " 0:   context_parallel_size: 8",
                     " 0:   cp_comm_type: a2a", " 0:                 cp_comm_type='p2p',"])
    assert mlperf_layouts.parse_log(log)["cp_comm"] == "a2a"
    assert mlperf_layouts.parse_log(" 0:                 cp_comm_type='a2a',")["cp_comm"] is None
