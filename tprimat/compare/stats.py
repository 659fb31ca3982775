"""Statistics for benchmark samples: robust centre and spread, correct rate averaging, bootstrap CIs.

Rates are never averaged arithmetically: a throughput over several steps is total tokens over total time
(equivalently the harmonic mean of per-step rates for equal work). Across repeats the aggregate is a
choice: median (default) or MLPerf's olympic mean (drop the fastest and slowest, average the rest).
"""

from __future__ import annotations

import statistics
from typing import Callable, Sequence

import numpy as np

AGGREGATES = ("median", "olympic", "mean")


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    q1, q3 = np.percentile(np.asarray(values, dtype=float), [25, 75])
    return float(q1), float(q3)


def olympic_mean(values: Sequence[float]) -> float:
    """MLPerf Training: drop the fastest and the slowest run, average the rest (plain mean below 3 runs)."""
    ordered = sorted(values)
    kept = ordered[1:-1] if len(ordered) >= 3 else ordered
    return statistics.fmean(kept)


def aggregate(values: Sequence[float], how: str) -> float:
    if how == "median":
        return statistics.median(values)
    if how == "olympic":
        return olympic_mean(values)
    if how == "mean":
        return statistics.fmean(values)
    raise ValueError(f"--aggregate {how}: must be one of {', '.join(AGGREGATES)}")


def throughput(tokens: np.ndarray, seconds: np.ndarray) -> float:
    return float(tokens.sum() / seconds.sum())


def bootstrap_ci(tokens: Sequence[float], seconds: Sequence[float], n_boot: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of total-tokens-over-total-time, resampling measured steps."""
    t, s = np.asarray(tokens, dtype=float), np.asarray(seconds, dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(t), size=(n_boot, len(t)))
    rates = t[idx].sum(axis=1) / s[idx].sum(axis=1)
    lo, hi = np.percentile(rates, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


def ratio_ci(a: tuple[Sequence[float], Sequence[float]], b: tuple[Sequence[float], Sequence[float]],
             n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """Speedup of B over A (rate_B / rate_A) with a bootstrap CI, each side's steps resampled independently."""
    rng = np.random.default_rng(seed)
    rates = []
    for tokens, seconds in (a, b):
        t, s = np.asarray(tokens, dtype=float), np.asarray(seconds, dtype=float)
        idx = rng.integers(0, len(t), size=(n_boot, len(t)))
        rates.append(t[idx].sum(axis=1) / s[idx].sum(axis=1))
    ratios = rates[1] / rates[0]
    point = throughput(np.asarray(b[0], float), np.asarray(b[1], float)) / throughput(
        np.asarray(a[0], float), np.asarray(a[1], float))
    lo, hi = np.percentile(ratios, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return point, float(lo), float(hi)


def significant(lo: float, hi: float) -> bool:
    """A speedup is significant when its interval excludes 1."""
    return not lo <= 1.0 <= hi


def drift(step_times: Sequence[float]) -> float:
    """Relative change of the median step time from the first to the second half of the measured window."""
    if len(step_times) < 4:
        return 0.0
    half = len(step_times) // 2
    first, second = statistics.median(step_times[:half]), statistics.median(step_times[half:])
    return (second - first) / first


def summarise_spread(values: Sequence[float], centre: Callable[[Sequence[float]], float] = statistics.median):
    q1, q3 = quartiles(values)
    return {"median": centre(values), "q1": q1, "q3": q3, "iqr": q3 - q1}
