"""Step records -> summary. Warm-up steps are kept in the records and never enter these statistics.

Rates are total tokens over total time (never a mean of per-step rates), as pyperf and MLPerf do.
"""

from __future__ import annotations

import statistics
from typing import Iterable, Optional

from tprimat.results.records import StepRecord


def step_time_stats(times: list[float]) -> dict:
    return {
        "mean": statistics.fmean(times),
        "median": statistics.median(times),
        "min": min(times),
        "max": max(times),
        "std": statistics.stdev(times) if len(times) > 1 else 0.0,
    }


def _mean_or_none(values: Iterable[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _max_or_none(values: Iterable[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def summarize(records: list[StepRecord], world_size: int, flops_per_token: float,
              peak_tflops: Optional[float]) -> Optional[dict]:
    """Summary of the measured (non-warm-up) steps; None when no step was measured."""
    measured = [r for r in records if not r.warmup and r.step_time_s and r.tokens]
    if not measured:
        return None
    times = [r.step_time_s for r in measured]
    total_s = sum(times)
    tokens_per_s = sum(r.tokens for r in measured) / total_s
    per_device = tokens_per_s / world_size
    tflops = flops_per_token * per_device / 1e12
    losses = [r.loss for r in records if r.loss is not None]
    return {
        "measured_steps": len(measured),
        "warmup_steps": len(records) - len(measured),
        "repeats": len({r.repeat for r in records}),
        "step_time_s": step_time_stats(times),
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_device": per_device,
        "steps_per_s": len(measured) / total_s,
        "tflops_per_device": tflops,
        "mfu": tflops / peak_tflops if peak_tflops else None,
        "peak_memory_gib": _max_or_none(r.peak_memory_gib for r in measured),
        "avg_memory_gib": _mean_or_none(r.memory_gib for r in measured),
        "loss_first": losses[0] if losses else None,
        "loss_final": measured[-1].loss,
        "per_repeat": [per_repeat(measured, rep) for rep in sorted({r.repeat for r in measured})],
    }


def per_repeat(measured: list[StepRecord], repeat: int) -> dict:  # measured: steps with a time and tokens
    mine = [r for r in measured if r.repeat == repeat]
    total_s = sum(r.step_time_s for r in mine)
    return {"repeat": repeat, "measured_steps": len(mine),
            "step_time_s_median": statistics.median(r.step_time_s for r in mine),
            "tokens_per_s": sum(r.tokens for r in mine) / total_s}
