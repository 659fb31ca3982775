"""Golden-value regression gate for CI (``tprimat gate``), as the trusted gates of the field hold a run: Megatron-
Bridge's golden values (loss-curve Pearson correlation >= 0.95 over the common steps; per-step loss within tiered
tolerances, 0.10 where the golden loss is above 2, 0.05 from 0.5 to 2, 0.02 below 0.5, at most 10% of steps
outside; final loss within 5%; step time within 5% past the first part of the run) and Megatron-LM's functional
tests (memory within 5%).

Golden values are written per workload (the spec's identity: model, sequence, batch, layout, precision, framework,
platform; never a printed label) from results: the loss curve of the first repeat, the step time and tokens of
every measured step past the first 25% (the steady part), the repeats' rates, tokens/s per device, peak memory and
the label. Throughput is judged as the evidence allows: with one repeat on either side the slowdown of the median
steady step time is held to the tolerance and no significance verdict is possible (one run's steps are not
independent samples of the run, docs/compare.md); with two or more repeats a side it fails only when the slowdown
exceeds the tolerance and Welch's t on log rates says it is real (the interval excludes no change).

The gate fails what it cannot vouch for (``unvouched``): a golden workload with no current result, a current one
with no golden values, a result compare skipped (not ok, non-finite values, not a valid result), a step whose loss
is missing or non-finite where the golden run has one, a memory figure missing where the golden run has one.
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
from tprimat.compare.groups import Group, flat
from tprimat.spec.build import IDENTITY_EXCLUDES

GOLDEN_FILE = "golden.json"
GOLDEN_VERSION = 2  # 2: groups keyed by spec identity (1: by label, which two workloads can share)
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


def loss_curves(group: Group) -> list[tuple[str, dict[int, Optional[float]]]]:
    """Every run's every repeat: (its name, step -> loss, None where the loss is missing or not finite), the first
    repeat of the first run first (warm-up included: a curve is the whole run)."""
    curves = []
    for run in group.runs:
        by_repeat: dict[int, dict] = {}
        for s in run.result["steps"]:
            loss = s.get("loss")
            finite = isinstance(loss, (int, float)) and not isinstance(loss, bool) and math.isfinite(loss)
            by_repeat.setdefault(s.get("repeat", 0), {})[int(s["step"])] = float(loss) if finite else None
        curves += [(f"{run.path.parent.name} repeat {r}", curve) for r, curve in sorted(by_repeat.items())]
    return curves


def loss_curve(group: Group) -> dict[int, float]:
    """Step -> loss of the first repeat of the first run, its finite losses: what golden values keep and the loss
    check compares."""
    curves = loss_curves(group)
    return {k: v for k, v in curves[0][1].items() if v is not None} if curves else {}


def lost_losses(group: Group, gold: dict[int, float]) -> Optional[str]:
    """The first run and repeat whose loss is missing or not finite at a step where the golden run has one."""
    for name, curve in loss_curves(group) or [("the current result", {})]:
        lost = sorted(step for step in gold if curve.get(step) is None)
        if lost:
            return (f"loss: missing or non-finite at {len(lost)} of the golden run's {len(gold)} steps in {name} "
                    f"(first: step {lost[0]}, golden {gold[lost[0]]:.4f})")
    return None


def peak_memory(group: Group) -> Optional[float]:
    peaks = [s.get("peak_memory_gib") for run in group.runs for s in run.result["steps"] if s.get("peak_memory_gib")]
    return max(peaks) if peaks else None


def identifying(spec: dict) -> dict:
    """The spec as its identity reads it (``tprimat.spec.build.IDENTITY_EXCLUDES`` left out)."""
    return {k: v for k, v in spec.items() if k not in IDENTITY_EXCLUDES}


def golden_of(group: Group) -> dict:
    tokens, seconds = steady(group)
    return {"spec_identity": group.identity, "spec": identifying(group.spec),
            "loss": {str(k): v for k, v in sorted(loss_curve(group).items())},
            "steady_tokens": tokens, "steady_seconds": seconds,
            "step_time_s": statistics.median(seconds) if seconds else None,
            "repeat_rates": [r.rate for r in group.repeats],
            "tokens_per_s_per_device": group.metrics.get("tokens_per_s_per_device"),
            "peak_memory_gib": peak_memory(group), "runs": [str(run.path) for run in group.runs]}


def write_golden(groups: list[Group], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / GOLDEN_FILE
    path.write_text(json.dumps({"version": GOLDEN_VERSION, "groups": {g.identity: {"label": g.label, **golden_of(g)}
                                                                      for g in groups}}, indent=1) + "\n")
    return path


def read_golden(directory: Path) -> dict:
    path = directory / GOLDEN_FILE
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise GoldenError(f"--golden {directory}: cannot read {GOLDEN_FILE}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise GoldenError(f"--golden {directory}: {GOLDEN_FILE} is not JSON: {exc}") from None
    if isinstance(data, dict) and data.get("version") == 1:
        raise GoldenError(f"--golden {directory}: {GOLDEN_FILE} is version 1, keyed by printed labels that two "
                          "workloads can share; write it again with --write-golden")
    if not isinstance(data, dict) or data.get("version") != GOLDEN_VERSION or not isinstance(data.get("groups"), dict):
        raise GoldenError(f"--golden {directory}: {GOLDEN_FILE} is not tprimat golden values version {GOLDEN_VERSION}")
    return data["groups"]


def check_throughput(group: Group, golden: dict, tolerance: float) -> Check:
    tokens, seconds = steady(group)
    if not seconds or not golden.get("steady_seconds"):
        return Check("throughput", False, "throughput: no timed steps to compare (current or golden)")
    current_rates, golden_rates = [r.rate for r in group.repeats], golden.get("repeat_rates") or []
    median_now, median_then = statistics.median(seconds), golden["step_time_s"]
    slowdown = median_now / median_then - 1
    text = (f"throughput: median step {median_now:.4g} s vs golden {median_then:.4g} s past the first "
            f"{STEADY_FROM:.0%} ({slowdown:+.1%}; tolerance {tolerance:.0%} slower)")
    if len(current_rates) < 2 or len(golden_rates) < 2:
        text += (f"; no significance verdict: {len(golden_rates)} golden and {len(current_rates)} current "
                 "repeat(s), two a side needed")
        ok = slowdown <= tolerance
        return Check("throughput", ok, text + ("" if ok else f": {slowdown:.1%} slower, beyond the tolerance"))
    r = stats.welch_ratio(golden_rates, current_rates)
    if not all(map(math.isfinite, (r.point, r.lo, r.hi))):
        ok = slowdown <= tolerance
        return Check("throughput", ok, text + "; no significance verdict: the interval is not finite"
                     + ("" if ok else f": {slowdown:.1%} slower, beyond the tolerance"))
    text += (f"; rate {r.point:.3f}x golden, 95% CI {r.lo:.3f}-{r.hi:.3f} ({r.method}, {len(golden_rates)} and "
             f"{len(current_rates)} repeats)")
    real = r.hi < 1.0
    ok = not (slowdown > tolerance and real)
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
    lost = lost_losses(group, gold)
    if lost:
        return Check("loss", False, lost)
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
    if current is None and gold:
        return Check("memory", False, f"memory: no peak recorded where the golden run has {gold:.3f} GiB")
    if not gold:
        return Check("memory", True, "memory: the golden run recorded no peak: not checked")
    ratio = current / gold
    ok = ratio <= 1 + tolerance
    text = f"memory: peak {current:.3f} GiB is {ratio:.3f}x golden {gold:.3f} GiB (tolerance {tolerance:.0%} more)"
    return Check("memory", ok, text)


def judge(groups: list[Group], golden: dict, time_tolerance: float, memory_tolerance: float,
          min_correlation: float) -> list[Verdict]:
    """One verdict per current workload and one per golden workload with no current result."""
    verdicts = []
    for group in groups:
        gold = golden.get(group.identity)
        if gold is None:
            verdicts.append(Verdict(group.label, [Check("golden", False, f"golden: none for this workload (spec "
                                                        f"{group.identity}); the golden values hold "
                                                        f"{len(golden)} other workload(s)")]))
            continue
        verdicts.append(Verdict(group.label, [check_throughput(group, gold, time_tolerance),
                                              check_loss(group, gold, min_correlation),
                                              check_memory(group, gold, memory_tolerance)]))
    missing = missing_verdicts(golden, {g.identity for g in groups})
    told_apart([(v, identifying(g.spec)) for v, g in zip(verdicts, groups) if g.identity not in golden] + missing)
    return verdicts + [v for v, _ in missing]


def missing_verdicts(golden: dict, current: set) -> list[tuple[Verdict, dict]]:
    """A failed verdict for each golden workload with no current result, beside the spec it stored."""
    return [(Verdict(gold.get("label", identity), [Check(
        "missing", False, f"missing: no current result for this golden workload (spec {identity})")]),
             gold.get("spec") or {}) for identity, gold in sorted(golden.items()) if identity not in current]


def told_apart(named: list[tuple[Verdict, dict]], shown: int = 4) -> None:
    """A current workload with no golden values and a golden one with no current run that print one label: each
    label gets the spec keys whose values tell them apart (``training.seq_length=64``)."""
    by_label: dict[str, list] = {}
    for verdict, spec in named:
        by_label.setdefault(verdict.label, []).append((verdict, flat(spec)))
    for same in (v for v in by_label.values() if len(v) > 1):
        keys = sorted({k for _, f in same for k in f if len({json.dumps(g.get(k), sort_keys=True) for _, g in same}) > 1})
        for verdict, f in same:
            verdict.label += " | " + (", ".join(f"{k}={f.get(k)}" for k in keys[:shown]) or "spec not stored")
