"""Every MLPerf Training round with an LLM benchmark (v4.0 to v5.1) scored by its own rules, and MLPerf Power's
readings read as the energy of their runs: the energy of a run by hand and equal to MLCommons' ``mlperf-logging``
``_compute_total_power`` on the same files; a system's energy score as its ``_index_olympic_average``; each round's
runs required (llama31_405b: 3) and quality targets; logs that close only their last block (v5.0's 256-GPU
llama31_405b runs) keep their steps; v4.0's run log names. Repositories written here in the results layout."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tprimat.cli import main
from tprimat.compare.time_to_train import from_results, olympic, read_all, rounds, rule_of
from tprimat.ingest.mlperf_power import run_energy
from tprimat.results.columns import rows_of

START = 1_700_000_000_000


def mllog(key: str, time_ms: int, value=None, event: str = "POINT_IN_TIME", **metadata) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": event, "key": key,
                                     "value": value, "metadata": {"file": "power.py", "lineno": 1, **metadata}})


def node_file(path: Path, readings: list[tuple[int, float]], start: int, stop, efficiency=None) -> Path:
    lines = [mllog("power_measurement_start", start, event="INTERVAL_START")]
    if efficiency is not None:
        lines.append(mllog("conversion_eff", start, efficiency, measurement_type="AC"))
    lines += [mllog("power_reading", t, w, host="node_0") for t, w in readings]
    if stop is not None:
        lines.append(mllog("power_measurement_stop", stop, event="INTERVAL_END"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def switch_file(path: Path, watts: float, efficiency: float) -> Path:
    path.write_text("\n".join([mllog("conversion_eff", START, efficiency), mllog("interconnect_power_est", START, watts)])
                    + "\n")
    return path


def test_a_runs_energy_by_hand(tmp_path):
    """A node measured from t=0 to t=2 s: 1,000 W read at 1 s, 2,000 W at 2 s -> 3e6 W ms over a 2,000 ms window;
    the run trained 4 s: x 4000 / 2000 / 1000 x conversion 0.9 = 5,400 J. A switch: 50 W x 0.8 x 4 s = 160 J."""
    node = node_file(tmp_path / "node_0.txt", [(START + 1000, 1000.0), (START + 2000, 2000.0)], START, START + 2000, 0.9)
    switch = switch_file(tmp_path / "sw_0.txt", 50.0, 0.8)
    assert run_energy([node], [], 4000.0)["energy_j"] == pytest.approx(5400.0)
    said = run_energy([node], [switch], 4000.0)
    assert said["energy_j"] == pytest.approx(5560.0) and said["measurement"] == "AC"
    assert said["node_files"] == 1 and said["switch_files"] == 1
    no_start = tmp_path / "node_1.txt"
    no_start.write_text(mllog("power_reading", START, 5.0) + "\n")
    assert "no power_measurement_start" in run_energy([no_start], [], 4000.0)["why"]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(watts=st.lists(st.floats(min_value=100, max_value=20_000), min_size=2, max_size=30),
       gaps=st.integers(min_value=200, max_value=5000), stop=st.booleans(),
       efficiency=st.one_of(st.none(), st.floats(min_value=0.5, max_value=1.0)), nodes=st.integers(1, 3),
       ttt_ms=st.floats(min_value=1e3, max_value=1e7))
def test_a_runs_energy_equals_mlperf_loggings_own(tmp_path_factory, watts, gaps, stop, efficiency, nodes, ttt_ms):
    """Any readings, with or without a stop record or a conversion efficiency, on 1-3 nodes and a switch:
    ``run_energy`` equals mlperf-logging's ``_compute_total_power`` over the same folder (its own parser and code)."""
    rs = pytest.importorskip("mlperf_logging.result_summarizer.result_summarizer")
    folder = tmp_path_factory.mktemp("bench")
    times = [START + gaps * (i + 1) for i in range(len(watts))]
    made = [node_file(folder / "power" / "result_0" / f"node_{n}.txt", list(zip(times, watts)), START,
                      times[-1] if stop else None, efficiency) for n in range(nodes)]
    switch = switch_file(folder / "power" / "result_0" / "sw_0.txt", 300.0, 0.95)
    with contextlib.redirect_stdout(io.StringIO()):
        theirs = rs._compute_total_power(str(folder), str(folder / "result_0.txt"), ttt_ms, "5.0.0")
    assert run_energy(made, [switch], ttt_ms)["energy_j"] == pytest.approx(theirs, rel=1e-9)


