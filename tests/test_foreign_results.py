"""compare and check read any JSON: a real result with one field mutated (null, removed, of another type, beyond
float range, zero, negative) beside an untouched one never crashes ``tprimat compare --out`` or ``tprimat check``;
the untouched result is still compared, and a result compare cannot read is skipped with its reason."""

import argparse
import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import QUICK, run_inprocess
from tprimat.compare.cli import add_arguments, run
from tprimat.compare.load import load
from tprimat.results.result import validate_result


def bench_fuzz():
    """bench/fuzz.py, whose result mutations this test draws from (one definition of what a hostile field is)."""
    path = Path(__file__).resolve().parent.parent / "bench" / "fuzz.py"
    spec = importlib.util.spec_from_file_location("tprimat_bench_fuzz", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


FUZZ = bench_fuzz()


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    out = tmp_path_factory.mktemp("real")
    return run_inprocess(out, [*QUICK, "platform=cpu", "training.precision=fp32"]).result


def compare_args(paths, out):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([*map(str, paths), *(["--out", str(out)] if out else [])])


@pytest.mark.slow
@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_one_mutated_field_never_crashes_compare_or_check(real, tmp_path_factory, data):
    paths = sorted(set(FUZZ.leaves(real)), key=str)
    path = data.draw(st.sampled_from(paths))
    value = data.draw(st.sampled_from(FUZZ.HOSTILE_VALUES))
    root = tmp_path_factory.mktemp("foreign")
    (root / "good").mkdir()
    (root / "bad").mkdir()
    (root / "good" / "result.json").write_text(json.dumps(real))
    (root / "bad" / "result.json").write_text(json.dumps(another_run(FUZZ.mutated(real, path, value), real)))
    # one example in four also writes the report (plots, report.html): the costly part, not where fields are read
    code = run(compare_args([root], root / "report" if data.draw(st.sampled_from([True, False, False, False])) else None))
    assert code in (0, 1, 2, 3)
    loaded = load([str(root)])
    assert any(item.path.parent.name == "good" for item in loaded.results)
    validate_result(json.loads((root / "bad" / "result.json").read_text()))  # check's own path: no exception


def another_run(mutated, real):
    """A mutated copy stands for another run: were it left with the original's run_id, compare would read the run
    once (the first file found) and the untouched result could be the one set aside as the copy."""
    if isinstance(mutated, dict) and mutated.get("run_id") == real.get("run_id"):
        return {**mutated, "run_id": f"{real['run_id']}-mutated"}
    return mutated


@pytest.mark.parametrize("edit,reason", [
    (lambda r: r.update(spec=None), "spec is missing or not an object"),
    (lambda r: [s.__setitem__("tokens", 10 ** 400) for s in r["steps"]], "beyond the float range"),
    (lambda r: [s.__setitem__("step_time_s", 0.0) for s in r["steps"]], "step_time_s"),
])
def test_the_issue_s_foreign_results_are_skipped_with_their_reason(real, tmp_path, edit, reason):
    """A result with "spec": null, tokens of 10**400 or zero step times (each crashed compare before): skipped,
    with the reason, beside an untouched result that is still compared."""
    bad = copy.deepcopy(real)
    edit(bad)
    bad = another_run(bad, real)
    for name, result in (("good", real), ("bad", bad)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps(result))
    report = load([str(tmp_path)])
    assert [item.path.parent.name for item in report.results] == ["good"]
    assert len(report.skipped) == 1 and reason in report.skipped[0][1]
    assert run(compare_args([tmp_path], tmp_path / "report")) == 0
