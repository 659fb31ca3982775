"""compare over MLPerf results as MLPerf compares them: one group per system and benchmark (its ten runs differ only
in the seed), the time-to-train table with what the logs and systems JSONs state ("not stated" for the rest), the
cost to train at a price the user states, accelerators side by side at equal device counts, a report that grows
with the systems and not with pairs of runs, and MLPerf's own verdict on a run (run_stop's status) over a
traceback its log prints. Fixtures in the repository's layout, written here; expected values by hand."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from tprimat.cli import main
from tprimat.compare.groups import build_groups
from tprimat.compare.load import load

pytestmark = pytest.mark.slow  # compare --out draws every plot of the report
START = 1_700_000_000_000
GBS = 32
SAMPLES_PER_S = {"H100": 16.0, "MI300X": 12.0}  # the whole system's samples/s in every block


def mllog(key: str, time_ms: int, value=None, **metadata) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME", "key": key,
                                     "value": value, "metadata": {"file": "train.py", "lineno": 1, **metadata}})


def run_log(benchmark: str, minutes: float, samples_per_s: float, seed: int, traceback: bool = False,
            spread: float = 0.0) -> str:
    """One run: submission keys, its seed, four throughput blocks of 1,536 samples (AMD's tracked_stats) whose rate
    falls by a quarter from the first to the last (drift that flags a window of like steps as not steady), an eval
    at the target after 6,144 samples, run_stop success; optionally a Python traceback printed along the way."""
    stop = START + round(minutes * 60_000)
    lines = [mllog("submission_benchmark", START - 10, benchmark), mllog("submission_org", START - 10, "Test"),
             mllog("submission_platform", START - 10, "8xTEST"), mllog("global_batch_size", START - 5, GBS),
             mllog("seed", START - 5, seed), mllog("run_start", START)]
    if traceback:
        lines += ["Traceback (most recent call last):", "ImportError: cannot import name 'quick_gelu'"]
    samples_per_s *= 1 + spread * (seed % 2)  # seeds of one system at rates apart by ``spread``
    for block in range(4):
        t = START + 1000 * (block + 1)
        lines += [mllog("block_start", t, samples_count=1536 * block),
                  mllog("tracked_stats", t + 500, {"throughput": samples_per_s * (1 - block / 12)},
                        step=1536 * (block + 1)),
                  mllog("block_stop", t + 900, samples_count=1536 * (block + 1))]
    target = 3.29 if benchmark == "llama31_8b" else 0.92
    lines += [mllog("eval_accuracy", stop - 1, target, samples_count=6144),
              mllog("run_stop", stop, samples_count=6144, status="success")]
    return "\n".join(lines) + "\n"


def repository(root: Path, benchmark: str = "llama31_8b", traceback: bool = False, tag: str = "",
               sw_notes: str = "", spread: float = 0.0) -> Path:
    """Two 8-GPU systems, ten runs each (seeds 1-10): H100 runs take 30 + n/10 minutes, MI300X 40 + n/10."""
    for submitter, gpu, name, base in ((f"Nv{tag}", "H100", "NVIDIA H100-SXM5-80GB", 30.0),
                                       (f"Amd{tag}", "MI300X", "AMD Instinct MI300X 192GB HBM3", 40.0)):
        folder = root / submitter / "results" / f"sys_{gpu}" / benchmark
        folder.mkdir(parents=True)
        for n in range(10):
            (folder / f"result_{n}.txt").write_text(run_log(benchmark, base + n / 10, SAMPLES_PER_S[gpu], n + 1,
                                                            traceback, spread))
        (root / submitter / "systems").mkdir(parents=True)
        (root / submitter / "systems" / f"sys_{gpu}.json").write_text(json.dumps({
            "accelerator_model_name": name, "accelerators_per_node": "8", "number_of_nodes": "1",
            "framework": f"{submitter}Stack 1.0", "sw_notes": sw_notes if gpu == "MI300X" else ""}))
    return root


def tprimat(*args) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as code:
        main([*map(str, args)])
    assert code.value.code == 0, out.getvalue()[-2000:]
    return out.getvalue()


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("mlperf")
    tprimat("ingest", repository(tmp / "repo", traceback=True, sw_notes="FP8 Training"), "--out", tmp / "results")
    said = tprimat("compare", tmp / "results", "--out", tmp / "report", "--by", "platform.gpu",
                   "--price", "h100=2.5", "--price", "mi300x=2")
    return tmp, said


def test_a_systems_ten_runs_are_one_group_named_by_its_system(compared):
    tmp, _ = compared
    groups = build_groups(load([str(tmp / "results")]).results)
    assert len(groups) == 2 and sorted(len(g.runs) for g in groups) == [10, 10]
    assert {g.label.rsplit(" | ", 1)[-1] for g in groups} == {"Nv/sys_H100/llama31_8b", "Amd/sys_MI300X/llama31_8b"}
    assert not any("not steady" in flag for g in groups for flag in g.flags)


def test_the_time_to_train_table_states_what_the_logs_state_and_the_cost_at_the_users_price(compared):
    """H100: runs 30.0-30.9 min, the olympic mean of 30.1..30.8 = 30.45 min; 8 devices: 4.06 GPU-hours; at 2.5 USD
    per device-hour 10.15 USD. The precision: stated by no log or systems JSON."""
    tmp, said = compared
    rows = {r["system"]: r for r in json.loads((tmp / "report" / "comparison.json").read_text())["time_to_train"]}
    h100 = rows["sys_H100"]
    assert h100["score_minutes"] == pytest.approx(30.45) and h100["gpu_hours"] == pytest.approx(30.45 * 8 / 60)
    assert h100["cost_to_train_usd"] == pytest.approx(30.45 * 8 / 60 * 2.5)
    assert h100["price_source"] == "compare --price h100=2.5" and h100["framework"] == "NvStack 1.0"
    assert h100["global_batch_size"] == GBS and h100["precision"] is None and h100["gpu"] == "h100"
    assert rows["sys_MI300X"]["precision"] == "fp8 (systems JSON sw_notes: 'FP8 Training')"  # AMD's JSONs say so
    assert {r["target_source"] for r in h100["run_details"]} == {"MLPerf Training rules' quality target"}
    assert h100["samples_to_target"] == 6144
    assert rows["sys_MI300X"]["cost_to_train_usd"] == pytest.approx(40.45 * 8 / 60 * 2)
    md = (tmp / "report" / "report.md").read_text()
    table = [line for line in md.splitlines() if "| llama31_8b | Nv | sys_H100 |" in line][0]
    assert "| not stated |" in table  # the precision no log or systems JSON states
    assert "| NVIDIA H100 SXM (as submitted: NVIDIA H100-SXM5-80GB) | 1 x 8 | 30.45 |" in table


def test_accelerators_side_by_side_at_equal_device_counts_fastest_first(compared):
    tmp, said = compared
    md = (tmp / "report" / "report.md").read_text()
    assert "| not stated | llama31_8b | 8 | NVIDIA H100 SXM | Nv sys_H100 | 1 x 8 | 30.45 | 1.00 |" in md
    assert f"| not stated | llama31_8b | 8 | AMD Instinct MI300X | Amd sys_MI300X | 1 x 8 | 40.45 | {40.45 / 30.45:.2f} |" in md
    console = said.split("accelerators side by side at equal device counts")[1].splitlines()
    assert [line.split()[-2:] for line in console[2:4]] == [["30.45", "1.00"], ["40.45", f"{40.45 / 30.45:.2f}"]]
    assert (tmp / "report" / "plots" / "time_to_train.png").stat().st_size > 0
    page = (tmp / "report" / "report.html").read_text()
    assert "chart-time-to-train" in page and "Accelerators side by side at equal device counts" in page


def test_a_traceback_in_a_run_that_stopped_with_success_is_kept_not_its_verdict(compared):
    tmp, _ = compared
    results = [json.loads(p.read_text()) for p in (tmp / "results").rglob("result.json")]
    assert len(results) == 20 and {r["status"] for r in results} == {"ok"}
    assert {r["source"]["traceback_in_log"] for r in results} == {"Traceback (most recent call last):"}


def test_llama2_70b_lora_throughput_counts_its_8192_token_sequences(tmp_path):
    """No sequence length in a LoRA log: the benchmark's 8,192 tokens per sample, said so. The four blocks (each one
    step of the 32-sample batch at the block's rate; MLPerf's blocks have no warm-up) at 16 x (12, 11, 10, 9) / 12
    samples/s: 32 x 4 samples over the sum of their step times, x 8,192 tokens / 8 devices, by hand."""
    tprimat("ingest", repository(tmp_path / "repo", "llama2_70b_lora"), "--out", tmp_path / "results")
    h100 = [json.loads(p.read_text()) for p in (tmp_path / "results" / "Nv").rglob("result.json")]
    rates = [16 * (1 - b / 12) for b in (0, 1, 2, 3)]
    expected = 4 * 32 / sum(32 / r for r in rates) * 8192 / 8
    assert [r["summary"]["tokens_per_s_per_device"] for r in h100] == [pytest.approx(expected)] * 10
    assert {r["spec"]["training"]["seq_length"] for r in h100} == {8192}


def test_refused_pairs_grow_the_report_by_reason_not_by_pair(tmp_path):
    """Twelve systems that state no model (LoRA logs), six H100 and six MI300X: 36 pairs differ in the device alone,
    each refused for the model; report.md lists five and counts the rest, comparison.json carries five and the count."""
    for k in range(6):
        repository(tmp_path / f"repo{k}", "llama2_70b_lora", tag=str(k))
        tprimat("ingest", tmp_path / f"repo{k}", "--out", tmp_path / "results" / str(k))
    tprimat("compare", tmp_path / "results", "--out", tmp_path / "report")
    comparison = json.loads((tmp_path / "report" / "comparison.json").read_text())
    refused = {r["reason"]: r["count"] for r in comparison["refused_pairs"]}
    md = (tmp_path / "report" / "report.md").read_text()
    assert refused == {"model": 36}
    assert len([s for s in comparison["speedups"] if s["refused"]]) == 5 * len(refused)
    assert md.count("more pairs refused for the same reason") == len(refused)
    assert md.index("## Methodology") < md.index("## Refused pairs")  # summed up at the end, after the tables


def test_a_price_stated_at_ingest_a_logged_target_filters_and_a_repository_with_no_throughput(tmp_path):
    """A price set at ingest (platform.price_per_device_hour_usd) gives the cost to train with no --price; a target
    the log states (target_accuracy) is kept beside the rules' and not judged by, said so; compare's --platform
    filter applies to the time to train; and runs with no throughput blocks (no ok result to compare) still get
    their score, exit 0."""
    repo = repository(tmp_path / "repo")
    for log in (repo / "Nv" / "results" / "sys_H100" / "llama31_8b").glob("result_*.txt"):
        log.write_text(log.read_text().replace(mllog("run_start", START), mllog("target_accuracy", START - 1, 3.2)
                                                + "\n" + mllog("run_start", START)))
    tprimat("ingest", repo / "Nv", "--out", tmp_path / "nv", "--set", "platform.price_per_device_hour_usd=3.0")
    tprimat("ingest", repo / "Amd", "--out", tmp_path / "amd")
    tprimat("compare", tmp_path / "nv", tmp_path / "amd", "--out", tmp_path / "report", "--platform", "amd")
    rows = json.loads((tmp_path / "report" / "comparison.json").read_text())["time_to_train"]
    assert [r["system"] for r in rows] == ["sys_MI300X"]  # --platform amd: the H100 system is filtered out
    tprimat("compare", tmp_path / "nv", "--out", tmp_path / "nv_report")
    (h100,) = json.loads((tmp_path / "nv_report" / "comparison.json").read_text())["time_to_train"]
    # the log's own target 3.2 is kept beside the rules' 3.3, not judged by (as mlperf-logging's compliance check):
    # the eval at 3.29 meets 3.3, every run converged
    assert {r["target_source"] for r in h100["run_details"]} == {
        "MLPerf Training rules' quality target (the log states 3.2, not judged by)"}
    assert h100["score_minutes"] == pytest.approx(30.45) and h100["converged"] == 10
    assert h100["price_per_device_hour_usd"] == 3.0 and "platform.price_per_device_hour_usd" in h100["price_source"]
    for log in (repo / "Amd" / "results" / "sys_MI300X" / "llama31_8b").glob("result_*.txt"):
        log.write_text("\n".join(line for line in log.read_text().splitlines() if "block_" not in line
                                 and "tracked_stats" not in line) + "\n")
    tprimat("ingest", repo / "Amd", "--out", tmp_path / "no_blocks")
    said = tprimat("compare", tmp_path / "no_blocks", "--out", tmp_path / "no_blocks_report")
    assert "Amd sys_MI300X" in said and " 40.45 " in said
    assert json.loads((tmp_path / "no_blocks_report" / "comparison.json").read_text())["time_to_train"][0][
        "score_minutes"] == pytest.approx(40.45)


def test_a_report_with_mlperf_results_leads_with_the_answer(compared):
    """report.md opens with the time-to-train table, fastest first, then the accelerators side by side; the refused
    pairs come after the methodology; a system's ten runs are one result (its seeds): never flagged as inconsistent
    repeats, its rows named by submitter and system; report.html opens with the same section, plotly.js beside it
    once, the page under 1 MB; the console's lines fit 120 columns."""
    tmp, said = compared
    md = (tmp / "report" / "report.md").read_text()
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Time to train (MLPerf Training rules)" and headings[1] == "## Summary"
    rows = [line for line in md.split("## Time to train")[1].split("###")[0].splitlines() if "| llama31_8b |" in line]
    assert [r.split(" | ")[3] for r in rows] == ["sys_H100", "sys_MI300X"]  # 30.45 before 40.45
    assert "more logs" not in md
    assert "Nv sys_H100 (10 runs)" in (tmp / "report" / "table.csv").read_text()
    page = (tmp / "report" / "report.html").read_text()
    assert page.index("Time to train (MLPerf Training rules)") < page.index("<h2>Summary</h2>")
    assert page.count('src="plotly.min.js"') == 1 and (tmp / "report" / "plotly.min.js").stat().st_size > 1_000_000
    assert (tmp / "report" / "report.html").stat().st_size < 1_000_000
    assert max(map(len, said.splitlines())) <= 120


