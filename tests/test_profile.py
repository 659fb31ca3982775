"""Profiling: the breakdown's arithmetic by hand, kernel names put in their categories, a real profiled CPU
run writing a trace and a breakdown that compare tabulates and plots, and the rules of profile.*."""

import json

import pytest
import torch

from tests.conftest import QUICK, run_inprocess
from tprimat.measure.profile import category, device_breakdown, host_breakdown, intersection_s, top_kernels, union_s


def test_union_and_intersection_by_hand():
    assert union_s([(0, 1), (0.5, 2), (3, 3.5)]) == 2.5
    assert union_s([]) == 0
    assert intersection_s([(0, 2), (3, 3.5)], [(1.5, 3)]) == pytest.approx(0.5)


def test_device_breakdown_by_hand():
    """Two steps in 4 s: matmul [0,1] and [0.5,2] (2 s), communication [1.5,3] (1.5 s, 0.5 s of it under the
    matmul), attention [3,3.5]; busy [0,3.5], so 0.5 s idle."""
    kernels = [("sm90_xmma_gemm_bf16bf16", 0, 1), ("ampere_bf16_s16816gemm", 0.5, 2),
               ("ncclDevKernel_AllReduce_Sum_bf16", 1.5, 3), ("flash_fwd_kernel", 3, 3.5)]
    b = device_breakdown(kernels, window_s=4.0, steps=2)
    per_step = b["seconds_per_step"]
    assert (per_step["matmul"], per_step["communication"], per_step["attention"], per_step["idle"]) == (1.0, 0.75, 0.25, 0.25)
    assert per_step["optimizer"] == per_step["other_compute"] == per_step["data_loading"] == 0
    assert b["communication_overlapped_s_per_step"] == pytest.approx(0.25) and b["step_s"] == 2.0
    assert sum(b["share"].values()) == pytest.approx(1.0)


def test_host_breakdown_by_hand():
    ops = [("aten::mm", 0.6, False), ("aten::randint", 0.1, True), ("aten::add_", 0.2, False),
           ("Optimizer.step#AdamW.step", 0.3, False)]
    b = host_breakdown(ops, window_s=1.5, steps=1)["seconds_per_step"]
    assert b["matmul"] == 0.6 and b["data_loading"] == 0.1 and b["other_compute"] == 0.2 and b["optimizer"] == 0.3
    assert b["idle"] == pytest.approx(0.3)


@pytest.mark.parametrize("name,expected", [
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>", "matmul"),
    ("nvjet_tst_192x192_64x3_2x1_v_bz_coopB_TNT", "matmul"), ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x64", "matmul"),
    ("aten::mm", "matmul"), ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "communication"), ("c10d::allreduce_", "communication"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
    ("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", "other_compute"),
])
def test_kernel_names_fall_in_their_categories(name, expected):
    assert category(name) == expected


def test_top_kernels_sum_calls_and_time_per_step():
    top = top_kernels([("aten::mm", 0.5), ("aten::add", 0.1), ("aten::mm", 0.3)], steps=2, limit=1)
    assert top == [{"name": "aten::mm", "category": "matmul", "calls_per_step": 1.0, "seconds_per_step": 0.4}]


@pytest.mark.slow
def test_a_profiled_cpu_run_writes_a_trace_and_a_breakdown_compare_shows(tmp_path):
    from tests.test_compare import compare

    run_dir = tmp_path / "run"
    out = run_inprocess(run_dir, [*QUICK, "model=gpt2_tiny", "training.max_steps=6", "benchmark.warmup_steps=2",
                                  "profile.enabled=true", "profile.steps=[3,4]", "benchmark.telemetry=false"])
    assert out.status == "ok", out.result["error"]
    prof = out.result["profile"]
    assert prof["steps"] == [3, 4] and prof["rank"] == 0 and prof["trace"] == "rank0.json"
    trace = json.loads((run_dir / "profile" / "rank0.json").read_text())
    assert any(e.get("name") == "aten::mm" for e in trace["traceEvents"])
    b = prof["breakdown"]
    assert b["steps"] == 2 and sum(b["share"].values()) == pytest.approx(1.0)
    assert b["seconds_per_step"]["matmul"] > 0 and b["seconds_per_step"]["attention"] > 0
    assert b["step_s"] == pytest.approx(sum(s["step_time_s"] for s in out.result["steps"] if s["step"] in (3, 4)) / 2)
    assert any(k["name"] == "aten::mm" for k in prof["top"])
    assert prof["overhead"]["ratio"] > 0  # profiled steps 3-4 against unprofiled measured steps 5-6
    memory = prof["memory"]["by_category"]  # MemTracker over step 3: fp32 weights, AdamW's two moments alive
    params_gib = out.result["plan"]["params_total"] * 4 / 2**30
    assert memory["tracked"] and memory["parameters_gib"] == pytest.approx(params_gib, rel=1e-6)
    assert memory["optimizer_gib"] >= 2 * params_gib and memory["total_gib"] >= memory["parameters_gib"] + \
        memory["optimizer_gib"] and prof["memory"]["allocator"] is None  # the CUDA allocator's peaks: GPUs only
    report = tmp_path / "report"
    proc = compare(run_dir, "--out", report)
    assert proc.returncode == 0, proc.stderr
    assert "## Where the time goes (profiled steps)" in (report / "report.md").read_text()
    assert (report / "plots" / "breakdown.png").stat().st_size > 0
    groups = json.loads((report / "comparison.json").read_text())["groups"]
    assert groups[0]["breakdown"]["seconds_per_step"]["matmul"] == pytest.approx(b["seconds_per_step"]["matmul"])
    assert groups[0]["memory"]["by_category"]["optimizer_gib"] == memory["optimizer_gib"]  # one run: its own
    assert "## Where the memory goes (profiled step's peak)" in (report / "report.md").read_text()


