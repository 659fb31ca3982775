"""Near-duplicates counted once: the median |error| over families, a family's error the median of its members'."""

from __future__ import annotations

import statistics


def family_median(errors: list[tuple[str, float]]) -> float:
    """``errors``: (family, error) pairs; a row with no near-duplicate is a family of its own."""
    families: dict = {}
    for family, error in errors:
        families.setdefault(family, []).append(abs(error))
    return statistics.median(statistics.median(v) for v in families.values()) if families else float("nan")