def run_log(benchmark: str, minutes: float, status: str = "success", eval_value: float = 0.92) -> str:
    stop = START + round(minutes * 60_000)
    return "\n".join([
        mllog("submission_benchmark", START - 10, benchmark), mllog("submission_org", START - 10, "Test"),
        mllog("global_batch_size", START - 5, 8), mllog("run_start", START, event="INTERVAL_START"),
        mllog("eval_accuracy", stop - 1, eval_value, samples_count=1024),
        mllog("run_stop", stop, event="INTERVAL_END", samples_count=1024, status=status)]) + "\n"


def repository(root: Path, benchmark: str, minutes: list[float], power_w: list[float] | None = None,
               scaling: float | None = None, eval_value: float = 0.92, names=None) -> Path:
    folder = root / "Test" / "results" / "sys8" / benchmark
    folder.mkdir(parents=True)
    for n, m in enumerate(minutes):
        name = (names or {}).get(n, f"result_{n}")
        (folder / f"{name}.txt").write_text(run_log(benchmark, m, eval_value=eval_value))
        if power_w is not None:  # a constant draw over the whole run: energy = watts x the run's seconds
            window = round(m * 60_000)
            node_file(folder / "power" / name / "node_0.txt", [(START + window, power_w[n])], START, START + window)
    if scaling is not None:
        (folder / "scaling.json").write_text(json.dumps({"scaling_factor": scaling}))
    (root / "Test" / "systems").mkdir(parents=True)
    (root / "Test" / "systems" / "sys8.json").write_text(json.dumps({
        "accelerator_model_name": "NVIDIA H200-SXM5-141GB", "accelerators_per_node": "4", "number_of_nodes": "2"}))
    return root


def ingest(*args) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["ingest", *map(str, args)])
    return out.getvalue()


def scores(folder: Path):
    return from_results(read_all([str(folder)]))


def test_power_folders_are_the_energy_of_their_runs_not_runs(tmp_path):
    """Ten runs of 30 + n minutes, each drawing (7n mod 10 + 1) kW: run n's energy is that x (30 + n) min. The
    energy score: ordered by the runs' times, the fastest and slowest dropped, the rest averaged, x scaling 1.1;
    in kWh (/ 3.6e6 J) and per accelerator (2 nodes x 4)."""
    minutes = [30.0 + n for n in range(10)]
    watts = [1000.0 * (7 * n % 10 + 1) for n in range(10)]  # not in the times' order: ordering by energy would differ
    repo = repository(tmp_path / "training_results_v5.0", "llama2_70b_lora", minutes, watts, scaling=1.1)
    said = ingest(repo, "--out", tmp_path / "out")
    assert "read 10 MLPerf Power files as the energy of their runs, not as runs" in said
    assert len(read_all([str(tmp_path / "out")])) == 10
    (s,) = scores(tmp_path / "out")
    joules = [w * m * 60 for w, m in zip(watts, minutes)]
    expected = sum(joules[1:9]) / 8 * 1.1
    assert s.energy_j == pytest.approx(expected) and s.energy_kwh == pytest.approx(expected / 3.6e6)
    assert s.energy_kwh_per_device == pytest.approx(expected / 3.6e6 / 8) and s.round == "5.0"
    assert s.minutes == pytest.approx(sum(minutes[1:9]) / 8 * 1.1) and (s.nodes, s.per_node) == (2, 4)
    # per million tokens trained to the target (1,024 samples of LoRA's 8,192 tokens): the median over the runs
    per_run = sorted(j / 3.6e6 / (1024 * 8192 / 1e6) for j in joules)
    assert s.energy_kwh_per_1m_tokens == pytest.approx((per_run[4] + per_run[5]) / 2)
    rs = pytest.importorskip("mlperf_logging.result_summarizer.result_summarizer")
    order = sorted(range(10), key=lambda i: minutes[i])
    assert s.energy_j == pytest.approx(rs._index_olympic_average(joules, order, 0, 1) * 1.1, rel=1e-12)


