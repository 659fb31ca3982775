"""Regression gate: each group's throughput against the same group in a baseline set of results."""

from __future__ import annotations

from dataclasses import dataclass

from tprimat.compare.groups import Group


@dataclass(frozen=True)
class GateRow:
    label: str
    current: float
    baseline: float

    @property
    def ratio(self) -> float:
        return self.current / self.baseline


def gate(current: list[Group], baseline: list[Group], threshold: float) -> tuple[list[GateRow], list[GateRow], list[str]]:
    """(passed, failed, unmatched labels): groups matched by spec identity only, as ``tprimat gate`` keys golden
    values (a printed label is shared by workloads that differ: half the sequence length would pass as the same)."""
    by_identity = {g.identity: g for g in baseline}
    passed, failed, unmatched = [], [], []
    for group in current:
        base = by_identity.get(group.identity)
        if base is None or not group.metrics["tokens_per_s_per_device"] or not base.metrics["tokens_per_s_per_device"]:
            unmatched.append(f"{group.label} (spec {group.identity})")
            continue
        row = GateRow(group.label, group.metrics["tokens_per_s_per_device"], base.metrics["tokens_per_s_per_device"])
        (passed if row.ratio >= threshold else failed).append(row)
    return passed, failed, unmatched