@pytest.mark.slow
def test_memory_is_not_tracked_by_category_where_memtracker_cannot_follow(tmp_path):
    out = run_inprocess(tmp_path, [*QUICK, "model=gpt2_tiny", "training.max_steps=4", "benchmark.warmup_steps=2",
                                   "profile.enabled=true", "training.compile=true", "benchmark.telemetry=false"])
    assert out.status == "ok", out.result["error"]
    memory = out.result["profile"]["memory"]["by_category"]
    assert memory == {"tracked": False, "reason": "not tracked: training.compile=true (compiled graphs run below "
                                                  "MemTracker's dispatch mode)"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA caching allocator needs a GPU")
def test_the_allocator_peaks_read_the_allocators_own_counters():
    from tprimat.measure.memory_profile import allocator_peaks

    device = torch.device("cuda")
    torch.cuda.reset_peak_memory_stats(device)
    block = torch.empty(256 * 2**20, dtype=torch.uint8, device=device)  # 256 MiB
    peaks = allocator_peaks(device)
    assert peaks["allocated_peak_gib"] >= 0.25 and peaks["reserved_peak_gib"] >= peaks["allocated_peak_gib"]
    assert peaks["allocated_peak_gib"] == torch.cuda.max_memory_allocated(device) / 2**30
    del block


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA caching allocator's snapshot needs a GPU")
def test_an_out_of_memory_error_names_the_allocator_snapshot(tmp_path):
    from tprimat.backends.native.backend import out_of_memory
    from tprimat.measure.memory_profile import record_history

    device = torch.device("cuda")
    record_history(device)
    try:
        torch.empty(2**50, dtype=torch.uint8, device=device)  # a petabyte
    except torch.OutOfMemoryError as exc:
        error = out_of_memory(exc, device, tmp_path)
    assert "allocator snapshot: profile/oom_snapshot_rank0.pickle" in str(error)
    import pickle

    snapshot = pickle.loads((tmp_path / "profile" / "oom_snapshot_rank0.pickle").read_bytes())
    assert "segments" in snapshot and "device_traces" in snapshot


@pytest.mark.parametrize("overrides,expected", [
    (["profile.steps=[1,2]"], "profile.steps=[1, 2]: must be [first, last] measured step numbers"),
    (["profile.steps=[3,9]"], "last <= training.max_steps=4"),
    (["profile.ranks=[2]"], "profile.ranks=[2]: must list ranks in 0..0"),
    (["training.max_steps=3"], "the default profiled steps are the first two measured ones"),
    (["profile.tool=vtune"], "profile.tool=vtune: must be one of torch, nsys, rocprof"),
    (["profile.tool=nsys"], "profile.tool=nsys: framework=native profiles with the PyTorch profiler"),
])
def test_profile_rules(tmp_path, overrides, expected):
    out = run_inprocess(tmp_path, [*QUICK, "benchmark.warmup_steps=2", "profile.enabled=true", *overrides])
    assert out.status == "invalid" and expected in out.result["error"], out.result["error"]


def test_an_external_framework_runs_under_nsys_when_asked(tmp_path):
    out = run_inprocess(tmp_path, ["framework=megatron", "model=llama", "training.seq_length=2048", "platform=nvidia",
                                   "platform.gpu=h100",
                                   "framework.path=.", "dry_run=true", "profile.enabled=true", "profile.tool=nsys",
                                   "logging.wandb.mode=disabled"])
    argv = out.result["plan"]["backend_config"]["argv"]
    assert argv[:2] == ["nsys", "profile"] and argv[argv.index("-o") + 1] == str((tmp_path / "profile" / "nsys").resolve())
    assert "pretrain_gpt.py" in " ".join(argv)  # the framework's own command follows
