"""Telemetry: every local device sampled, energy summed over them and divided by their ranks' tokens, read
errors counted and named, RAPL package counters read (and unwrapped) from a powercap tree, a real CPU run."""

import importlib.util
import time

import pytest

from tests.conftest import QUICK, run_inprocess
from tprimat.measure.sampler import summarize
from tprimat.measure.telemetry import CpuSource, Sampler, Source, open_source, rapl_domains, visible_indices


def test_cpu_run_records_telemetry(tmp_path):
    # platform=cpu: the default (auto) trains on a GPU where there is one
    out = run_inprocess(tmp_path, ["platform=cpu", *QUICK, "benchmark.telemetry_interval_s=0.05"])
    t = out.result["telemetry"]
    assert t["source"].startswith("psutil") and t["samples"] >= 1
    assert t["util_pct_avg"] > 0 and t["mem_gib_peak"] > 0
    assert t["world_size"] == 1 and t["ranks_covered"] == 1 and t["devices_sampled"] == len(t["devices"]) >= 1
    assert t["read_errors"] == 0
    assert t["sample_cost_s_median"] < 0.01  # sampling costs microseconds, on its own thread


def test_telemetry_can_be_switched_off(tmp_path):
    out = run_inprocess(tmp_path, [*QUICK, "benchmark.telemetry=false"])
    assert out.result["telemetry"]["unavailable"] == "benchmark.telemetry=false"


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is not None, reason="NVML library present")
def test_missing_gpu_library_is_unavailable_not_a_crash():
    source, reason = open_source("nvidia", 8)
    assert source is None and reason.startswith("unavailable: NvmlSource")


class Counters(Source):
    """Devices with NVML-like cumulative energy counters, device i drawing ``watts[i]``; ``failing`` maps a
    device to the fraction of its reads that raise, as a flaky driver does."""

    name = "counters"

    def __init__(self, watts, ranks_covered=None, failing=None):
        self.watts, self.failing, self.t0 = watts, failing or {}, time.monotonic()
        self.devices = [f"fake:{i}" for i in range(len(watts))]
        self.ranks_covered = len(watts) if ranks_covered is None else ranks_covered
        self.reads = [0] * len(watts)

    def read(self, device):
        self.reads[device] += 1
        share = self.failing.get(device, 0)
        if share and (self.reads[device] % 4) < share * 4:
            raise OSError(f"driver busy on device {device}")
        return {"energy_j": (time.monotonic() - self.t0) * self.watts[device], "power_w": self.watts[device],
                "util_pct": 50.0, "mem_gib": 1.0 + device}


def measure(source, world_size, tokens=1000, before=0.2, during=0.5, after=0.2):
    sampler = Sampler(source, interval_s=0.01).start()
    time.sleep(before)
    sampler.mark(measured=False)  # end of warm-up: not counted
    time.sleep(during)
    sampler.mark(measured=True)
    time.sleep(after)  # after the last measured step: not counted
    sampler.stop()
    return sampler, sampler.summary(measured_tokens=tokens, world_size=world_size)


def test_energy_is_summed_over_every_device_in_the_measured_window():
    sampler, s = measure(Counters([100.0, 200.0, 300.0, 400.0]), world_size=4)
    window_s = sampler.window[1] - sampler.window[0]  # about 0.5 s; more when this machine is busy
    # 1000 W in all over the window only, give or take a few sampling intervals at its edges (10 J each)
    assert s["energy_j"] == pytest.approx(1000.0 * window_s, rel=1e-3)  # device 0 alone: about 450 J short
    assert s["energy_j_by_device"][3] == pytest.approx(4 * s["energy_j_by_device"][0], rel=0.05)
    assert s["energy_per_token_j"] == pytest.approx(s["energy_j"] / 1000)  # four devices, all 1000 tokens
    assert s["devices_sampled"] == 4 and s["ranks_covered"] == 4 and s["avg_power_w"] == 1000.0
    assert s["peak_power_w"] == 1000.0 and s["mem_gib_peak"] == 4.0 and s["read_errors"] == 0
    assert "extrapolated" not in s["energy_scope"]


def test_the_counter_is_read_at_the_window_edges_not_at_the_samples_inside_it():
    """Sampling every 0.2 s over a 0.5 s window: the readings inside it span about 0.2-0.4 s, so their rise
    alone would miss 20-60% of the energy; interpolated at the edges, a steady 100 W device gives 100 W x the
    window (the window's own monotonic bounds, written in the summary, are the reference)."""
    source = Counters([100.0])
    sampler = Sampler(source, interval_s=0.2).start()
    time.sleep(0.3)
    sampler.mark(measured=False)
    time.sleep(0.5)
    sampler.mark(measured=True)
    sampler.stop()  # right after the window: the stop's own reading brackets its end
    s = sampler.summary(measured_tokens=100, world_size=1)
    start, end = s["window_monotonic_s"]
    assert s["window_s"] == pytest.approx(end - start) and s["window_s"] >= 0.5
    assert s["energy_j"] == pytest.approx(100.0 * s["window_s"], rel=1e-3)


