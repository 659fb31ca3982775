"""The projection's one learned term, the per-operation gap on a GPU (``tprimat.spec.op_gap``): what an operation
pays for it, which ceilings carry it, how ``bench/op_gap.py`` learns it (leave-one-family-out on hand-made
curves), and that the committed ``op_gap.json`` is what the development rows give."""

import importlib
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tprimat.compose import compose
from tprimat.spec import op_gap
from tprimat.spec.build import build_spec
from tprimat.spec.projection import Ceilings, OpCost, ceilings, op_time_s, preflight_ceilings

sys.path.insert(0, str(ROOT / "bench"))
bench = importlib.import_module("op_gap")


def test_a_gpu_operation_pays_the_gap_beyond_its_roofline_and_a_cpu_one_does_not():
    """100 TFLOP/s, 1000 GB/s: a 1-TFLOP matmul takes 10 ms, a 1-MB copy 1 us; on a GPU each pays 4 us more, and a
    launch floor (2 us measured per operation) bounds the work before the gap is added; a CPU (synchronous) adds its
    measured overhead and no gap."""
    gpu = Ceilings(100.0, 100.0, 1000.0, None, None, op_overhead_s=2e-6, op_gap_s=4e-6)
    assert op_time_s(OpCost("matmul", 1e12, 0.0), gpu) == pytest.approx(0.01 + 4e-6)
    assert op_time_s(OpCost("memory", 0.0, 1e6), gpu) == pytest.approx(2e-6 + 4e-6)
    cpu = Ceilings(100.0, 100.0, 1000.0, None, None, op_overhead_s=2e-6, synchronous=True, op_gap_s=4e-6)
    assert op_time_s(OpCost("memory", 0.0, 1e6), cpu) == pytest.approx(1e-6 + 2e-6)


def test_the_tables_ceilings_carry_the_committed_gap_and_a_preflights_none():
    committed = json.loads((ROOT / "tprimat" / "spec" / "op_gap.json").read_text())
    c, _ = ceilings(build_spec(compose(["platform=nvidia", "platform.gpu=h100", "model=llama_tiny"])))
    assert c.op_gap_s == pytest.approx(committed["op_gap_us"] / 1e6)
    assert f"{committed['cv_median_abs_error']:.3f}" in c.sources["op_gap"]
    assert "leave-one-family-out" in c.sources["op_gap"]
    measured, _ = preflight_ceilings({"matmul_tflops": {"bf16": 50.0}, "memory_gb_s": 500.0, "op_overhead_us": 3.0},
                                     "bf16")
    assert measured.op_gap_s == 0.0 and measured.op_overhead_s == pytest.approx(3e-6)


def test_the_gap_is_learned_by_least_median_and_scored_without_each_family():
    """Three families' errors at gaps 0, 1 and 2 (grid indices). The medians of |error| over families are 0.2, 0.1
    and 0.2: index 1. Left out, each family still gets index 1 from the other two. Two families that disagree: a tie
    at 0.25 (index 0, the smaller); left out, each gets the other's best, 0.5 off."""
    c = bench.Curve
    three = [c("a", "A", (0.3, 0.1, -0.1)), c("b", "B", (0.2, 0.0, -0.2)), c("c", "C", (0.1, -0.1, -0.3))]
    assert bench.best(three) == 1
    held = bench.leave_one_family_out(three)
    assert held == {"A": 1, "B": 1, "C": 1} and bench.cross_validated(three, held) == pytest.approx(0.1)
    two = [c("a", "A", (0.0, 0.5)), c("b", "B", (0.5, 0.0))]
    assert bench.best(two) == 0
    held = bench.leave_one_family_out(two)
    assert held == {"A": 1, "B": 0} and bench.cross_validated(two, held) == pytest.approx(0.5)


def test_near_duplicates_count_once_in_the_fit():
    """Family A holds three rows best at index 0, B and C one row each best at index 1: by rows index 0 would win,
    by families (A once) index 1 does."""
    c = bench.Curve
    curves = [c("a1", "A", (0.0, 0.3)), c("a2", "A", (0.0, 0.3)), c("a3", "A", (0.0, 0.3)),
              c("b", "B", (0.3, 0.0)), c("c", "C", (0.3, 0.0))]
    assert bench.best(curves) == 1


