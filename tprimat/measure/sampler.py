"""The background sampler: reads every device of a telemetry source on a daemon thread, brackets the measured
steps, and turns the readings into the result's ``telemetry`` section (``summarize``, pure arithmetic)."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Optional

Row = list[Optional[dict]]  # one reading per device; None where the read failed


class Sampler:
    """Samples every device of ``source`` every ``interval_s``; ``window`` brackets the measured steps."""

    def __init__(self, source, interval_s: float = 0.5):
        self.source, self.interval_s = source, interval_s
        self.samples: list[tuple[float, Row]] = []
        self.first_error: list[Optional[str]] = [None] * len(source.devices)
        self.window: list[float] = []  # [start, end] of the measured steps, time.monotonic()
        self.sample_cost_s: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tprimat-telemetry", daemon=True)

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def _read(self, device: int) -> Optional[dict]:
        try:
            return self.source.read(device)
        except Exception as exc:  # noqa: BLE001 - a failed read is counted, and named if reads keep failing
            self.first_error[device] = self.first_error[device] or f"{type(exc).__name__}: {exc}"
            return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            self.samples.append((time.monotonic(), [self._read(i) for i in range(len(self.source.devices))]))
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
        if not self._thread.is_alive():  # one reading after the window, so that its end is bracketed
            self.samples.append((time.monotonic(), [self._read(i) for i in range(len(self.source.devices))]))
        self.source.close()

    def summary(self, measured_tokens: int, world_size: int = 1) -> dict:
        rows = [row for t, row in self.samples if self.window and self.window[0] <= t <= self.window[1]]
        window_s = self.window[1] - self.window[0] if self.window else 0.0
        rises = [counter_rise(self.samples, i, self.window) for i in range(len(self.source.devices))]
        out = summarize(rows, window_s, self.source.devices, self.first_error, self.source.ranks_covered,
                        world_size, measured_tokens, rises)
        cost = statistics.median(self.sample_cost_s) if self.sample_cost_s else None
        return {"source": self.source.name, "interval_s": self.interval_s, **out, "window_s": window_s,
                "window_monotonic_s": list(self.window) or None, "sample_cost_s_median": cost}


def counter_at(points: list[tuple[float, float]], t: float) -> Optional[float]:
    """A cumulative counter's value at ``t``, linear between the readings that bracket it (None if none do)."""
    for (t0, c0), (t1, c1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)
    return None


def counter_rise(samples: list[tuple[float, Row]], device: int, window: list[float]) -> Optional[float]:
    """Device ``device``'s energy counter rise over exactly ``window``, interpolated between the readings on
    either side of each edge: the readings inside the window alone span up to two sampling intervals less."""
    if not window:
        return None
    points = [(t, row[device]["energy_j"]) for t, row in samples
              if row[device] is not None and row[device].get("energy_j") is not None]
    start, end = counter_at(points, window[0]), counter_at(points, window[1])
    return end - start if start is not None and end is not None else None


def _values(readings: list[dict], key: str) -> list[float]:
    return [r[key] for r in readings if r.get(key) is not None]


def device_energy_j(readings: list[dict], window_s: float, rise: Optional[float] = None) -> Optional[float]:
    """A cumulative counter's rise over the window (``rise``, interpolated at its edges, when known; else
    between the first and last readings inside it); else mean power x window; else None."""
    counters, power = _values(readings, "energy_j"), _values(readings, "power_w")
    if rise is not None:
        return rise
    if len(counters) >= 2:
        return counters[-1] - counters[0]
    if len(power) >= 2 and window_s > 0:
        return statistics.fmean(power) * window_s
    return None


def _energy_problem(devices: list[str], per_device: list[list[dict]], reads: int, first_error: list,
                    energy: list) -> Optional[str]:
    for label, ok, error, joules in zip(devices, per_device, first_error, energy):
        if reads and reads - len(ok) > reads / 2:
            return f"unavailable: {reads - len(ok)} of {reads} reads of {label} failed: {error}"
        if joules is None:
            return f"unavailable: {label} reports no energy or power in the measured window ({len(ok)} readings)"
    return None


def summarize(rows: list[Row], window_s: float, devices: list[str], first_error: list, ranks_covered: int,
              world_size: int, measured_tokens: int, rises: Optional[list] = None) -> dict:
    """Energy summed over the sampled devices, divided by the tokens of the ranks they cover.

    The devices' ranks processed ``measured_tokens * covered / world_size`` of the run's tokens (every rank
    does an equal share of the work in data, tensor and pipeline parallel layouts alike), so energy per token
    is exact when the devices cover every rank and an extrapolation, said in ``energy_scope``, otherwise."""
    per_device = [[row[i] for row in rows if row[i] is not None] for i in range(len(devices))]
    rises = rises or [None] * len(devices)
    energy = [device_energy_j(readings, window_s, rise) for readings, rise in zip(per_device, rises)]
    failed = [len(rows) - len(ok) for ok in per_device]
    problem = _energy_problem(devices, per_device, len(rows), first_error, energy) if devices else "unavailable: no devices"
    total = None if problem else sum(energy)
    covered = max(1, min(ranks_covered, world_size))
    share = measured_tokens * covered / world_size if measured_tokens and world_size else 0
    power_means = [statistics.fmean(p) if p else None for p in (_values(ok, "power_w") for ok in per_device)]
    totals = [sum(r["power_w"] for r in row) for row in rows
              if row and all(r is not None and r.get("power_w") is not None for r in row)]
    everything = [r for ok in per_device for r in ok]
    util, clocks = _values(everything, "util_pct"), _values(everything, "clock_mhz")
    return {"devices": list(devices), "devices_sampled": len(devices), "ranks_covered": covered,
            "world_size": world_size, "samples": len(rows), "read_errors": sum(failed),
            "read_error_first": next((e for e in first_error if e), None),
            "energy_j": total, "energy_j_by_device": energy,
            "energy_per_token_j": total / share if total is not None and share else None,
            "energy_scope": _scope(len(devices), covered, world_size),
            "energy_note": problem if problem else (None if share else "unavailable: no measured tokens"),
            "avg_power_w": sum(power_means) if power_means and None not in power_means else None,
            "avg_power_w_by_device": power_means, "peak_power_w": max(totals, default=None),
            "util_pct_avg": statistics.fmean(util) if util else None,
            "mem_gib_peak": max(_values(everything, "mem_gib"), default=None),
            "temp_c_max": max(_values(everything, "temp_c"), default=None),
            "clock_mhz_avg": statistics.fmean(clocks) if clocks else None}


def _scope(devices: int, covered: int, world_size: int) -> str:
    scope = f"{devices} device(s) sampled, covering {covered} of {world_size} ranks"
    if covered < world_size:
        scope += f"; energy per token extrapolated x{world_size / covered:g} assuming equal work per rank"
    return scope