def test_one_node_of_two_is_extrapolated_and_says_so():
    _, s = measure(Counters([100.0, 100.0], ranks_covered=2), world_size=4)
    # the two sampled devices' ranks processed half of the 1000 tokens
    assert s["energy_per_token_j"] == pytest.approx(s["energy_j"] / 500)
    assert "covering 2 of 4 ranks" in s["energy_scope"] and "extrapolated x2" in s["energy_scope"]


def test_summarize_by_hand():
    rows = [[{"energy_j": 10.0, "power_w": 95.0}, {"energy_j": 1000.0, "power_w": 190.0}],
            [None, {"energy_j": 1100.0, "power_w": 210.0}],
            [{"energy_j": 60.0, "power_w": 105.0}, {"energy_j": 1200.0, "power_w": 200.0}]]
    s = summarize(rows, 1.0, ["a", "b"], ["OSError: busy", None], ranks_covered=2, world_size=2,
                  measured_tokens=50)
    assert s["energy_j_by_device"] == [50.0, 200.0] and s["energy_j"] == 250.0
    assert s["energy_per_token_j"] == 5.0  # 250 J over 50 tokens
    assert s["avg_power_w"] == pytest.approx(100.0 + 200.0)
    assert s["peak_power_w"] == pytest.approx(105.0 + 200.0)  # the last row; the middle one is incomplete
    assert s["read_errors"] == 1 and s["read_error_first"] == "OSError: busy" and s["energy_note"] is None
    # power only (no counter): mean power x the window
    power_only = [[{"power_w": 300.0}], [{"power_w": 500.0}]]
    assert summarize(power_only, 2.0, ["p"], [None], 1, 1, 100)["energy_j"] == 800.0


def test_dominant_read_errors_make_energy_unavailable_with_the_reason():
    _, s = measure(Counters([100.0, 100.0], failing={1: 0.75}), world_size=2)
    assert s["energy_j"] is None and s["energy_per_token_j"] is None
    assert s["energy_note"].startswith("unavailable:") and "reads of fake:1 failed" in s["energy_note"]
    assert "OSError: driver busy on device 1" in s["energy_note"]
    assert s["read_errors"] >= s["samples"] // 2


def test_occasional_read_errors_are_counted_and_the_counter_still_gives_energy():
    sampler, s = measure(Counters([100.0], failing={0: 0.25}), world_size=1)
    window_s = sampler.window[1] - sampler.window[0]
    assert s["read_errors"] > 0 and s["read_error_first"].startswith("OSError")
    assert s["energy_j"] == pytest.approx(100.0 * window_s, rel=1e-3) and s["energy_note"] is None


def test_a_device_with_neither_counter_nor_power_is_named():
    rows = [[{"energy_j": 1.0}, {"util_pct": 3.0}], [{"energy_j": 2.0}, {"util_pct": 4.0}]]
    s = summarize(rows, 1.0, ["gpu0", "gpu1"], [None, None], 2, 2, 10)
    assert s["energy_j"] is None and "gpu1 reports no energy or power" in s["energy_note"]


def test_visible_devices_pick_the_local_ranks_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_indices("CUDA_VISIBLE_DEVICES", 3) == ["0", "1", "2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6,GPU-abc")
    assert visible_indices("CUDA_VISIBLE_DEVICES", 2) == ["4", "6"]
    with pytest.raises(RuntimeError, match="lists 3 devices, but 4 local ranks"):
        visible_indices("CUDA_VISIBLE_DEVICES", 4)


def powercap(root, domain, name, energy_uj, range_uj=1_000_000):
    path = root / domain
    path.mkdir(parents=True, exist_ok=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{range_uj}\n")


def test_rapl_packages_are_read_and_unwrapped(tmp_path):
    powercap(tmp_path, "intel-rapl:0", "package-0", 900_000)
    powercap(tmp_path, "intel-rapl:0:0", "core", 500_000)  # inside package 0: not counted again
    powercap(tmp_path, "intel-rapl:1", "package-1", 100_000)
    powercap(tmp_path, "intel-rapl:2", "psys", 100_000)  # the whole platform, overlapping the packages
    source = CpuSource(local_ranks=4, rapl_root=tmp_path)
    assert source.name == "psutil+rapl" and source.devices == ["rapl:package-0", "rapl:package-1"]
    assert source.ranks_covered == 4  # every rank on the host shares the packages
    first = [source.read(0)["energy_j"], source.read(1)["energy_j"]]
    powercap(tmp_path, "intel-rapl:0", "package-0", 200_000)  # wrapped: 900k -> 1M -> 200k is +300k uJ
    powercap(tmp_path, "intel-rapl:1", "package-1", 600_000)
    second = [source.read(0)["energy_j"], source.read(1)["energy_j"]]
    assert [b - a for a, b in zip(first, second)] == pytest.approx([0.3, 0.5])


def test_unreadable_rapl_leaves_the_process_without_energy(tmp_path):
    assert rapl_domains(tmp_path) == []
    source = CpuSource(rapl_root=tmp_path)
    assert source.devices == ["process"]
    sample = source.read(0)
    assert sample["mem_gib"] > 0 and "util_pct" in sample and "energy_j" not in sample
