"""The comparisons that matter: platform vs platform (same model and methodology) and framework vs
framework (same model, device and methodology), each a throughput ratio with a 95% bootstrap CI.

identical_config comparisons are refused when the two sides did not run the same settings (their specs
differ beyond the platform, or a fairness audit failed): such a ratio would measure the settings, not the
hardware or the software.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Optional

from tprimat.compare import stats
from tprimat.compare.groups import Group

SAME_UNDER_IDENTICAL = ("model", "training", "parallelism")


@dataclass
class Speedup:
    kind: str  # platform | framework
    baseline: Group
    other: Group
    point: Optional[float] = None
    lo: Optional[float] = None
    hi: Optional[float] = None
    refused: Optional[str] = None
    notes: list[str] = field(default_factory=list)

    @property
    def significant(self) -> bool:
        return self.lo is not None and stats.significant(self.lo, self.hi)

    def wording(self) -> str:
        if self.refused:
            return f"refused: {self.refused}"
        verdict = "" if self.significant else " (not significant: the interval contains 1)"
        return f"{self.point:.3f}x [95% CI {self.lo:.3f}-{self.hi:.3f}]{verdict}"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "baseline": self.baseline.label, "other": self.other.label,
                "speedup": self.point, "ci_low": self.lo, "ci_high": self.hi,
                "significant": self.significant if not self.refused else None, "refused": self.refused,
                "notes": self.notes}


def flatten(data, prefix=""):
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def settings_differences(a: Group, b: Group) -> list[str]:
    fa = flatten({k: a.spec[k] for k in SAME_UNDER_IDENTICAL})
    fb = flatten({k: b.spec[k] for k in SAME_UNDER_IDENTICAL})
    return [f"{k} ({fa.get(k)} vs {fb.get(k)})" for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def refusal(a: Group, b: Group) -> Optional[str]:
    if a.first["schema_version"] != b.first["schema_version"]:
        return f"result schema versions differ ({a.first['schema_version']} vs {b.first['schema_version']})"
    for group in (a, b):
        for run in group.runs:
            audit = run.result.get("audit")
            if audit and audit.get("passed") is False:
                return f"the fairness audit failed for {run.path} ({group.framework})"
    if a.methodology == b.methodology == "identical_config":
        diffs = settings_differences(a, b)
        if diffs:
            return "identical_config runs differ in " + ", ".join(diffs[:6]) + (" ..." if len(diffs) > 6 else "")
    return None


def compare_pair(kind: str, a: Group, b: Group) -> Speedup:
    baseline, other = sorted((a, b), key=lambda g: (g.device, g.framework, g.label))
    result = Speedup(kind, baseline, other)
    result.refused = refusal(baseline, other)
    if result.refused:
        return result
    result.point, result.lo, result.hi = stats.ratio_ci(baseline.samples(), other.samples())
    # Per-device throughput: the two sides may use different numbers of devices.
    scale = baseline.world_size / other.world_size
    result.point, result.lo, result.hi = result.point * scale, result.lo * scale, result.hi * scale
    if baseline.metrics.get("flops_convention") != other.metrics.get("flops_convention"):
        result.notes.append("FLOPs conventions differ: compare TFLOP/s with care (tokens/s is unaffected)")
    for group in (baseline, other):
        result.notes += [f"{group.label}: {flag}" for flag in group.flags]
    return result


def speedups(groups: list[Group]) -> list[Speedup]:
    found = []
    for a, b in combinations(groups, 2):
        if a.model != b.model or a.methodology != b.methodology:
            continue
        if a.device != b.device:
            found.append(compare_pair("platform", a, b))
        elif a.framework != b.framework:
            found.append(compare_pair("framework", a, b))
    return found
