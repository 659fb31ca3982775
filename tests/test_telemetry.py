"""Telemetry: sampled for real on CPU, energy attributed to the measured window, missing sources said so."""

import importlib.util
import time

import pytest

from tests.conftest import QUICK, run_inprocess
from tprimat.measure.telemetry import CpuSource, Sampler, Source, open_source


def test_cpu_run_records_telemetry(tmp_path):
    out = run_inprocess(tmp_path, [*QUICK, "benchmark.telemetry_interval_s=0.05"])
    t = out.result["telemetry"]
    assert t["source"].startswith("psutil") and t["samples"] >= 1
    assert t["util_pct_avg"] > 0 and t["mem_gib_peak"] > 0
    assert t["sample_cost_s_median"] < 0.01  # sampling costs microseconds, on its own thread


def test_telemetry_can_be_switched_off(tmp_path):
    out = run_inprocess(tmp_path, [*QUICK, "benchmark.telemetry=false"])
    assert out.result["telemetry"]["unavailable"] == "benchmark.telemetry=false"


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is not None, reason="NVML library present")
def test_missing_gpu_library_is_unavailable_not_a_crash():
    source, reason = open_source("nvidia")
    assert source is None and reason.startswith("unavailable: NvmlSource")


class Counter(Source):
    """A hardware energy counter that advances 100 J per second (an RAPL / NVML-like cumulative register)."""

    name = "counter"

    def __init__(self):
        self.t0 = time.monotonic()

    def sample(self):
        return {"energy_j": (time.monotonic() - self.t0) * 100.0, "power_w": 100.0}


def test_energy_is_attributed_to_the_measured_window_only():
    sampler = Sampler(Counter(), interval_s=0.01).start()
    time.sleep(0.3)
    sampler.mark(measured=False)  # end of warm-up: not counted
    time.sleep(0.5)
    sampler.mark(measured=True)
    time.sleep(0.3)  # after the last measured step: not counted
    sampler.stop()
    summary = sampler.summary(measured_tokens=1000)
    window_s = sampler.window[1] - sampler.window[0]  # about 0.5 s; more when this machine is busy
    # 100 W over the window only, give or take a few sampling intervals at its edges (1 J each)
    assert summary["energy_j"] == pytest.approx(100.0 * window_s, abs=4.0)
    assert summary["energy_per_token_j"] == pytest.approx(summary["energy_j"] / 1000)
    assert summary["avg_power_w"] == 100.0


def test_cpu_source_reads_without_privileges():
    sample = CpuSource().sample()
    assert sample["mem_gib"] > 0 and "util_pct" in sample
