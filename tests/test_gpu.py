"""The CUDA/ROCm path (skipped without a GPU): native bf16 training, FSDP2 on one device, CUDA-event timing
against the wall clock, allocator memory."""

import time

import pytest
import torch

from tests.conftest import QUICK, run_inprocess

pytestmark = pytest.mark.gpu
GPU = ["platform=nvidia" if torch.version.hip is None else "platform=amd", "platform.devices_per_node=1",
       "model=llama_tiny", "training.precision=bf16", *QUICK]


def test_native_bf16_trains_and_reads_back_bf16(tmp_path):
    out = run_inprocess(tmp_path, GPU)
    assert out.status == "ok", out.result["error"]
    effective = out.result["framework"]["effective"]
    assert effective["precision"] == "bf16" and effective["layout"]["dp"] == 1
    summary = out.result["summary"]
    device_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    assert 0 < summary["peak_memory_gib"] < device_gib


def test_fsdp2_on_one_gpu(tmp_path):
    """The model the trainer held was an FSDP2 module (read back from the live object), in bf16 compute."""
    out = run_inprocess(tmp_path, [*GPU, "parallelism.fsdp=true"])
    assert out.status == "ok", out.result["error"]
    effective = out.result["framework"]["effective"]
    assert effective["precision"] == "bf16" and effective["layout"]["fsdp"] is True
    assert effective["layout"]["ddp"] is False


def test_cuda_graphs_accumulate_micro_batches_as_the_default_mode_does(tmp_path):
    """reduce-overhead replays each block's CUDA graph; two micro batches per step must train the same model:
    the same losses and gradient norms as the default mode, which runs no graphs."""
    common = [*GPU, "model=gpt2_tiny", "parallelism.fsdp=false", "training.global_batch_size=8", "training.micro_batch_size=4",
              "training.compile=true", "benchmark.telemetry=false"]
    default = run_inprocess(tmp_path / "default", common)
    graphs = run_inprocess(tmp_path / "graphs", [*common, "training.compile_mode=reduce-overhead"])
    assert default.status == graphs.status == "ok", graphs.result["error"]
    assert graphs.result["framework"]["effective"]["grad_accum_steps"] == 2
    for field in ("loss", "grad_norm"):
        expected = [s[field] for s in default.result["steps"]]
        assert [s[field] for s in graphs.result["steps"]] == pytest.approx(expected, rel=1e-3)


def test_cuda_event_step_time_matches_the_wall_clock():
    from tprimat.measure.step import StepClock

    device = torch.device("cuda", 0)
    a = torch.randn(4096, 4096, device=device)
    clock = StepClock(device)
    torch.cuda.synchronize()
    ratios = []
    for _ in range(5):
        t0 = time.perf_counter()
        clock.start()
        for _ in range(20):
            a = a @ a / 4096
        seconds = clock.stop()
        ratios.append(seconds / (time.perf_counter() - t0))
    assert sorted(ratios)[2] == pytest.approx(1.0, abs=0.05)