@pytest.mark.parametrize("round_,benchmark,runs,flag", [
    ("5.0", "llama31_405b", 3, None),
    ("5.1", "llama31_405b", 2, "2 runs of the 3 the rules require: no complete result"),
    ("4.0", "gpt3", 3, None),
])
def test_each_round_scores_by_its_own_rules(tmp_path, round_, benchmark, runs, flag):
    """The round is the repository folder's name; 405B and GPT-3 need 3 runs (mlperf-logging's benchmark_meta), so
    3 runs are scored, their middle one the score."""
    target = {"gpt3": 2.65, "llama31_405b": 5.5, "llama31_8b": 3.2}[benchmark]
    repo = repository(tmp_path / f"training_results_v{round_}", benchmark, [100.0 + n for n in range(runs)],
                      eval_value=target)
    ingest(repo, "--out", tmp_path / "out")
    (s,) = scores(tmp_path / "out")
    assert s.round == round_ and all(r.converged for r in s.runs)
    if flag is None:
        assert s.flags == [] and s.minutes == pytest.approx(101.0)
    else:
        assert flag in s.flags and s.minutes is None


def test_power_readings_that_give_no_energy_say_why(tmp_path):
    """A node file whose measurement starts and stops at one instant (v4.0's 1xSMC-H100 folders, where mlperf-logging
    divides by zero): no energy, and the system's flags say why; its time is scored."""
    repo = repository(tmp_path / "training_results_v4.0", "llama2_70b_lora", [30.0 + n for n in range(10)],
                      [500.0] * 10)
    for node in (repo / "Test" / "results" / "sys8" / "llama2_70b_lora" / "power").glob("*/node_0.txt"):
        node.write_text("\n".join([mllog("power_measurement_start", START), mllog("power_reading", START, 500.0),
                                   mllog("power_measurement_stop", START)]) + "\n")
    ingest(repo, "--out", tmp_path / "out")
    (s,) = scores(tmp_path / "out")
    assert s.energy_j is None and s.minutes == pytest.approx(34.5)
    assert "MLPerf Power: power readings unreadable: node_0.txt: the measured window is 0 ms" in s.flags


def test_a_benchmark_its_round_did_not_have_is_scored_by_the_arithmetic_and_said_so(tmp_path):
    """llama31_8b first ran in v5.1: in a v5.0 folder its olympic mean (101..108 -> 104.5) is given with the flag."""
    repo = repository(tmp_path / "training_results_v5.0", "llama31_8b", [100.0 + n for n in range(10)], eval_value=3.2)
    ingest(repo, "--out", tmp_path / "out")
    (s,) = scores(tmp_path / "out")
    assert s.flags == ["llama31_8b is not an LLM benchmark of MLPerf Training v5.0 in tprimat's table of the rules"]
    assert s.minutes == pytest.approx(104.5)


def test_gpt3s_target_has_a_floor_and_an_unstated_round_takes_the_rules_every_round_shares(tmp_path):
    """GPT-3's eval log perplexity must be at most 2.69 and above 2.6 (compliance_checker's ATLEAST_ONE_CHECK):
    2.5 does not reach it. Without a round, llama2_70b_lora's rules are every round's alike (10 runs, 0.925)."""
    assert rule_of("4.1", "gpt3")[0]["floor"] == 2.6
    repo = repository(tmp_path / "training_results_v4.1", "gpt3", [100.0, 101.0, 102.0], eval_value=2.5)
    ingest(repo, "--out", tmp_path / "out")
    (s,) = scores(tmp_path / "out")
    assert not any(r.converged for r in s.runs) and s.minutes is None
    rule, said = rule_of(None, "llama2_70b_lora")
    assert (rule["runs_required"], rule["target"]) == (10, 0.925) and "alike" in said


