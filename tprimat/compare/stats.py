"""Statistics for benchmark samples: robust centre and spread, correct rate averaging, intervals that are
about the estimator they accompany.

The unit of replication is the repeat (a fresh measurement). With two or more repeats a group's throughput is an
aggregate of its repeat rates (median by default; MLPerf's olympic mean; mean) and its interval is about that
aggregate: distribution-free order statistics for the median (coverage stated: with few repeats it is below
95%), a bootstrap over repeats otherwise. A speedup between two groups of repeats is Welch's t on log rates
(``welch_ratio``): its coverage holds at any repeat count, and it states the smallest speedup the repeats could
show at the observed noise and the repeats a side that 3% would need. With a single repeat the estimate is that
repeat's total tokens over total time and the interval is within-run: a moving-block bootstrap over its steps
(blocks keep the steps' autocorrelation); no significance verdict is drawn from it. Every interval contains its
estimate.

Rates are never averaged arithmetically within a run: a throughput over several steps is total tokens over
total time (equivalently the harmonic mean of per-step rates for equal work).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

AGGREGATES = ("median", "olympic", "mean")
LEVEL = 0.95
N_BOOT = 2000


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float
    kind: str  # "between repeats" | "within-run" | "none"
    coverage: Optional[float] = None  # achieved coverage where it differs from the nominal level

    @property
    def claims_significance(self) -> bool:
        return self.kind == "between repeats"


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


def contain(point: float, lo: float, hi: float) -> tuple[float, float]:
    """An interval widened, if ever needed, to contain its own estimate."""
    return min(lo, point), max(hi, point)


def median_ci(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """Distribution-free CI of the median from order statistics: (lo, hi, achieved coverage)."""
    x = sorted(values)
    n = len(x)
    best = (x[0], x[-1], 1 - 2 * 0.5 ** n)
    for k in range(1, n // 2 + 1):  # [x_(k), x_(n-k+1)] covers with 1 - 2 P(Binomial(n, 1/2) < k)
        tail = sum(math.comb(n, i) for i in range(k)) / 2 ** n
        if 1 - 2 * tail < level:
            break
        best = (x[k - 1], x[n - k], 1 - 2 * tail)
    return best


def repeats_ci(values: Sequence[float], how: str, seed: int = 0) -> Interval:
    point = aggregate(values, how)
    if how == "median":
        lo, hi, coverage = median_ci(values)
        return Interval(lo, hi, "between repeats", coverage)
    rng = np.random.default_rng(seed)
    v = np.asarray(values, dtype=float)
    boots = [aggregate(list(v[rng.integers(0, len(v), len(v))]), how) for _ in range(N_BOOT)]
    lo, hi = np.percentile(boots, [(1 - LEVEL) / 2 * 100, (1 + LEVEL) / 2 * 100])
    return Interval(*contain(point, float(lo), float(hi)), "between repeats")


def resampled_sums(columns: Sequence[np.ndarray], rng: np.random.Generator, n_boot: int) -> list[np.ndarray]:
    """Moving-block bootstrap (block length about n^(1/3)): n_boot resamples of n steps, each ceil(n / block)
    blocks at random starts cut to n steps; per column, its sum over each resample. Block sums come from one
    cumulative sum, so memory is n_boot x n / block starts, not n_boot x n indices (2000 x 300k steps: 4.8 GB)."""
    n = len(columns[0])
    if n == 0:
        return [np.zeros(n_boot) for _ in columns]
    block = max(1, round(n ** (1 / 3)))
    count = math.ceil(n / block)
    starts = rng.integers(0, n - block + 1, size=(n_boot, count))
    whole, last = starts[:, :-1], starts[:, -1]  # the last block keeps the steps that fill n
    kept = n - (count - 1) * block
    sums = []
    for x in columns:
        cumulative = np.concatenate(([0.0], np.cumsum(x)))
        sums.append((cumulative[whole + block] - cumulative[whole]).sum(axis=1)
                    + cumulative[last + kept] - cumulative[last])
    return sums


def within_run_ci(tokens: Sequence[float], seconds: Sequence[float], seed: int = 0) -> Interval:
    t, s = np.asarray(tokens, dtype=float), np.asarray(seconds, dtype=float)
    point = float(t.sum() / s.sum())
    resampled_tokens, resampled_s = resampled_sums((t, s), np.random.default_rng(seed), N_BOOT)
    rates = resampled_tokens / resampled_s
    lo, hi = np.percentile(rates, [(1 - LEVEL) / 2 * 100, (1 + LEVEL) / 2 * 100])
    return Interval(*contain(point, float(lo), float(hi)), "within-run")


def bootstrap_ci(tokens: Sequence[float], seconds: Sequence[float], n_boot: int = N_BOOT, level: float = LEVEL,
                 seed: int = 0) -> tuple[float, float]:
    """Block-bootstrap CI of total tokens over total time (kept for callers that want a plain pair)."""
    interval = within_run_ci(tokens, seconds, seed)
    return interval.lo, interval.hi


def ratio_ci(a: tuple[Sequence[float], Sequence[float]], b: tuple[Sequence[float], Sequence[float]],
             n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0) -> tuple[float, float, float]:
    """Speedup of B over A (rate_B / rate_A), within-run: each side's steps block-resampled independently."""
    rng = np.random.default_rng(seed)
    rates = []
    for tokens, seconds in (a, b):
        t, s = np.asarray(tokens, dtype=float), np.asarray(seconds, dtype=float)
        resampled_tokens, resampled_s = resampled_sums((t, s), rng, n_boot)
        rates.append((resampled_tokens / resampled_s, t.sum() / s.sum()))
    point = float(rates[1][1] / rates[0][1])
    lo, hi = np.percentile(rates[1][0] / rates[0][0], [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return (point, *contain(point, float(lo), float(hi)))


WELCH = "Welch's t on log rates"
POWER = 0.8  # the power "detectable" and "repeats needed" refer to
EFFECT_TO_PLAN = 0.03  # the speedup compare states the repeats for ("to detect 3% at this noise")


@dataclass(frozen=True)
class RepeatsRatio:
    """Speedup of B over A from repeat rates: the ratio of geometric means, Welch's t interval on log rates (its
    coverage holds at any repeat count for log-normal run-to-run noise: few repeats give a wide interval, never
    an overconfident one), and what this many repeats can show at the observed noise."""

    point: float
    lo: float
    hi: float
    df: float
    noise: float  # run-to-run standard deviation of log rates, pooled over both sides (~ relative noise)
    detectable: Optional[float]  # the smallest speedup these repeat counts detect with POWER at this noise
    repeats_needed: Optional[int]  # repeats a side to detect EFFECT_TO_PLAN with POWER at this noise
    method: str = WELCH


def welch_ratio(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> RepeatsRatio:
    from scipy import stats as sps

    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    diff = float(lb.mean() - la.mean())
    va, vb = float(la.var(ddof=1)), float(lb.var(ddof=1))
    noise = math.sqrt((va + vb) / 2)
    if va == 0 and vb == 0:  # identical repeats on both sides: the difference is exact
        return RepeatsRatio(math.exp(diff), math.exp(diff), math.exp(diff), math.inf, 0.0, 1.0, 2)
    test = sps.ttest_ind(lb, la, equal_var=False)
    interval = test.confidence_interval(confidence_level=level)
    return RepeatsRatio(math.exp(diff), math.exp(float(interval.low)), math.exp(float(interval.high)),
                        float(test.df), noise, detectable_ratio(noise, len(a), len(b), level),
                        repeats_needed(EFFECT_TO_PLAN, noise, level))


def detectable_ratio(noise: float, n_a: int, n_b: int, level: float = LEVEL, power: float = POWER) -> float:
    """The smallest speedup a two-sided test at ``level`` detects with ``power`` (normal approximation with t
    quantiles at n_a + n_b - 2 degrees of freedom) for a run-to-run noise ``noise`` (sd of log rates)."""
    from scipy import stats as sps

    df = max(1, n_a + n_b - 2)
    shift = (sps.t.ppf(1 - (1 - level) / 2, df) + sps.t.ppf(power, df)) * noise * math.sqrt(1 / n_a + 1 / n_b)
    return math.exp(float(shift))


def repeats_needed(effect: float, noise: float, level: float = LEVEL, power: float = POWER,
                   most: int = 10_000) -> Optional[int]:
    """Repeats a side for ``detectable_ratio`` to reach 1 + ``effect``; None past ``most``."""
    n = 2
    while n <= most:
        if detectable_ratio(noise, n, n, level, power) <= 1 + effect:
            return n
        n = n + 1 if n < 64 else int(n * 1.25)
    return None


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
    if not values:
        return {"median": None, "q1": None, "q3": None, "iqr": None}
    q1, q3 = quartiles(values)
    return {"median": centre(values), "q1": q1, "q3": q3, "iqr": q3 - q1}
