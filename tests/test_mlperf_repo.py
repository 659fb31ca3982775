"""An MLPerf Training results repository read by its layout and scored as MLPerf scores it: ``tprimat ingest`` on the
repository's folders (no flags) pairs each run log with its systems JSON and scaling.json; the time-to-train
score of each system equals the one MLCommons published (../shared/mlperf_v5.1, skipped where absent) and
MLCommons' own ``mlperf-logging`` (4.1.68, ``result_summarizer``) on the same folders. Small repositories this test
writes (a run that did not converge, one that never stopped, two that did not converge, a missing systems JSON, a
placeholder field) are scored against hand computations: mlperf-logging's compliance checks refuse such minimal
logs, so its olympic mean is compared for any run times instead (hypothesis)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tprimat.cli import main
from tprimat.compare.time_to_train import from_results, olympic, read_all
from tprimat.spec.hardware import BANDWIDTHS, DEVICES

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "mlperf_v5.1"
# MLCommons' published scores (minutes), MLPerf Training v5.1 results table, for the three systems of ../shared
PUBLISHED = {("AMD", "MI355X_EPYC_9575F_pytorch", "llama31_8b"): 99.71,
             ("AMD", "MI300X_EPYC_9575F_pytorch_llama2_70b", "llama2_70b_lora"): 27.97,
             ("Dell", "1xXE9680x8H200-SXM-141GB", "llama2_70b_lora"): 23.37}


def ingest(*args) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as code:
        main(["ingest", *map(str, args)])
    assert code.value.code in (0, 1), out.getvalue()[-2000:]
    return out.getvalue()


def scores_of(folder: Path) -> dict:
    return {(s.submitter, s.system, s.benchmark): s for s in from_results(read_all([str(folder)]))}


@pytest.mark.slow  # 30 real logs ingested
@pytest.mark.skipif(not SHARED.exists(), reason="../shared/mlperf_v5.1 not present")
def test_the_three_systems_score_as_mlcommons_published(tmp_path):
    ingest(SHARED, "--out", tmp_path)
    scores = scores_of(tmp_path)
    assert set(scores) == set(PUBLISHED)
    for key, minutes in PUBLISHED.items():
        s = scores[key]
        assert s.minutes == pytest.approx(minutes, abs=0.005), key
        assert s.devices == 8 and s.nodes == 1 and len(s.runs) == 10 and all(r.converged for r in s.runs)
        assert s.flags == []
    assert scores[("AMD", "MI355X_EPYC_9575F_pytorch", "llama31_8b")].accelerator == "AMD Instinct MI355X"
    assert scores[("AMD", "MI355X_EPYC_9575F_pytorch", "llama31_8b")].unscaled_minutes == pytest.approx(99.31, abs=0.005)


@pytest.mark.slow  # 30 real logs ingested, and mlperf-logging's compliance checks of each
@pytest.mark.skipif(not SHARED.exists(), reason="../shared/mlperf_v5.1 not present")
def test_the_score_equals_mlperf_loggings_own_on_the_same_folders(tmp_path):
    rs = pytest.importorskip("mlperf_logging.result_summarizer.result_summarizer")
    ingest(SHARED, "--out", tmp_path)
    for (submitter, system, benchmark), s in scores_of(tmp_path).items():
        theirs, _, factor = rs._compute_strong_score_standalone(
            benchmark, system, False, str(SHARED / submitter / "results" / system / benchmark), "training", "5.1.0")
        assert s.minutes == pytest.approx(theirs, rel=1e-12) and s.scaling_factor == factor


def mllog(key: str, time_ms: int, value=None, **metadata) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME", "key": key,
                                     "value": value, "metadata": {"file": "train.py", "lineno": 1, **metadata}})


def run_log(minutes: float, status: str = "success", platform: str = "8xTEST") -> str:
    """A llama31_8b run as the results repository holds them: submission keys, run_start, one eval, run_stop."""
    start = 1_700_000_000_000
    stop = start + round(minutes * 60_000)
    return "\n".join([
        mllog("submission_benchmark", start - 10, "llama31_8b"), mllog("submission_org", start - 10, "Test"),
        mllog("submission_platform", start - 10, platform), mllog("global_batch_size", start - 5, 32),
        mllog("run_start", start), mllog("eval_accuracy", stop - 1, 3.29 if status == "success" else 3.6,
                                         samples_count=172032),
        mllog("run_stop", stop, samples_count=172032, status=status)]) + "\n"


def repository(root: Path, minutes: list, statuses=None, system_json=True, platform="8xTEST", scaling=None,
               accelerator="NVIDIA H100-SXM5-80GB") -> Path:
    folder = root / "Test" / "results" / "sys8" / "llama31_8b"
    folder.mkdir(parents=True)
    for n, m in enumerate(minutes):
        (folder / f"result_{n}.txt").write_text(run_log(m, (statuses or {}).get(n, "success"), platform))
    (folder / "README.md").write_text("not a run log\n")
    (folder / "notes.txt").write_text("not a run log either\n")
    if scaling is not None:
        (folder / "scaling.json").write_text(json.dumps({"scaling_factor": scaling}))
    if system_json:
        (root / "Test" / "systems").mkdir(parents=True)
        (root / "Test" / "systems" / "sys8.json").write_text(json.dumps({
            "accelerator_model_name": accelerator, "accelerators_per_node": "8", "number_of_nodes": "1",
            "framework": "NeMo 25.09"}))
    return root


MINUTES = [30.0, 31.0, 29.5, 32.0, 30.5, 33.0, 29.0, 31.5, 30.25, 34.0]


def test_one_run_that_did_not_converge_is_dropped_as_the_slowest(tmp_path):
    """Run 6, the fastest (29.0 min), aborted: it counts as the slowest. The nine converged sorted, the fastest
    (29.5) dropped, none more at the slow end: (30.0 + 30.25 + 30.5 + 31.0 + 31.5 + 32.0 + 33.0 + 34.0) / 8 =
    31.53125, times scaling 1.01 (had its time been kept: 30.96875)."""
    repo = repository(tmp_path / "repo", MINUTES, statuses={6: "aborted"}, scaling=1.01)
    said = ingest(repo / "Test" / "results", "--out", tmp_path / "out")  # from a folder inside the repository
    assert "skipped 1 files of MLPerf results folders that are not run logs" in said  # notes.txt (README.md: not a log)
    (s,) = scores_of(tmp_path / "out").values()
    assert s.unscaled_minutes == pytest.approx(31.53125) and s.minutes == pytest.approx(31.53125 * 1.01)
    assert s.flags == ["1 run did not converge: dropped as the slowest"]
    assert [r.converged for r in s.runs].count(False) == 1
    assert s.accelerator == "NVIDIA H100-SXM5-80GB" and s.devices == 8
    ingested = [r for _, r in read_all([str(tmp_path / "out")])]
    assert {r["spec"]["platform"]["gpu"] for r in ingested} == {"h100"}  # mapped from the systems JSON, no flag


def test_a_run_that_never_stopped_counts_as_not_converged(tmp_path):
    """Run 6's log ends before run_stop (as Dell's XE9780 B200 llama2_70b_lora result_0.txt does in v5.1): no time,
    not converged, the slowest; the same score as the aborted run above gives, by hand 31.53125."""
    repo = repository(tmp_path / "repo", MINUTES)
    log = repo / "Test" / "results" / "sys8" / "llama31_8b" / "result_6.txt"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines() if '"run_stop"' not in line))
    ingest(repo, "--out", tmp_path / "out")
    (s,) = scores_of(tmp_path / "out").values()
    assert s.unscaled_minutes == pytest.approx(31.53125) and s.flags == ["1 run did not converge: dropped as the slowest"]
    (stopped,) = [r for r in s.runs if not r.converged]
    assert stopped.minutes is None and "result_6" in stopped.path


def test_two_runs_that_did_not_converge_leave_no_score_and_say_why(tmp_path):
    repo = repository(tmp_path / "repo", MINUTES, statuses={3: "aborted", 9: "aborted"})
    ingest(repo, "--out", tmp_path / "out")
    (s,) = scores_of(tmp_path / "out").values()
    assert s.minutes is None and s.flags == ["2 runs did not converge (the rules allow 1): no valid score"]


def test_too_few_runs_are_shown_and_flagged_never_scored_as_complete(tmp_path):
    repo = repository(tmp_path / "repo", MINUTES[:4])
    ingest(repo, "--out", tmp_path / "out")
    (s,) = scores_of(tmp_path / "out").values()
    assert s.minutes is None and s.unscaled_minutes == pytest.approx((30.0 + 31.0) / 2)  # 29.5, 32.0 dropped
    assert s.flags == ["4 runs of the 10 the rules require: no complete result"]


def test_a_missing_systems_json_and_a_placeholder_platform_are_said_not_guessed(tmp_path):
    repo = repository(tmp_path / "repo", MINUTES, system_json=False, platform="SUBMISSION_PLATFORM_PLACEHOLDER")
    ingest(repo, "--out", tmp_path / "out")
    (s,) = scores_of(tmp_path / "out").values()
    assert s.minutes == pytest.approx(sum(sorted(MINUTES)[1:-1]) / 8)
    assert s.accelerator is None and s.devices is None
    assert s.flags == ["systems JSON not found: Test/systems/sys8.json"]
    for _, result in read_all([str(tmp_path / "out")]):  # the placeholder kept as logged, no GPU read into it
        assert result["source"]["submission_platform"] == "SUBMISSION_PLATFORM_PLACEHOLDER"
        assert result["spec"]["platform"]["gpu"] is None and result["spec"]["platform"]["name"] is None


# Every accelerator_model_name of MLPerf Training v5.1's systems JSONs (mlcommons/training_results_v5.1, 92 files),
# and the hardware table's row each is: the names as submitters wrote them, the rows by their spec sheets' names
V51_ACCELERATORS = {
    "AMD Instinct MI300X 192GB HBM3": "mi300x", "AMD Instinct MI325X 256GB HBM3E": "mi325x",
    "AMD Instinct MI325X 256GB HBM3E DLC": "mi325x", "AMD Instinct MI350X": "mi350x", "AMD Instinct MI355X": "mi355x",
    "NVIDIA Blackwell GPU (B200-SXM-180GB)": "b200", "NVIDIA Blackwell GPU (GB200)": "gb200",
    "NVIDIA Blackwell Ultra GPU (B300-SXM-270GB)": "b300", "NVIDIA Blackwell Ultra GPU (GB300)": "gb300",
    "NVIDIA H100-SXM5-80GB": "h100", "NVIDIA H200 NVL 141GB": "h200_nvl", "NVIDIA H200-SXM5-141GB": "h200",
    "NVIDIA RTX Pro 6000 SE PCIe 96GB": None}


@pytest.mark.parametrize("name,key", sorted(V51_ACCELERATORS.items()))
def test_every_v51_accelerator_is_its_own_row_or_flagged_never_another_gpu(tmp_path, name, key):
    """The NVL H200 is not the SXM H200, GB200 not B200; the RTX Pro 6000 (no dense peak published in the sources
    read) keeps its name with a flag, and no GPU is read into it."""
    ingest(repository(tmp_path / "repo", MINUTES, accelerator=name), "--out", tmp_path / "out")
    (s,) = scores_of(tmp_path / "out").values()
    results = [result for _, result in read_all([str(tmp_path / "out")])]
    assert {r["spec"]["platform"]["gpu"] for r in results} == {key} and s.accelerator == name
    flag = f"accelerator {name!r} is not in the hardware table: kept as named, no peak, MFU or projection"
    assert (flag in s.flags) is (key is None)
    if key is not None:
        assert DEVICES[key].source and BANDWIDTHS[key].source


@pytest.mark.parametrize("not_converged", [0, 1])
@settings(max_examples=40, deadline=None, derandomize=True)
@given(minutes=st.lists(st.floats(min_value=1, max_value=1e4, allow_nan=False), min_size=3, max_size=12))
def test_the_olympic_mean_is_mlperf_loggings(minutes, not_converged):
    """Any run times: tprimat's olympic mean equals mlperf-logging's ``_compute_olympic_average`` (its own code)."""
    rs = pytest.importorskip("mlperf_logging.result_summarizer.result_summarizer")
    assert olympic(list(minutes), not_converged) == pytest.approx(
        rs._compute_olympic_average(list(minutes), not_converged, 1), rel=1e-12)


def test_a_log_ingested_twice_counts_once_and_hostile_fields_never_crash(tmp_path):
    """The same repository ingested twice into one folder: ten runs, not twenty. Then every field the score reads,
    set to a value of another type or beyond range, in one result at a time: scored or flagged, never a crash."""
    repo = repository(tmp_path / "repo", MINUTES)
    ingest(repo, "--out", tmp_path / "out")
    ingest(repo, "--out", tmp_path / "out")
    items = read_all([str(tmp_path / "out")])
    (s,) = scores_of(tmp_path / "out").values()
    assert len(items) == 20 and len(s.runs) == 10 and s.minutes == pytest.approx(sum(sorted(MINUTES)[1:-1]) / 8)
    path, good = items[0]
    hostile = [None, "x", True, 10 ** 400, float("inf"), -1, [], {}]
    for field in ("run_start_ms", "run_stop_ms", "status", "eval_accuracy", "sha256", "mlperf"):
        for value in hostile:
            bad = json.loads(json.dumps(good, default=str))
            bad["source"][field] = value
            from_results([(path, bad), *items[1:]])
    for field in ("scaling_factor", "devices", "nodes", "accelerator", "flags", "benchmark"):
        for value in hostile:
            bad = json.loads(json.dumps(good, default=str))
            bad["source"]["mlperf"][field] = value
            from_results([(path, bad)])
    for value in hostile:
        from_results([(path, {**good, "source": value})])