LEARN_IN_A_PROCESS = """
import json, sys
sys.path.insert(0, "bench")
import op_gap as bench
curves, chosen, held = bench.learn()
print(json.dumps({"op_gap_us": bench.GRID_US[chosen], "families": len(held), "rows": len(curves),
                  "fitted_median_abs_error": round(bench.median_at(curves, chosen), 4),
                  "cv_median_abs_error": round(bench.cross_validated(curves, held), 4)}))
"""


def test_the_committed_gap_is_what_the_development_rows_give():
    """bench/op_gap.py's own learning, in a process of its own (a test process holds whatever the tests before it
    imported and set: an in-process DeepSpeed ZeRO-3 run once moved it to 1.75 us), from the development rows alone
    (the published tables and MLPerf v5.1): the gap and its errors as op_gap.json states them, to the 4 places it
    keeps, so the figure cannot drift from its rows unnoticed."""
    committed = json.loads(op_gap.LEARNED.read_text())
    out = subprocess.run([sys.executable, "-c", LEARN_IN_A_PROCESS], capture_output=True, text=True, check=True,
                         cwd=ROOT, timeout=600).stdout
    learned = json.loads(out.strip().splitlines()[-1])
    assert learned == {key: committed[key] for key in learned}


def test_no_held_out_row_is_a_development_row():
    """The held-out sets (bench/held_out_2.py, 3 and 4; MLPerf v5.0, v4.1, v4.0 and v5.1's 405B) stay out of the fit."""
    rows = importlib.import_module("projection_rows")
    held = {rows.row(**r)["name"] for m in ("held_out_2", "held_out_3", "held_out_4")
            for r in importlib.import_module(m).PUBLISHED}
    for name in ("mlperf_rows_v50.json", "mlperf_rows_v41.json", "mlperf_rows_v40.json", "mlperf_rows_v51_405b.json"):
        expressed, listed = bench.load(name)
        held |= {r["name"] for r in expressed} | {n for n, _ in listed}
    development = {r["name"] for r in bench.development_rows()}
    assert len(held) > 100 and not development & held
    assert all(n.startswith("MLPerf v5.1") for n in development if n.startswith("MLPerf v"))


def test_the_bench_scores_each_development_family_at_the_gap_it_is_given():
    """bench/projection.py's leave-one-family-out wiring: two rows of two families at 0 and 20 us, against the same rows
    projected at those gaps along bench/op_gap.py's own path (the ceilings replaced, not the learned gap patched)."""
    scorer = importlib.import_module("projection")  # bench/projection.py
    a, b = scorer.SCORED[0], next(r for r in scorer.SCORED if r["family"] != scorer.SCORED[0]["family"])
    errors = scorer.published([a, b], quiet=True, gaps={a["family"]: 0.0, b["family"]: 20e-6})
    assert errors[0][1] == pytest.approx(bench.curve(a, (0.0,)).errors[0], rel=1e-9)
    assert errors[1][1] == pytest.approx(bench.curve(b, (20.0,)).errors[0], rel=1e-9)
    assert errors[0][1] != pytest.approx(bench.curve(a, (4.0,)).errors[0], rel=1e-6)  # not the learned gap


def test_a_projection_prints_its_gap_beside_its_source(capsys):
    from tprimat.execute.project import print_projection, projection_of
    from tprimat.spec.detect import DetectedHardware
    from tprimat.spec.plan import make_plan

    spec = build_spec(compose(["platform=nvidia", "platform.gpu=h100", "model=llama_tiny"]))
    p = projection_of(spec, make_plan(spec, DetectedHardware("none", "no live hardware", 0, 0.0, None)))
    print_projection("tiny", p)
    gap = op_gap.learned()
    assert p["ceilings"]["op_gap_s"] == gap.seconds
    line = next(x for x in capsys.readouterr().out.splitlines() if "ceiling op_gap_s" in x)
    assert f"{gap.seconds * 1e6:g} us a traced operation, learned from {gap.families} development families" in line
