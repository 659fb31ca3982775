"""Golden-value regression gate for CI (``tprimat gate``), as the trusted gates of the field hold a run: Megatron-
Bridge's golden values (loss-curve Pearson correlation >= 0.95 over the common steps; per-step loss within tiered
tolerances, 0.10 where the golden loss is above 2, 0.05 from 0.5 to 2, 0.02 below 0.5, at most 10% of steps
outside; final loss within 5%; step time within 5% past the first part of the run) and Megatron-LM's functional
tests (memory within 5%).

Golden values are written per compare group (its label) from results: the loss curve of the first repeat, the
step time and tokens of every measured step past the first 25% (the steady part), the repeats' rates, tokens/s per
device, peak memory and the spec identity. A throughput check fails only when the slowdown exceeds the tolerance
and the evidence says it is real: Welch's t on log rates with two or more repeats a side, else the within-run
moving-block bootstrap over the steady steps; the interval must exclude no change.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from tprimat.compare import stats
from tprimat.compare.groups import Group

GOLDEN_FILE = "golden.json"
GOLDEN_VERSION = 1
STEADY_FROM = 0.25  # step time counts past the first 25% of a group's measured steps
LOSS_TIERS = ((2.0, 0.10), (0.5, 0.05), (-math.inf, 0.02))  # golden loss above -> absolute tolerance
LOSS_OUTLIERS = 0.10  # at most this share of the common steps outside its tier
FINAL_LOSS = 0.05


class GoldenError(ValueError):
    """Bad input: golden values missing or unreadable, or a group without golden values (exit 2)."""


@dataclass
class Check:
    name: str  # throughput | loss | memory
    ok: bool
    text: str


@dataclass
class Verdict:
    label: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def steady(group: Group) -> tuple[list[float], list[float]]:
    """Tokens per device and seconds of the group's measured steps past the first ``STEADY_FROM`` of them."""
    world = group.world_size or 1
    steps = [s for s in group.measured()]
    kept = steps[int(len(steps) * STEADY_FROM):]
    return [s["tokens"] / world for s in kept], [s["step_time_s"] for s in kept]


def loss_curve(group: Group) -> dict[int, float]:
    """Step -> loss of the first repeat of the first run (warm-up included: the curve is the whole run)."""
    first = group.runs[0].result["steps"]
    repeat = min((s.get("repeat", 0) for s in first), default=0)
    return {int(s["step"]): float(s["loss"]) for s in first
            if s.get("repeat", 0) == repeat and s.get("loss") is not None and math.isfinite(s["loss"])}


def peak_memory(group: Group) -> Optional[float]:
    peaks = [s.get("peak_memory_gib") for run in group.runs for s in run.result["steps"] if s.get("peak_memory_gib")]
    return max(peaks) if peaks else None


def golden_of(group: Group) -> dict:
    tokens, seconds = steady(group)
    return {"spec_identity": group.identity, "loss": {str(k): v for k, v in sorted(loss_curve(group).items())},
            "steady_tokens": tokens, "steady_seconds": seconds,
            "step_time_s": statistics.median(seconds) if seconds else None,
            "repeat_rates": [r.rate for r in group.repeats],
            "tokens_per_s_per_device": group.metrics.get("tokens_per_s_per_device"),
            "peak_memory_gib": peak_memory(group), "runs": [str(run.path) for run in group.runs]}