def test_the_rules_table_is_mlperf_loggings_own():
    """Every round and LLM benchmark of ``mlperf_rounds.json`` against mlperf-logging's own data: the benchmark is
    allowed in that round (``_ALL_ALLOWED_BENCHMARKS``), its runs are ``_ALL_RESULT_FILE_COUNTS``'s, and its
    target and floor are the numbers of its compliance yaml's ``ATLEAST_ONE_CHECK``; and every LLM benchmark the
    library allows in a round from v3.0 on is in the table."""
    import re

    pytest.importorskip("mlperf_logging")
    import mlperf_logging
    from mlperf_logging import benchmark_meta as meta

    llm = {"gpt3", "llama2_70b_lora", "llama31_405b", "llama31_8b", "gpt_oss_20b", "deepseekv3_671b", "qwen35_397b_grpo"}
    checker = Path(mlperf_logging.__file__).parent / "compliance_checker"
    table = rounds()["rounds"]
    allowed = meta._ALL_ALLOWED_BENCHMARKS["training"]
    for round_, benchmarks in allowed.items():
        if float(round_) >= 3.0:
            assert {b for b in benchmarks if b in llm} == set(table.get(round_, {}).get("benchmarks", {})), round_
    for round_, entry in table.items():
        for name, rule in entry["benchmarks"].items():
            assert name in allowed[round_] and rule["runs_required"] == meta._ALL_RESULT_FILE_COUNTS["training"][name]
            check = re.search(r"ATLEAST_ONE_CHECK: \"(.*)\"", (checker / f"training_{round_}.0" / f"closed_{name}.yaml")
                              .read_text()).group(1)
            if rule.get("higher_is_better"):
                assert check == "v['value'] > s['target_accuracy']" and rule["target"] is None
            else:
                assert check == f"(v['value'] <= {rule['target']}) and v['value'] > {rule['floor']}", (round_, name)


def test_a_round_outside_the_table_is_scored_by_the_shared_rules_and_flagged(tmp_path):
    """v2.9 holds no rules in the table: llama2_70b_lora is scored by the rules every round states alike, said so."""
    repo = repository(tmp_path / "training_results_v2.9", "llama2_70b_lora", [30.0 + n for n in range(10)])
    ingest(repo, "--out", tmp_path / "out")
    (s,) = scores(tmp_path / "out")
    assert s.minutes == pytest.approx(34.5)
    assert any(f.startswith("round v2.9 not in tprimat's table of the rules: scored by the rules of") for f in s.flags)


@pytest.mark.parametrize("edit,converged", [
    ("status aborted, an eval at the target", True),
    ("status success, no eval", False),
    ("the log states a looser target", False),
])
def test_a_run_converges_as_mlperf_loggings_compliance_check_says(tmp_path, edit, converged):
    """mlperf-logging drops a run its compliance check fails and scores the rest: run_stop needs a status key, not
    ``success``; at least one eval must meet the round's target (the log's own target_accuracy is not judged by).
    One run of ten edited (the fastest, 30 min): the score is the olympic mean with it kept or dropped as the
    slowest, by hand (checked against mlperf-logging on a real v5.1 log by the review of 2026-11-28)."""
    minutes = [30.0 + n for n in range(10)]
    repo = repository(tmp_path / "training_results_v5.0", "llama2_70b_lora", minutes)
    log = repo / "Test" / "results" / "sys8" / "llama2_70b_lora" / "result_0.txt"
    lines = log.read_text().splitlines()
    if edit.startswith("status aborted"):
        lines = [line.replace('"status": "success"', '"status": "aborted"') for line in lines]
    elif edit.startswith("status success, no eval"):
        lines = [line for line in lines if '"eval_accuracy"' not in line]
    else:
        lines = [line.replace("0.92,", "0.95,") for line in lines]
        lines.insert(0, mllog("target_accuracy", START - 1, 0.96))
    log.write_text("\n".join(lines) + "\n")
    ingest(repo, "--out", tmp_path / "out")
    (s,) = scores(tmp_path / "out")
    kept = sum(minutes[1:9]) / 8 if converged else sum(minutes[2:10]) / 8
    assert [r.converged for r in s.runs].count(False) == (0 if converged else 1)
    assert s.minutes == pytest.approx(kept)


