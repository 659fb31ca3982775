"""The projection's one learned term: the seconds each traced operation adds on a GPU beyond its roofline.

The roofline times an operation by its FLOPs or bytes alone. A GPU also spends time per kernel that neither
counts: the launch and the fill and drain of each kernel, the last partial wave of a small GEMM, the extra kernels of
a context-parallel ring's steps. It is small beside a large operation and large beside a small one, so it is
what separates a rank given 1,024 tokens of a step (MLPerf's 512-GPU Llama 3.1 8B, the 70B LoRA at CP 8) from
one given 8,192. No source publishes it per operation for these stacks, so it is learned, and stated as learned:

- ``bench/op_gap.py`` learns one figure for every GPU and stack from the development rows alone (the published
  tables of ``bench/projection_rows.py`` and MLPerf v5.1's submissions); no held-out row is read.
- It picks, over a grid, the gap that minimizes the median |error| over those families, the smallest on a tie.
- The bench scores each development family with the gap learned without that family (leave-one-family-out),
  so no row scores a term it fitted. ``op_gap.json`` states that cross-validated error beside the gap.

A ``tprimat preflight`` file's ceilings carry no gap: on a device it measured, its per-operation overhead stands in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

LEARNED = Path(__file__).with_name("op_gap.json")


@dataclass(frozen=True)
class Gap:
    seconds: float  # per traced operation, forward and backward alike, on a GPU
    families: int  # the development families it was learned from
    rows: int
    cv_median_abs_error: float  # each family projected with the gap learned without it
    learned_by: str


@lru_cache(maxsize=1)
def learned() -> Optional[Gap]:
    """The gap ``bench/op_gap.py --write`` learned, or None before it has (the roofline alone)."""
    if not LEARNED.exists():
        return None
    found = json.loads(LEARNED.read_text())
    return Gap(found["op_gap_us"] / 1e6, found["families"], found["rows"], found["cv_median_abs_error"],
               found["learned_by"])


def source(gap: Optional[Gap]) -> str:
    if gap is None:
        return "none learned (bench/op_gap.py --write): the roofline alone"
    return (f"{gap.seconds * 1e6:g} us a traced operation, learned from {gap.families} development families "
            f"({gap.rows} rows) by {gap.learned_by}; leave-one-family-out median |error| {gap.cv_median_abs_error:.3f}")