def write_golden(groups: list[Group], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / GOLDEN_FILE
    path.write_text(json.dumps({"version": GOLDEN_VERSION, "groups": {g.label: golden_of(g) for g in groups}},
                               indent=1) + "\n")
    return path


def read_golden(directory: Path) -> dict:
    path = directory / GOLDEN_FILE
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise GoldenError(f"--golden {directory}: cannot read {GOLDEN_FILE}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise GoldenError(f"--golden {directory}: {GOLDEN_FILE} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != GOLDEN_VERSION or not isinstance(data.get("groups"), dict):
        raise GoldenError(f"--golden {directory}: {GOLDEN_FILE} is not tprimat golden values version {GOLDEN_VERSION}")
    return data["groups"]


def check_throughput(group: Group, golden: dict, tolerance: float) -> Check:
    tokens, seconds = steady(group)
    if not seconds or not golden.get("steady_seconds"):
        return Check("throughput", False, "throughput: no timed steps to compare (current or golden)")
    current_rates, golden_rates = [r.rate for r in group.repeats], golden.get("repeat_rates") or []
    if len(current_rates) >= 2 and len(golden_rates) >= 2:
        r = stats.welch_ratio(golden_rates, current_rates)
        ratio, lo, hi, how = r.point, r.lo, r.hi, f"{r.method}, {len(golden_rates)} and {len(current_rates)} repeats"
    else:
        ratio, lo, hi = stats.ratio_ci((golden["steady_tokens"], golden["steady_seconds"]), (tokens, seconds))
        how = f"within-run bootstrap over {len(golden['steady_seconds'])} and {len(seconds)} steady steps"
    slowdown = 1 / ratio - 1
    real = hi < 1.0
    ok = not (slowdown > tolerance and real)
    text = (f"throughput: {ratio:.3f}x golden (step time {statistics.median(seconds):.4g} s vs "
            f"{golden['step_time_s']:.4g} s past the first {STEADY_FROM:.0%}; 95% CI {lo:.3f}-{hi:.3f}, {how}; "
            f"tolerance {tolerance:.0%} slower)")
    if not ok:
        text += f": {slowdown:.1%} slower, beyond the tolerance and outside the noise"
    elif slowdown > tolerance:
        text += ": slower than the tolerance, but within the noise (no verdict of regression)"
    return Check("throughput", ok, text)


def tolerance_of(golden_loss: float) -> float:
    return next(tol for floor, tol in LOSS_TIERS if golden_loss > floor)


def check_loss(group: Group, golden: dict, min_correlation: float) -> Check:
    gold = {int(k): v for k, v in golden.get("loss", {}).items()}
    current = loss_curve(group)
    common = sorted(set(gold) & set(current))
    if len(common) < 2:
        return Check("loss", False, f"loss: {len(common)} steps in common with the golden curve (need 2 or more)")
    g, c = np.array([gold[s] for s in common]), np.array([current[s] for s in common])
    problems = []
    if np.std(g) > 0 and np.std(c) > 0:
        correlation = float(np.corrcoef(g, c)[0, 1])
        if correlation < min_correlation:
            problems.append(f"correlation {correlation:.3f} < {min_correlation} over {len(common)} common steps")
    else:
        correlation = 1.0 if np.array_equal(g, c) else 0.0
    outside = [s for s in common if abs(current[s] - gold[s]) > tolerance_of(gold[s])]
    if len(outside) > LOSS_OUTLIERS * len(common):
        s = outside[0]
        problems.append(f"{len(outside)} of {len(common)} steps outside the tiered tolerance (first: step {s}, "
                        f"{current[s]:.4f} vs {gold[s]:.4f}, tolerance {tolerance_of(gold[s])})")
    last = common[-1]
    final = current[last] / gold[last] - 1
    if abs(final) > FINAL_LOSS:
        problems.append(f"final loss (step {last}) {current[last]:.4f} vs {gold[last]:.4f} ({final:+.1%}, "
                        f"tolerance {FINAL_LOSS:.0%})")
    if problems:
        return Check("loss", False, "loss: " + "; ".join(problems))
    return Check("loss", True, f"loss: correlation {correlation:.4f} over {len(common)} common steps, final "
                               f"{final:+.2%}")


def check_memory(group: Group, golden: dict, tolerance: float) -> Check:
    current, gold = peak_memory(group), golden.get("peak_memory_gib")
    if current is None or not gold:
        return Check("memory", True, "memory: not recorded (current or golden): not checked")
    ratio = current / gold
    ok = ratio <= 1 + tolerance
    text = f"memory: peak {current:.3f} GiB is {ratio:.3f}x golden {gold:.3f} GiB (tolerance {tolerance:.0%} more)"
    return Check("memory", ok, text)


def judge(groups: list[Group], golden: dict, time_tolerance: float, memory_tolerance: float,
          min_correlation: float) -> list[Verdict]:
    """One verdict per current group; a group without golden values is bad input (``GoldenError``)."""
    verdicts = []
    for group in groups:
        gold = golden.get(group.label)
        if gold is None:
            raise GoldenError(f"no golden values for {group.label} (golden groups: {', '.join(sorted(golden)) or 'none'})")
        verdict = Verdict(group.label, [check_throughput(group, gold, time_tolerance),
                                        check_loss(group, gold, min_correlation),
                                        check_memory(group, gold, memory_tolerance)])
        if gold.get("spec_identity") != group.identity:
            verdict.notes.append("the spec differs from the golden run's (same group label, another spec identity)")
        verdicts.append(verdict)
    return verdicts
