"""Speedups between any two groups that differ in exactly one axis (platform, device, framework, precision (with
the fp8 recipe), layout, model, methodology, compile (eager or the compile mode), recompute; ``--by AXIS`` keeps
one axis), each a per-device throughput ratio with an interval about that ratio:

- both sides with two or more repeats: a bootstrap over repeats; a significance verdict is drawn;
- otherwise, when both sides have measured steps: within-run (block bootstrap over steps), labelled so, and
  no significance verdict;
- figures printed by a framework only (ingested logs): the ratio of the reported figures, no interval.

An axis that a side does not state (``?``: an ingested log that never names it) is not evidence that the two
are the same: a pair where either side leaves the model or the device unstated is refused (a per-device rate
means nothing without both), and any other axis (or batch size, micro-batch size, sequence length) unstated on a
side is named in ``unverified`` beside the ratio.

identical_config comparisons are refused when the two sides did not run the same settings (their specs
differ beyond the platform, or a fairness audit failed): such a ratio would measure the settings, not the
hardware or the software.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Optional

from tprimat.compare import stats
from tprimat.compare.groups import Group, flat

SAME_UNDER_IDENTICAL = ("model", "training", "parallelism")
AXES = ("platform", "device", "framework", "precision", "layout", "model", "methodology", "compile", "recompute")
BY_ALIASES = {"platform.gpu": "device", "platform.name": "platform", "framework.name": "framework",
              "training.precision": "precision", "model.name": "model"}  # --by as the config keys name the axes
TUNED_WITH_PLATFORM = {"platform", "device", "layout", "precision", "compile", "recompute"}
TUNED_WITH_FRAMEWORK = {"framework", "layout", "recompute"}  # maximum_performance: a framework's sharding (same mesh), recompute
# training keys that no axis covers and that change what a step computes: a pair whose groups state different
# values is refused (max_steps and seed change neither the work per step nor its speed)
WORKLOAD = ("global_batch_size", "micro_batch_size", "seq_length", "optimizer")
RATE_OF = ("model", "device")  # what a per-device throughput is a rate of: unstated on a side, no ratio
HOW_TO_STATE = {"model": "--model", "device": "--gpu or --system"}  # tprimat ingest's flags that state them


@dataclass
class Speedup:
    kind: str  # the axis the two groups differ in
    baseline: Group
    other: Group
    point: Optional[float] = None
    lo: Optional[float] = None
    hi: Optional[float] = None
    refused: Optional[str] = None
    refused_because: Optional[str] = None  # the refusal's reason in a few words (``REASONS``), to count by
    notes: list[str] = field(default_factory=list)
    interval: str = "between repeats"  # between repeats | within-run | none
    unverified: list[str] = field(default_factory=list)  # axes a side does not state: they may differ too
    repeats: Optional[stats.RepeatsRatio] = None  # between repeats: the test, its noise and what it can detect

    @property
    def significant(self) -> Optional[bool]:
        """None where no verdict may be drawn (single repeats, reported figures)."""
        if self.refused or self.lo is None or self.interval != "between repeats":
            return None
        return stats.significant(self.lo, self.hi)

    def wording(self) -> str:
        if self.refused:
            return f"refused: {self.refused}"
        caveat = f" (unverified: a side does not state its {', '.join(self.unverified)})" if self.unverified else ""
        return self.figure() + caveat

    def figure(self) -> str:
        if self.lo is None:
            return f"{self.point:.3f}x (reported figures: no interval, no significance verdict)"
        if self.significant is None:
            return (f"{self.point:.3f}x [within-run 95% CI {self.lo:.3f}-{self.hi:.3f}] (single repeat: no "
                    "significance verdict; run benchmark.repeats>=2 or several runs)")
        r = self.repeats
        verdict = "" if self.significant else " (not significant: the interval contains 1)"
        text = f"{self.point:.3f}x [95% CI over repeats {self.lo:.3f}-{self.hi:.3f}, {r.method}]{verdict}"
        if not self.significant and r.detectable is not None:
            text += (f"; at this noise ({r.noise:.1%} run to run) {len(self.baseline.repeats)} and "
                     f"{len(self.other.repeats)} repeats can show a speedup of {r.detectable:.3f}x or more")
        if r.repeats_needed is not None and r.noise > 0:
            text += f"; to detect {stats.EFFECT_TO_PLAN:.0%} at this noise: {r.repeats_needed} repeats a side"
        return text

    def as_dict(self) -> dict:
        return {"kind": self.kind, "baseline": self.baseline.label, "other": self.other.label,
                "speedup": self.point, "ci_low": self.lo, "ci_high": self.hi, "interval": self.interval,
                "significant": self.significant, "refused": self.refused, "refused_because": self.refused_because,
                "unverified_axes": self.unverified, "method": self.repeats.method if self.repeats else None,
                "noise": self.repeats.noise if self.repeats else None,
                "detectable_speedup": self.repeats.detectable if self.repeats else None,
                "repeats_to_detect_3pct": self.repeats.repeats_needed if self.repeats else None,
                "notes": self.notes}


def settings_differences(a: Group, b: Group) -> list[str]:
    fa = flat({k: a.spec[k] for k in SAME_UNDER_IDENTICAL})
    fb = flat({k: b.spec[k] for k in SAME_UNDER_IDENTICAL})
    return [f"{k} ({fa.get(k)} vs {fb.get(k)})" for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


# the schema version whose figures each version's are: 2.0 changed only how steps are stored (as columns), 1.1
# what an ingested figure may be (null, not a default dressed as a measurement)
FIGURES_OF = {"1.0": "1.0", "1.1": "1.1", "2.0": "1.1"}


Refusal = tuple[str, str]  # (the reason in a few words: one of REASONS, the whole sentence)
REASONS = {  # why pairs are refused, as a count of them reads: "12 pairs: the model is not stated"
    "schema": "result schema versions differ",
    "audit": "a fairness audit failed",
    "settings": "identical_config runs with different settings",
    "workload": "the batch size, sequence length or optimizer differs too",
    "model": "a side does not state its model (tprimat ingest --model)",
    "device": "a side does not state its device (tprimat ingest --gpu or --system)",
    "throughput": "a side has no throughput",
}


def refusal(a: Group, b: Group) -> Optional[Refusal]:
    va, vb = a.first["schema_version"], b.first["schema_version"]
    if FIGURES_OF.get(va, va) != FIGURES_OF.get(vb, vb):
        return "schema", f"result schema versions differ ({va} vs {vb}): their figures do not mean the same"
    for group in (a, b):
        for run in group.runs:
            audit = run.result.get("audit")
            if audit and audit.get("passed") is False:
                return "audit", f"the fairness audit failed for {run.path} ({group.framework})"
    if a.methodology == b.methodology == "identical_config":
        diffs = settings_differences(a, b)
        if diffs:
            return "settings", ("identical_config runs differ in " + ", ".join(diffs[:6])
                                + (" ..." if len(diffs) > 6 else ""))
    workload = workload_differences(a, b)
    if workload:
        fa, fb = (flat({k: g.spec["training"].get(k) for k in WORKLOAD}) for g in (a, b))
        return "workload", ("the groups also differ in " + ", ".join(f"training.{k} ({fa[k]} vs {fb[k]})"
                                                                     for k in workload)
                            + ": the ratio would measure that too")
    return None


def unstated(a: Group, b: Group, kind: str) -> list[str]:
    """The axes other than ``kind`` that either group leaves unstated (``?``, or ``tp?`` in a layout), then the
    batch shape's keys (``WORKLOAD`` but the optimizer, which does not change a step's work) either leaves null."""
    axes_a, axes_b = a.axes(), b.axes()
    axes = [k for k in AXES if k != kind and ("?" in axes_a[k] or "?" in axes_b[k])]
    shape = [f"training.{k}" for k in WORKLOAD if k != "optimizer"
             and None in (a.spec["training"].get(k), b.spec["training"].get(k))]
    return axes + shape


def unstated_refusal(a: Group, b: Group) -> Optional[Refusal]:
    for axis in RATE_OF:
        silent = [g.label for g in (a, b) if "?" in g.axes()[axis]]
        if silent:
            return axis, (f"the {axis} is not stated for {silent[0]}: the two may differ in it too (a per-device "
                          f"rate means nothing without it; tprimat ingest {HOW_TO_STATE[axis]} states it)")
    return None


def compare_pair(kind: str, a: Group, b: Group) -> Speedup:
    baseline, other = sorted((a, b), key=lambda g: (g.device, g.framework, g.label))
    result = Speedup(kind, baseline, other)
    refused = refusal(baseline, other) or unstated_refusal(baseline, other)
    if refused:
        result.refused_because, result.refused = refused
        return result
    result.unverified = unstated(baseline, other, kind)
    if not baseline.metrics.get("tokens_per_s_per_device") or not other.metrics.get("tokens_per_s_per_device"):
        result.refused_because = "throughput"
        result.refused = "a side has no throughput (its results state neither tokens per step nor a printed rate)"
        return result
    timed = all(r.tokens for g in (baseline, other) for r in g.repeats)
    if timed and len(baseline.repeats) >= 2 and len(other.repeats) >= 2:
        result.repeats = stats.welch_ratio([r.rate for r in baseline.repeats], [r.rate for r in other.repeats])
        result.point, result.lo, result.hi = result.repeats.point, result.repeats.lo, result.repeats.hi
    elif timed:
        result.interval = "within-run"
        result.point, result.lo, result.hi = stats.ratio_ci(baseline.samples(), other.samples())
    else:
        result.interval = "none"
        result.point = other.metrics["tokens_per_s_per_device"] / baseline.metrics["tokens_per_s_per_device"]
        result.notes.append("from reported figures (" + ", ".join(sorted(set(baseline.metrics["provenance"])
                                                                         | set(other.metrics["provenance"]))) + ")")
    if baseline.metrics.get("flops_convention") != other.metrics.get("flops_convention"):
        result.notes.append("FLOPs conventions differ: compare TFLOP/s with care (tokens/s is unaffected)")
    for group in (baseline, other):
        result.notes += [f"{group.label}: {flag}" for flag in group.flags]
    return result


def workload_differences(a: Group, b: Group) -> list[str]:
    """The ``WORKLOAD`` training keys (``optimizer.lr`` style for nested ones) that both groups state, differently."""
    fa = flat({k: a.spec["training"].get(k) for k in WORKLOAD})
    fb = flat({k: b.spec["training"].get(k) for k in WORKLOAD})
    return [k for k in fa if fa[k] is not None and fb.get(k) is not None and fa[k] != fb[k]]


def axis_between(a: Group, b: Group) -> Optional[str]:
    """The one axis two groups differ in (platform when the platform and its device both differ; under
    maximum_performance the settings tuned with a platform or a framework go with it), else None."""
    axes_a, axes_b = a.axes(), b.axes()
    differ = [k for k in AXES if axes_a[k] != axes_b[k]]
    if "?" in axes_a["layout"] + axes_b["layout"] and a.world_size != b.world_size:
        return None  # an unstated layout does not fix the device count: pairs at equal counts only
    hardware = [k for k in differ if k in ("platform", "device")]
    tuned = axes_a["methodology"] == axes_b["methodology"] == "maximum_performance"
    if hardware and set(differ) <= {"platform", "device"}:
        return hardware[0]  # a device belongs to its platform: one axis
    if hardware and tuned and set(differ) <= TUNED_WITH_PLATFORM:
        return hardware[0]  # each platform its best settings: layout, precision and optimisations follow it
    same_mesh = axes_a["layout"].split()[:4] == axes_b["layout"].split()[:4]  # tp pp cp dp; the sharding may differ
    if "framework" in differ and tuned and same_mesh and set(differ) <= TUNED_WITH_FRAMEWORK:
        return "framework"  # each framework runs the tuned settings as it can (its sharding, its recompute)
    return differ[0] if len(differ) == 1 else None


REFUSED_EXAMPLES = 5  # refused pairs shown per reason in report.md and comparison.json; the rest are counted


def bounded(found: list[Speedup]) -> dict:
    """comparison.json's pairs: every pair compared, the first ``REFUSED_EXAMPLES`` refused ones of each reason as
    examples, and the count of refused pairs by reason."""
    by_reason = refused_by_reason(found)
    examples = [s for pairs in by_reason.values() for s in pairs[:REFUSED_EXAMPLES]]
    return {"speedups": [s.as_dict() for s in found if not s.refused] + [s.as_dict() for s in examples],
            "refused_pairs": [{"reason": key, "text": REASONS[key], "count": len(pairs)}
                              for key, pairs in by_reason.items()]}


def refused_by_reason(found: list[Speedup]) -> dict[str, list[Speedup]]:
    """The refused pairs by their reason (``REASONS``' order), for a reader who wants the count before the list."""
    by_reason: dict[str, list[Speedup]] = {key: [] for key in REASONS}
    for s in found:
        if s.refused:
            by_reason[s.refused_because].append(s)
    return {key: pairs for key, pairs in by_reason.items() if pairs}


def speedups(groups: list[Group], by: Optional[str] = None) -> list[Speedup]:
    by = BY_ALIASES.get(by, by)
    if by is not None and by not in AXES:
        raise ValueError(f"--by {by}: must be one of {', '.join(AXES)}")
    found = []
    for a, b in combinations(groups, 2):
        axis = axis_between(a, b)
        if axis is not None and (by is None or axis == by):
            found.append(compare_pair(axis, a, b))
    return found