def test_v40s_run_log_names_and_the_round_flag(tmp_path):
    """v4.0 names its logs result_<job>-<id>_<n>.txt (mlperf-logging globs result_*.txt): each is a run; a folder
    whose name states no round takes --mlperf-round."""
    names = {n: f"result_58{n}-2405172218598253_{n}" for n in range(3)}
    repo = repository(tmp_path / "repo", "gpt3", [100.0, 101.0, 102.0], eval_value=2.65, names=names)
    ingest(repo, "--out", tmp_path / "out", "--mlperf-round", "4.0")
    (s,) = scores(tmp_path / "out")
    assert len(s.runs) == 3 and s.round == "4.0" and s.minutes == pytest.approx(101.0)


def test_a_log_that_closes_only_its_last_block_keeps_every_blocks_steps(tmp_path):
    """Three blocks opened, only the last closed (as NVIDIA's 256-GPU llama31_405b logs of v5.0): each block is a
    step, closed by the next block_start, its time the median of its interval records (2, 3, 4 s -> 3 s; 5, 6 -> 5.5;
    7 -> 7 s), and the run is scored by its run_stop."""
    lines = [mllog("submission_benchmark", START - 10, "llama31_405b"), mllog("global_batch_size", START - 5, 8),
             mllog("run_start", START, event="INTERVAL_START")]
    intervals = [[2.0, 4.0, 3.0], [5.0, 6.0], [7.0]]
    for b, times in enumerate(intervals):
        t = START + 100_000 * b
        lines.append(mllog("block_start", t, event="INTERVAL_START", samples_count=8 * 10 * b))
        lines += [mllog("tracked_stats", t + i + 1, {"train_step_time": x, "reduced_train_loss": 7.0 - b}, step=10 * b + i)
                  for i, x in enumerate(times)]
        lines.append(mllog("eval_accuracy", t + 50_000, 6.0 - b, samples_count=8 * 10 * (b + 1)))
    lines += [mllog("block_stop", START + 290_000, event="INTERVAL_END", samples_count=240),
              mllog("run_stop", START + 300_000, event="INTERVAL_END", status="success")]
    folder = tmp_path / "training_results_v5.0" / "Test" / "results" / "sys8" / "llama31_405b"
    folder.mkdir(parents=True)
    (folder / "result_0.txt").write_text("\n".join(lines) + "\n")
    said = ingest(folder / "result_0.txt", "--out", tmp_path / "out")
    assert "3 steps, status ok" in said
    ((_, result),) = read_all([str(tmp_path / "out")])
    steps = result["steps"]
    rows = steps if isinstance(steps, list) else rows_of(steps)  # as stored: rows, or columns on disk
    assert [r["step_time_s"] for r in rows] == [pytest.approx(3.0), pytest.approx(5.5), pytest.approx(7.0)]
    assert [r["reported"].get("closed_by") for r in rows] == ["the next block_start", "the next block_start", None]


@pytest.mark.parametrize("not_converged", [0, 1])
@settings(max_examples=30, deadline=None, derandomize=True)
@given(pairs=st.lists(st.tuples(st.floats(1, 1e4), st.floats(1, 1e9)), min_size=3, max_size=12, unique_by=lambda p: p[0]))
def test_the_energy_olympic_mean_is_mlperf_loggings(pairs, not_converged):
    """Any (time, energy) runs: the energies ordered by the times and trimmed as the times are equal
    mlperf-logging's ``_index_olympic_average`` (its own code)."""
    rs = pytest.importorskip("mlperf_logging.result_summarizer.result_summarizer")
    minutes, joules = [p[0] for p in pairs], [p[1] for p in pairs]
    order = sorted(range(len(minutes)), key=lambda i: minutes[i])
    assert olympic(joules, not_converged, by=minutes) == pytest.approx(
        rs._index_olympic_average(joules, order, not_converged, 1), rel=1e-12)