def test_two_spellings_of_one_accelerator_are_one_row(tmp_path):
    """MI325X as AMD spells it in one systems JSON and another in the next (v5.1: "... HBM3E" and "... HBM3E DLC"):
    one accelerator side by side and one legend entry, each row keeping its submitted name."""
    from tprimat.compare.time_to_train import from_results, read_all
    from tprimat.compare.ttt_report import by_accelerator, side_by_side_lines

    for tag, name in (("a", "AMD Instinct MI325X 256GB HBM3E"), ("b", "AMD Instinct MI325X 256GB HBM3E DLC")):
        root = repository(tmp_path / tag, tag=tag)
        (root / f"Amd{tag}" / "systems" / "sys_MI300X.json").write_text(json.dumps({
            "accelerator_model_name": name, "accelerators_per_node": "8", "number_of_nodes": "1"}))
        tprimat("ingest", root / f"Amd{tag}", "--out", tmp_path / "results" / tag)
    scores = from_results(read_all([str(tmp_path / "results")]))
    assert {s.accelerator_row for s in scores} == {"AMD Instinct MI325X"}
    assert len(by_accelerator(scores)) == 1
    (row,) = side_by_side_lines(scores)[2:]
    assert "| AMD Instinct MI325X |" in row


def test_a_systems_seeds_at_different_rates_are_one_result_never_inconsistent_repeats(tmp_path):
    """LoRA seeds (8,192-token samples: a rate per device) alternating at one and two times a rate: an MLPerf
    system's runs are seeds of one result, not flagged. The same group with its MLPerf place taken away is judged as
    repeats of one measurement, and flagged (their rates 2x apart): the check is live, the exemption keeps it off."""
    from tprimat.compare.flags import check_repeats

    tprimat("ingest", repository(tmp_path / "repo", "llama2_70b_lora", spread=1.0), "--out", tmp_path / "results")
    groups = build_groups(load([str(tmp_path / "results")]).results)
    assert len(groups) == 2 and not any("inconsistent repeats" in f for g in groups for f in g.flags)
    group = groups[0]
    for run in group.runs:
        run.result["source"].pop("mlperf")
    check_repeats(group)
    assert any(f.startswith("inconsistent repeats") for f in group.flags)
