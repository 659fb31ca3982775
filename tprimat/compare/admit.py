"""Admission of foreign results: each result compare reads is first derived alone, exactly as compare will use it
(its group, summary row, breakdown and memory sections); one that raises on its own is skipped with the reason,
so that a malformed field in one file never costs the comparison of the others. ``sane.problem`` has already
refused what is plainly not a result (missing sections, wrong types, non-finite or absurd numbers)."""

from __future__ import annotations

from tprimat.compare.breakdown import group_breakdown, group_memory
from tprimat.compare.groups import build_groups, group_summary
from tprimat.compare.load import Loaded
from tprimat.compare.report import sections
from tprimat.compare.speedups import speedups

READ_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError, ZeroDivisionError)


def admit(results: list[Loaded]) -> tuple[list[Loaded], list[tuple]]:
    """(results compare can read, [(path, why)] of those it cannot)."""
    kept, skipped = [], []
    for item in results:
        try:
            groups = build_groups([item])
            for group in groups:
                group_summary(group)
                group_breakdown(group)
                group_memory(group)
            sections(groups, speedups(groups), [], [], "median")  # the report's reading of it
        except READ_ERRORS as exc:
            skipped.append((item.path, f"cannot be compared: {type(exc).__name__}: {str(exc)[:200]}"))
            continue
        kept.append(item)
    return kept, skipped
