"""Significance verdicts against simulation with a known truth: two groups of repeats drawn with log-normal
run-to-run noise. Equal true rates must be called significant at most 5% of the time plus simulation error at
every repeat count (the bootstrap over 2 repeats called 30%); a true 10% speedup at 3% noise must be found at
5 repeats a side at least 80% of the time. The expected rates come from the simulation's own truth, not from the
code under test."""

import numpy as np
import pytest

from tprimat.compare import stats

TRIALS = 600
NOISE = 0.03


def verdict_rate(repeats: int, speedup: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(TRIALS):
        a = 1000 * np.exp(rng.normal(0, NOISE, repeats))
        b = 1000 * speedup * np.exp(rng.normal(0, NOISE, repeats))
        r = stats.welch_ratio(list(a), list(b))
        hits += stats.significant(r.lo, r.hi)
    return hits / TRIALS


@pytest.mark.slow  # a simulation battery: the full run
@pytest.mark.parametrize("repeats", [2, 3, 5, 10])
def test_equal_rates_are_called_significant_at_most_at_the_nominal_rate(repeats):
    # 600 trials: the binomial standard error at 5% is 0.9%; 0.075 is 2.8 of them above 0.05
    assert verdict_rate(repeats, 1.0, seed=repeats) <= 0.075


@pytest.mark.slow  # a simulation battery: the full run
def test_a_true_ten_percent_speedup_is_found_at_five_repeats():
    assert verdict_rate(5, 1.10, seed=7) >= 0.8


@pytest.mark.slow  # a simulation battery: the full run
def test_the_stated_detectable_speedup_and_repeats_needed_hold_in_simulation():
    """At the noise compare states, the repeats it says 3% needs find a true 3% speedup about 80% of the time,
    and fewer repeats than that find it less often."""
    needed = stats.repeats_needed(0.03, NOISE)
    assert needed is not None and 4 <= needed <= 20
    rng = np.random.default_rng(11)

    def power(n):
        found = 0
        for _ in range(400):
            a = np.exp(rng.normal(0, NOISE, n))
            b = 1.03 * np.exp(rng.normal(0, NOISE, n))
            r = stats.welch_ratio(list(a), list(b))
            found += stats.significant(r.lo, r.hi)
        return found / 400

    assert power(needed) >= 0.7
    assert power(max(2, needed // 2)) < power(needed)


def test_identical_repeats_give_an_exact_ratio():
    r = stats.welch_ratio([100.0, 100.0], [125.0, 125.0])
    assert (r.point, r.lo, r.hi) == pytest.approx((1.25, 1.25, 1.25)) and stats.significant(r.lo, r.hi)
