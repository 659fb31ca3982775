"""Power, energy and utilisation sampled in the background while steps are measured.

Sources: NVIDIA through nvidia-ml-py (power, the board's energy counter, utilisation, clocks, memory,
temperature), AMD through amdsmi, CPU through psutil (utilisation, resident memory) plus RAPL energy counters
where /sys/class/powercap is readable. A missing library or device is recorded as "unavailable: <reason>",
never a crash. Energy is attributed to the measured (non-warm-up) window only.
"""

from __future__ import annotations

import glob
import statistics
import threading
import time
from typing import Callable, Optional

import psutil


class Source:
    name = ""

    def sample(self) -> dict:  # power_w, energy_j (cumulative counter), util_pct, mem_gib, temp_c, clock_mhz
        raise NotImplementedError

    def close(self) -> None:
        pass


class NvmlSource(Source):
    name = "nvml"

    def __init__(self, device_index: int = 0):
        import pynvml

        pynvml.nvmlInit()
        self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(device_index)

    def sample(self) -> dict:
        nv, h = self.nvml, self.handle
        return {"power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000,
                "energy_j": nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000,
                "util_pct": nv.nvmlDeviceGetUtilizationRates(h).gpu,
                "mem_gib": nv.nvmlDeviceGetMemoryInfo(h).used / 2**30,
                "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                "clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)}

    def close(self) -> None:
        self.nvml.nvmlShutdown()


class AmdSmiSource(Source):
    name = "amdsmi"

    def __init__(self, device_index: int = 0):
        import amdsmi

        amdsmi.amdsmi_init()
        self.smi, self.handle = amdsmi, amdsmi.amdsmi_get_processor_handles()[device_index]

    def sample(self) -> dict:
        smi, h = self.smi, self.handle
        power = smi.amdsmi_get_power_info(h)
        activity = smi.amdsmi_get_gpu_activity(h)
        energy = smi.amdsmi_get_energy_count(h)
        return {"power_w": float(power.get("current_socket_power") or power.get("average_socket_power") or 0),
                "energy_j": energy["energy_accumulator"] * energy["counter_resolution"] / 1e6,
                "util_pct": activity.get("gfx_activity"),
                "mem_gib": smi.amdsmi_get_gpu_memory_usage(h, smi.AmdSmiMemoryType.VRAM) / 2**30}

    def close(self) -> None:
        self.smi.amdsmi_shut_down()


class CpuSource(Source):
    name = "psutil"

    def __init__(self):
        self.process = psutil.Process()
        self.process.cpu_percent(None)
        self.rapl = sorted(glob.glob("/sys/class/powercap/*rapl*:*/energy_uj"))
        if self.rapl:
            self.name = "psutil+rapl"

    def _rapl_j(self) -> Optional[float]:
        try:
            return sum(int(open(p).read()) for p in self.rapl) / 1e6 if self.rapl else None
        except OSError:
            return None

    def sample(self) -> dict:
        return {"util_pct": self.process.cpu_percent(None), "mem_gib": self.process.memory_info().rss / 2**30,
                "energy_j": self._rapl_j()}


def open_source(platform: str) -> tuple[Optional[Source], str]:
    """The sampler for this platform, or (None, 'unavailable: reason')."""
    factories: list[Callable[[], Source]] = {"nvidia": [NvmlSource], "amd": [AmdSmiSource],
                                             "cpu": [CpuSource]}.get(platform, [])
    for factory in factories:
        try:
            return factory(), ""
        except Exception as exc:  # noqa: BLE001 - no library / no driver / no device: say so, do not crash
            return None, f"unavailable: {factory.__name__}: {type(exc).__name__}: {exc}"
    return None, f"unavailable: no telemetry source for platform {platform}"


class Sampler:
    """Samples a source every ``interval_s`` on a daemon thread; ``window`` brackets the measured steps."""

    def __init__(self, source: Source, interval_s: float = 0.5):
        self.source, self.interval_s = source, interval_s
        self.samples: list[tuple[float, dict]] = []
        self.window: list[float] = []  # [start, end] of the measured steps, time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tprimat-telemetry", daemon=True)
        self.sample_cost_s: list[float] = []

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                self.samples.append((time.monotonic(), self.source.sample()))
            except Exception:  # noqa: BLE001 - a failed read is a gap, not a crash
                pass
            self.sample_cost_s.append(time.perf_counter() - t0)
            self._stop.wait(self.interval_s)

    def mark(self, measured: bool) -> None:
        """Called as each step ends: the measured window runs from the end of the last warm-up step (or the
        first step's end when there is no warm-up) to the end of the last measured step."""
        now = time.monotonic()
        if not measured:
            self._opened = now
        elif self.window:
            self.window[1] = now
        else:
            self.window = [getattr(self, "_opened", now), now]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.source.close()

    def summary(self, measured_tokens: int) -> dict:
        inside = [s for t, s in self.samples if self.window and self.window[0] <= t <= self.window[1]]
        power = [s["power_w"] for s in inside if s.get("power_w") is not None]
        energy = self._energy_j(inside, power)
        util = [s["util_pct"] for s in inside if s.get("util_pct") is not None]
        mem = [s["mem_gib"] for s in inside if s.get("mem_gib") is not None]
        temps = [s["temp_c"] for s in inside if s.get("temp_c") is not None]
        clocks = [s["clock_mhz"] for s in inside if s.get("clock_mhz") is not None]
        return {"source": self.source.name, "interval_s": self.interval_s, "samples": len(inside),
                "avg_power_w": statistics.fmean(power) if power else None, "peak_power_w": max(power, default=None),
                "energy_j": energy, "energy_per_token_j": energy / measured_tokens if energy and measured_tokens else None,
                "util_pct_avg": statistics.fmean(util) if util else None, "mem_gib_peak": max(mem, default=None),
                "temp_c_max": max(temps, default=None), "clock_mhz_avg": statistics.fmean(clocks) if clocks else None,
                "sample_cost_s_median": statistics.median(self.sample_cost_s) if self.sample_cost_s else None,
                "energy_note": None if energy else "unavailable: the source reports no energy or power"}

    def _energy_j(self, inside: list[dict], power: list[float]) -> Optional[float]:
        counters = [s["energy_j"] for s in inside if s.get("energy_j") is not None]
        if len(counters) >= 2:
            return counters[-1] - counters[0]
        if len(power) >= 2 and self.window:
            return statistics.fmean(power) * (self.window[1] - self.window[0])
        return None
