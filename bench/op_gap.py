"""Learn the projection's per-operation GPU gap (``tprimat.spec.op_gap``) from the development rows alone.

The development rows: the published tables of ``bench/projection_rows.py`` and MLPerf v5.1's LLM submissions
(``bench/mlperf_rows_v51.json``). No held-out row is read (v5.0's, v4.1's and v4.0's rows files, held_out_3 and 4).
Each row is projected at every gap of a grid (0 to 20 us a traced operation, by 0.25 us); the gap learned is the one
whose median |error| over families (near-duplicates once) is least, the smallest on a tie. Leave-one-family-out: each
family's error is taken at the gap learned from the other families, and the median of those is the cross-validated
error, the figure to quote for the development rows.

Prints the gap learned from every development family, each family's held-out gap and error, then
``op_gap_us=<x>``, ``op_gap_fitted_median_abs_error=<x>`` (every family at the gap learned from all of them) and
last ``op_gap_cv_median_abs_error=<x>``.

    python bench/op_gap.py [--write]   # --write: tprimat/spec/op_gap.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from families import family_median  # noqa: E402
from mlperf_projection_rows import load  # noqa: E402
from projection_rows import SCORED  # noqa: E402

from tprimat.compose import Composer  # noqa: E402
from tprimat.execute.prepare import prepare  # noqa: E402
from tprimat.spec import op_gap  # noqa: E402
from tprimat.spec.build import build_spec  # noqa: E402
from tprimat.spec.detect import DetectedHardware  # noqa: E402
from tprimat.spec.plan import make_plan  # noqa: E402
from tprimat.spec.projection import ceilings, project  # noqa: E402

GRID_US = tuple(i / 4 for i in range(81))
DEVELOPMENT_MLPERF = "mlperf_rows_v51.json"
# the sweep's fast composition (Hydra composes once per choice of config groups; equal to Hydra's own composition,
# tests/test_sweep.py): the rows share a few dozen choices; bench/projection.py composes with this one too
COMPOSER = Composer()
HW = DetectedHardware("cpu", "projection", 1, 0.0, None)


@dataclass(frozen=True)
class Curve:
    """One row's error (projected / published - 1) at each gap of the grid."""

    name: str
    family: str
    errors: tuple


def development_rows() -> list[dict]:
    return [*SCORED, *load(DEVELOPMENT_MLPERF)[0]]


def planned(overrides: list[str]) -> tuple:
    """(spec, plan, the memory estimate over-counts, why not) of a published row, as both benches project it: its plan,
    or where the memory estimate alone refuses it (a published run that fit on its GPUs: the estimate over-counts,
    docs/benchmarks.md; the projection does not depend on it) the plan made anyway; no plan, and why, otherwise."""
    spec = build_spec(COMPOSER.compose(overrides), HW)
    prepared = prepare(spec, HW, dry_run=True)
    if prepared.plan is not None:
        return spec, prepared.plan, False, None
    if all("exceeds" in problem and "GiB" in problem for problem in prepared.problems):
        return spec, make_plan(spec, HW), True, None
    return spec, None, False, prepared.problems[0]


def curve(published_row: dict, grid_us: tuple = GRID_US) -> Optional[Curve]:
    """The row projected at each gap (the hardware table's ceilings with that gap); None where it has no projection."""
    spec, plan, _, _ = planned(published_row["overrides"])
    found, _ = ceilings(spec)
    if plan is None or found is None:
        return None
    from tprimat.backends.native.opcount import trace_work

    work = trace_work(spec)
    errors = []
    for gap in grid_us:
        p = project(spec, work, dataclasses.replace(found, op_gap_s=gap / 1e6), plan.dp, plan.grad_accum_steps, None)
        if not p["available"]:
            return None
        errors.append(p["tokens_per_s_per_device"] / published_row["published"] - 1)
    return Curve(published_row["name"], published_row["family"], tuple(errors))


def median_at(curves: list[Curve], i: int) -> float:
    return family_median([(c.family, c.errors[i]) for c in curves])


def best(curves: list[Curve]) -> int:
    """The grid index whose median |error| over the curves' families is least (the smallest gap on a tie)."""
    return min(range(len(curves[0].errors)), key=lambda i: (median_at(curves, i), i))


def leave_one_family_out(curves: list[Curve]) -> dict:
    """{family: the grid index learned from every other family}."""
    return {f: best([c for c in curves if c.family != f]) for f in dict.fromkeys(c.family for c in curves)}


def cross_validated(curves: list[Curve], held: dict) -> float:
    return family_median([(c.family, c.errors[held[c.family]]) for c in curves])


def learn(grid_us: tuple = GRID_US) -> tuple[list[Curve], int, dict]:
    """(the development rows' curves, the index learned from all of them, each family's leave-one-out index)."""
    curves = [c for c in (curve(r, grid_us) for r in development_rows()) if c is not None]
    return curves, best(curves), leave_one_family_out(curves)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="write tprimat/spec/op_gap.json")
    args = parser.parse_args()
    curves, chosen, held = learn()
    for family in held:
        errors = [c.errors[held[family]] for c in curves if c.family == family]
        print(f"{family}: learned without it {GRID_US[held[family]]:g} us, error "
              + ", ".join(f"{e:+.1%}" for e in errors))
    families = len(held)
    fitted, cv = median_at(curves, chosen), cross_validated(curves, held)
    print(f"op_gap_us={GRID_US[chosen]:g} (from {families} families, {len(curves)} rows)")
    print(f"op_gap_fitted_median_abs_error={fitted:.3f}")
    print(f"op_gap_cv_median_abs_error={cv:.3f}")
    if args.write:
        op_gap.LEARNED.write_text(json.dumps({
            "op_gap_us": GRID_US[chosen], "families": families, "rows": len(curves),
            "fitted_median_abs_error": round(fitted, 4), "cv_median_abs_error": round(cv, 4),
            "learned_by": "bench/op_gap.py (grid 0-20 us by 0.25 us, least median |error| over the development "
                          "families: bench/projection_rows.py's published tables and MLPerf v5.1)"}, indent=1) + "\n")
        print(f"wrote {op_gap.LEARNED.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
