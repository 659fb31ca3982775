"""Step records -> summary. Warm-up steps are kept in the records and never enter these statistics.

Rates are total tokens over total time (never a mean of per-step rates), as pyperf and MLPerf do. Every
headline figure carries its provenance (``summary.provenance``):

- ``measured``: tprimat's own timing of the steps (live runs);
- ``computed``: from stated facts (tokens per step, FLOPs per token, the device's peak) and step times;
- ``reported``: printed by the framework (median over the measured steps), used when tprimat cannot compute
  the figure itself;
- absent (null): neither.
"""

from __future__ import annotations

import math
import operator
import statistics
from itertools import repeat
from operator import methodcaller
from typing import Iterable, Optional

from tprimat.results.records import StepRecord

# Figures frameworks print per step (StepRecord.reported) -> summarised as their median over measured steps.
REPORTED = ("tokens_per_s_per_gpu", "tflops_per_gpu", "samples_per_s", "mfu_pct", "it_per_s", "tokens_per_s")


def step_time_stats(times: list[float]) -> dict:
    return {
        "mean": statistics.fmean(times),
        "median": statistics.median(times),
        "min": min(times),
        "max": max(times),
        "std": sample_std(times) if len(times) > 1 else 0.0,
    }


def sample_std(values: list[float]) -> float:
    """The sample standard deviation, two passes with exactly rounded sums over the differences from the first
    value (exact for close values: equal times give exactly 0): within rounding of ``statistics.stdev``, whose
    exact rationals cost about 1 us a value (a second on a 300k-step log)."""
    first = values[0]
    shifted = [v - first for v in values]
    mean = math.fsum(shifted) / len(shifted)
    return math.sqrt(math.fsum([(d - mean) ** 2 for d in shifted]) / (len(shifted) - 1))


def _mean_or_none(values: Iterable[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _max_or_none(values: Iterable[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def reported_medians(records: list[StepRecord]) -> dict:
    """Median of each figure the framework printed, over the non-warm-up steps that print it (a negative rate,
    which no throughput can be, is left out)."""
    printed = [r.reported for r in records if not r.warmup and r.reported]
    medians = {}
    for name in REPORTED:
        if any(map(operator.contains, printed, repeat(name))):
            values = [v for v in map(methodcaller("get", name), printed) if v is not None and v >= 0]  # a negative
            if values:  # rate is a timer artefact
                medians[name] = statistics.median(values)
    return medians


def summarize(records: list[StepRecord], world_size: Optional[int], flops_per_token: Optional[float],
              peak_tflops: Optional[float], timing: str = "measured") -> Optional[dict]:
    """Summary of the non-warm-up steps; None when no figure at all can be given.

    ``timing``: the provenance of the step times (``measured`` live, ``reported`` when printed by a framework).
    """
    kept = [r for r in records if not r.warmup]
    timed = [r for r in kept if r.step_time_s]
    measured = [r for r in timed if r.tokens]
    reported = reported_medians(records)
    if not timed and not reported:
        return None
    summary = {
        "measured_steps": len(timed) or len(kept),
        "warmup_steps": len(records) - len(kept),
        "repeats": len({r.repeat for r in records}),
        "step_time_s": step_time_stats([r.step_time_s for r in timed]) if timed else None,
        "peak_memory_gib": _max_or_none(r.peak_memory_gib for r in kept),
        "avg_memory_gib": _mean_or_none(r.memory_gib for r in kept),
        "loss_first": next((r.loss for r in records if r.loss is not None), None),
        "loss_final": kept[-1].loss if kept else None,
        "per_repeat": [per_repeat(measured, rep) for rep in sorted({r.repeat for r in measured})],
        "reported": reported,
    }
    summary.update(headline(measured, world_size, flops_per_token, peak_tflops, reported, timing))
    summary["provenance"]["step_time_s"] = step_time_source(timed, timing)
    return summary


def step_time_source(timed: list[StepRecord], timing: str) -> Optional[str]:
    if not timed:
        return None
    derived = any(r.reported and r.reported.get("step_time_s_from") for r in timed)
    return "computed" if derived else timing


def headline(measured: list[StepRecord], world: Optional[int], flops_per_token: Optional[float],
             peak_tflops: Optional[float], reported: dict, timing: str) -> dict:
    """tokens/s, tokens/s/device, TFLOP/s/device and MFU, each computed when the facts allow, else reported."""
    rate_source = "measured" if timing == "measured" else "computed"
    tokens_per_s = sum(r.tokens for r in measured) / sum(r.step_time_s for r in measured) if measured else None
    per_device = tokens_per_s / world if tokens_per_s and world else None
    source = {"tokens_per_s": rate_source if tokens_per_s else None,
              "tokens_per_s_per_device": rate_source if per_device else None}
    if per_device is None and reported.get("tokens_per_s_per_gpu"):
        per_device, source["tokens_per_s_per_device"] = reported["tokens_per_s_per_gpu"], "reported"
        if tokens_per_s is None and world:
            tokens_per_s, source["tokens_per_s"] = per_device * world, "reported"
    tflops = flops_per_token * per_device / 1e12 if flops_per_token and per_device else None
    source["tflops_per_device"] = "computed" if tflops is not None else None
    if tflops is None and reported.get("tflops_per_gpu") is not None:
        tflops, source["tflops_per_device"] = reported["tflops_per_gpu"], "reported"
    mfu = tflops / peak_tflops if tflops is not None and peak_tflops else None
    source["mfu"] = "computed" if mfu is not None else None
    if mfu is None and reported.get("mfu_pct") is not None:
        mfu, source["mfu"] = reported["mfu_pct"] / 100, "reported"
    return {"tokens_per_s": tokens_per_s, "tokens_per_s_per_device": per_device,
            "steps_per_s": len(measured) / sum(r.step_time_s for r in measured) if measured else None,
            "tflops_per_device": tflops, "mfu": mfu, "provenance": source}


def per_repeat(measured: list[StepRecord], repeat: int) -> dict:  # measured: steps with a time and tokens
    mine = [r for r in measured if r.repeat == repeat]
    total_s = sum(r.step_time_s for r in mine)
    return {"repeat": repeat, "measured_steps": len(mine),
            "step_time_s_median": statistics.median(r.step_time_s for r in mine),
            "tokens_per_s": sum(r.tokens for r in mine) / total_s}
