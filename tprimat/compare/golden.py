"""Golden-value regression gate for CI (``tprimat gate``), as the trusted gates of the field hold a run: Megatron-
Bridge's golden values (loss-curve Pearson correlation >= 0.95 over the common steps; per-step loss within tiered
tolerances, 0.10 where the golden loss is above 2, 0.05 from 0.5 to 2, 0.02 below 0.5, at most 10% of steps
outside; final loss within 5%; step time within 5% past the first part of the run) and Megatron-LM's functional
tests (memory within 5%).

Golden values are written per workload (the spec's identity: model, sequence, batch, layout, precision, framework,
platform; never a printed label) from results: the loss curve of the first repeat, the step time and tokens of
every measured step past the first 25% (the steady part), the repeats' rates, tokens/s per device, peak memory and
the label. Throughput is held to the tolerance as a hard bound on two figures, the median steady step time and
tokens/s per device (the result's own tokens, world size and step times): worse than the golden by more than the
tolerance fails, whatever Welch's interval on the repeats' log rates says (printed where there are two repeats a
side: within the tolerance, a change it calls real is reported, never failed).

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
from tprimat.measure.contention import shared
from tprimat.results.readfile import UnreadableFile, read_json
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
            "peak_memory_gib": peak_memory(group), "runs": [str(run.path) for run in group.runs],
            "shared": [[run.path.parent.name, why] for run in group.runs if (why := shared(run.result.get("contention")))]}


def write_golden(groups: list[Group], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / GOLDEN_FILE
    path.write_text(json.dumps({"version": GOLDEN_VERSION, "groups": {g.identity: {"label": g.label, **golden_of(g)}
                                                                      for g in groups}}, indent=1) + "\n")
    return path


def read_golden(directory: Path) -> dict:
    path = directory / GOLDEN_FILE
    if not path.exists():
        raise GoldenError(f"--golden {directory}: cannot read {GOLDEN_FILE}: No such file or directory")
    try:
        data = read_json(path)
    except UnreadableFile as exc:
        raise GoldenError(f"--golden {directory}: {GOLDEN_FILE}: {exc}") from None
    if isinstance(data, dict) and data.get("version") == 1:
        raise GoldenError(f"--golden {directory}: {GOLDEN_FILE} is version 1, keyed by printed labels that two "
                          "workloads can share; write it again with --write-golden")
    if not isinstance(data, dict) or data.get("version") != GOLDEN_VERSION or not isinstance(data.get("groups"), dict):
        raise GoldenError(f"--golden {directory}: {GOLDEN_FILE} is not tprimat golden values version {GOLDEN_VERSION}")
    return data["groups"]


def rate_per_device(tokens: list[float], seconds: list[float]) -> Optional[float]:
    """The median of the steady steps' tokens/s per device (each step's tokens per device over its seconds)."""
    rates = [t / s for t, s in zip(tokens, seconds) if s > 0]
    return statistics.median(rates) if rates else None


def check_throughput(group: Group, golden: dict, tolerance: float) -> Check:
    """The tolerance is a hard bound on both figures: a median steady step slower than the golden's by more than
    it, or tokens/s per device (the result's own tokens, world size and step times) lower by more than it, fails
    whatever the interval says. Within it, a change the interval calls real is reported, never failed."""
    tokens, seconds = steady(group)
    then_tokens, then_seconds = golden.get("steady_tokens") or [], golden.get("steady_seconds") or []
    rate_now, rate_then = rate_per_device(tokens, seconds), rate_per_device(then_tokens, then_seconds)
    if not seconds or not then_seconds or not rate_now or not rate_then:
        return Check("throughput", False, "throughput: no timed steps to compare (current or golden)")
    slower = statistics.median(seconds) / golden["step_time_s"]
    rate = rate_now / rate_then
    text = (f"throughput: median step {slower:.4g}x golden ({statistics.median(seconds):.4g} s vs "
            f"{golden['step_time_s']:.4g} s), tokens/s per device {rate:.4g}x golden ({rate_now:.4g} vs "
            f"{rate_then:.4g}), past the first {STEADY_FROM:.0%}; tolerance {tolerance:.0%}")
    interval = repeat_interval(group, golden)
    text += f"; {interval[1]}"
    if slower > 1 + tolerance or rate < 1 - tolerance:
        worse = [what for what, bad in (("step time", slower > 1 + tolerance),
                                        ("tokens/s per device", rate < 1 - tolerance)) if bad]
        beside = [f"{where}: {why}" for where, why in shared_runs(group, golden)]
        return Check("throughput", False, text + f"; rule: hard bound: {' and '.join(worse)} beyond the tolerance"
                     + (f"; measured beside other work: {'; '.join(beside)}" if beside else ""))
    if interval[0] is not None and (interval[0].hi < 1.0 or interval[0].lo > 1.0):
        return Check("throughput", True, text + "; rule: within the tolerance (the interval calls the change real: "
                                               "reported, not failed)")
    return Check("throughput", True, text + "; rule: within the tolerance")


def shared_runs(group: Group, golden: dict) -> list[tuple[str, str]]:
    """The runs of the group, and of the golden values, measured beside other work (``contention``)."""
    now = [(f"{run.path.parent.name}", why) for run in group.runs if (why := shared(run.result.get("contention")))]
    return now + [(f"golden {where}", why) for where, why in golden.get("shared") or []]


def repeat_interval(group: Group, golden: dict) -> tuple[Optional[stats.RepeatsRatio], str]:
    """Welch's interval on the repeats' rates where there are two or more a side, and how it reads."""
    current_rates, golden_rates = [r.rate for r in group.repeats], golden.get("repeat_rates") or []
    if len(current_rates) < 2 or len(golden_rates) < 2:
        return None, (f"no interval: {len(golden_rates)} golden and {len(current_rates)} current repeat(s), two a "
                      "side needed")
    r = stats.welch_ratio(golden_rates, current_rates)
    if not all(map(math.isfinite, (r.point, r.lo, r.hi))):
        return None, "no interval: not finite"
    return r, (f"repeats' rate {r.point:.3f}x golden, 95% CI {r.lo:.3f}-{r.hi:.3f} ({r.method}, "
               f"{len(golden_rates)} and {len(current_rates)} repeats)")


def tolerance_of(golden_loss: float) -> float:
    return next(tol for floor, tol in LOSS_TIERS if golden_loss > floor)


def curve_problems(gold: dict[int, float], current: dict[int, float], min_correlation: float) -> tuple[list[str], str]:
    """What is wrong with one loss curve against the golden one (correlation, tiered tolerance, final loss), and
    how it compares where nothing is."""
    common = sorted(set(gold) & set(current))
    if len(common) < 2:
        return [f"{len(common)} steps in common with the golden curve (need 2 or more)"], ""
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
    return problems, f"correlation {correlation:.4f} over {len(common)} common steps, final {final:+.2%}"


def check_loss(group: Group, golden: dict, min_correlation: float) -> Check:
    """Every repeat of every run of the group against the golden curve (its steps, its tolerances)."""
    gold = {int(k): v for k, v in golden.get("loss", {}).items()}
    lost = lost_losses(group, gold)
    if lost:
        return Check("loss", False, lost)
    curves = loss_curves(group)
    if not curves:
        return Check("loss", False, "loss: no loss curve in the current result")
    worst = None
    for name, curve in curves:
        problems, said = curve_problems(gold, {k: v for k, v in curve.items() if v is not None}, min_correlation)
        if problems:
            return Check("loss", False, f"loss: {name}: " + "; ".join(problems)
                         + (f" ({len(curves)} curves compared)" if len(curves) > 1 else ""))
        worst = worst or said
    return Check("loss", True, f"loss: {len(curves)} curve(s) (every repeat of every run) within the golden's "
                               f"tolerances; the first: {worst}")


def check_memory(group: Group, golden: dict, tolerance: float, allow_missing: bool = False) -> Check:
    """The group's peak against the golden's: a figure on one side only cannot be judged, a failure unless
    ``--allow-missing memory`` was given (then said, and passed)."""
    current, gold = peak_memory(group), golden.get("peak_memory_gib")
    if current is None and not gold:
        return Check("memory", True, "memory: no peak recorded, here or in the golden run: not checked")
    if current is None or not gold:
        where = (f"no peak recorded where the golden run has {gold:.3f} GiB" if current is None else
                 f"the golden run recorded no peak: {current:.3f} GiB now cannot be judged")
        return Check("memory", allow_missing, f"memory: {where}"
                     + ("; allowed by --allow-missing memory" if allow_missing else
                        " (--allow-missing memory accepts that)"))
    ratio = current / gold
    ok = ratio <= 1 + tolerance
    text = f"memory: peak {current:.3f} GiB is {ratio:.3f}x golden {gold:.3f} GiB (tolerance {tolerance:.0%} more)"
    return Check("memory", ok, text)


def judge(groups: list[Group], golden: dict, time_tolerance: float, memory_tolerance: float,
          min_correlation: float, allow_missing: tuple[str, ...] = ()) -> list[Verdict]:
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
                                              check_memory(group, gold, memory_tolerance,
                                                           "memory" in allow_missing)]))
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
