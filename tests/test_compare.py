"""tprimat compare on results of real CPU runs: statistics, flags, significance, gate, report and plots.

Where a test needs another platform, it derives a result from a real CPU run (steps rescaled, summary
recomputed by the same metrics code as live runs) and says what it stands for.
"""

import copy
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import run_inprocess
from tprimat.compare import stats
from tprimat.compare.groups import build_groups
from tprimat.compare.load import Loaded, load
from tprimat.compare.speedups import speedups
from tprimat.compose import compose
from tprimat.results.metrics import summarize
from tprimat.results.records import StepRecord
from tprimat.results.result import validate_result, write_result

RUN = ["training.max_steps=10", "benchmark.warmup_steps=2", "logging.wandb.mode=disabled", "training.seq_length=64"]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Two repeats of the same spec (this CPU's best precision) and one fp32 identical_config run, all real CPU
    training."""
    root = tmp_path_factory.mktemp("compare")
    a = run_inprocess(root / "a", RUN).result
    b = run_inprocess(root / "b", RUN).result
    c = run_inprocess(root / "c", [*RUN, "methodology=identical_config", "training.precision=fp32"]).result
    return root, a, b, c


DERIVED = itertools.count()


def derived(result, *, time_scale=1.0, platform=None, gpu=None, world_size=None, model=None, edit=None):
    """A copy of a real result standing for another setup (another run: its own run_id): step times scaled, summary
    recomputed."""
    r = copy.deepcopy(result)
    r["run_id"] = f"{result['run_id']}-derived-{next(DERIVED)}"
    if platform:
        r["spec"]["platform"].update(name=platform, gpu=gpu)
    if world_size:
        r["spec"]["platform"]["devices_per_node"] = world_size
        r["plan"].update(world_size=world_size, dp=world_size)
    if model:
        r["spec"]["model"].update(model["spec"])
        r["plan"].update(model["plan"])
    for s in r["steps"]:
        s["step_time_s"] *= time_scale
    if edit:
        edit(r)
    records = [StepRecord(**s) for s in r["steps"]]
    r["summary"] = summarize(records, r["plan"]["world_size"], r["plan"]["flops_per_token"], r["plan"]["peak_tflops"])
    assert validate_result(r) == []
    return r


def groups_of(*results, aggregate="median"):
    from pathlib import Path

    return build_groups([Loaded(Path(f"r{i}/result.json"), r) for i, r in enumerate(results)], aggregate)


@pytest.mark.slow
def test_repeats_of_one_spec_merge_into_one_group(real):
    root, a, b, c = real
    groups = build_groups(load([str(root)]).results)
    assert len(groups) == 2
    merged = next(g for g in groups if g.spec["methodology"]["name"] == "maximum_performance")
    assert merged.metrics["runs"] == 2 and merged.metrics["measured_steps"] == 16
    rates = [a["summary"]["tokens_per_s"], b["summary"]["tokens_per_s"]]
    assert merged.metrics["tokens_per_s"] == pytest.approx(np.median(rates))


@pytest.mark.slow
def test_warmup_never_enters_the_numbers(real):
    _, a, _, _ = real
    slow_warmup = derived(a, edit=lambda r: [s.update(step_time_s=s["step_time_s"] * 100)
                                             for s in r["steps"] if s["warmup"]])
    g_plain, g_slow = groups_of(a), groups_of(slow_warmup)
    assert g_slow[0].metrics["tokens_per_s"] == pytest.approx(g_plain[0].metrics["tokens_per_s"])


@pytest.mark.slow
def test_impossible_published_claim_is_flagged(real):
    """~72,500 tokens/s/GPU for Llama 3.1 8B on MI300X (~3.7 PFLOP/s per GPU) cannot be real."""
    _, a, _, _ = real
    llama8b = {"spec": {"name": "llama", "num_layers": 32, "hidden_size": 4096, "vocab_size": 128256},
               "plan": {"flops_per_token": 51.47e9, "peak_tflops": 1307.4}}
    per_step_tokens = a["steps"][0]["tokens"]
    claim = derived(a, platform="amd", gpu="mi300x", world_size=8, model=llama8b,
                    edit=lambda r: [s.update(step_time_s=per_step_tokens / (72_500 * 8)) for s in r["steps"]])
    group = groups_of(claim)[0]
    assert group.metrics["tokens_per_s_per_device"] == pytest.approx(72_500)
    assert any(f.startswith("IMPOSSIBLE") and "MI300X" in f for f in group.flags)
    plausible = derived(claim, time_scale=10)  # 7,250 tokens/s/GPU: ~373 TFLOP/s, under the peak
    assert not any(f.startswith("IMPOSSIBLE") for f in groups_of(plausible)[0].flags)


@pytest.mark.slow
def test_compare_tests_groups_of_real_repeats_with_welch_and_states_what_they_can_show(real):
    """Two real CPU runs as one group's repeats, the same runs 4x faster (time scaled) as another's and unchanged
    as a third's: compare applies Welch's t on log rates (tests/test_verdicts.py holds its error rates against
    simulation), its interval holds the exact 4x, a verdict follows the interval, the unchanged copy is not
    significant and says what its repeats could show; one repeat a side gets no verdict."""
    _, a, b, _ = real
    fast = [derived(r, time_scale=0.25, platform="nvidia", gpu="h100") for r in (a, b)]
    same = [derived(r, platform="amd", gpu="mi300x") for r in (a, b)]
    found = {s.other.device if s.baseline.device == "cpu" else s.baseline.device: s
             for s in speedups(groups_of(a, b, *fast, *same)) if "cpu" in (s.baseline.device, s.other.device)}
    faster = found["h100"]
    assert faster.interval == "between repeats" and faster.as_dict()["method"] == stats.WELCH
    inverted = faster.other.device != "h100"
    point, lo, hi = (1 / faster.point, 1 / faster.hi, 1 / faster.lo) if inverted else (faster.point, faster.lo,
                                                                                        faster.hi)
    assert point == pytest.approx(4.0, rel=1e-6) and lo <= 4.0 <= hi
    assert faster.significant == (not lo <= 1.0 <= hi)
    level = found["mi300x"]
    assert level.point == pytest.approx(1.0) and level.significant is False
    assert "not significant" in level.wording() and "repeats can show a speedup of" in level.wording()
    # One repeat per side: a within-run interval and no verdict either way.
    [single] = speedups(groups_of(a, fast[0]))
    assert single.interval == "within-run" and single.significant is None and "no significance verdict" in single.wording()
    assert single.lo <= single.point <= single.hi


@pytest.mark.slow
def test_identical_config_runs_with_different_settings_are_refused(real):
    _, _, _, c = real
    hidden_lr = derived(c, platform="amd", gpu="mi300x",
                        edit=lambda r: r["spec"]["training"]["optimizer"].update(lr=1e-5))
    [s] = speedups(groups_of(c, hidden_lr))
    assert s.refused and "training.optimizer.lr" in s.refused and "refused" in s.wording()
    same = derived(c, platform="amd", gpu="mi300x")
    [ok] = speedups(groups_of(c, same))
    assert ok.refused is None


@pytest.mark.slow
def test_failed_audit_is_refused(real):
    _, _, _, c = real
    audited = derived(c, platform="amd", gpu="mi300x", edit=lambda r: r.update(audit={"passed": False, "checks": []}))
    [s] = speedups(groups_of(c, audited))
    assert "audit failed" in s.refused


@pytest.mark.slow
def test_cost_energy_and_time_to_train(real):
    _, a, _, _ = real
    h100 = derived(a, platform="nvidia", gpu="h100", world_size=8)
    m = groups_of(h100)[0].metrics
    assert m["usd_per_1t_tokens"] == pytest.approx(2.99 * 8 / 3600 / m["tokens_per_s"] * 1e12)
    assert m["energy_j_per_token"] == pytest.approx(700 * 8 / m["tokens_per_s"])
    assert m["energy_is_estimate"] and "TDP" in m["energy_source"]
    assert m["days_to_train_15t"] == pytest.approx(15 * m["days_to_train_1t"])
    cpu = groups_of(a)[0].metrics
    assert cpu["usd_per_1t_tokens"] is None and cpu["energy_j_per_token"] is None
    every_device = {"energy_per_token_j": 0.5, "devices_sampled": 8, "ranks_covered": 8}
    measured = derived(h100, edit=lambda r: r.update(telemetry=every_device) or None)
    assert groups_of(measured)[0].metrics["energy_source"] == "measured (telemetry)"
    assert groups_of(measured)[0].metrics["energy_j_per_token"] == 0.5
    # written before every device was sampled: device 0's energy over 8 devices' tokens is not a measurement
    device_zero = derived(h100, edit=lambda r: r.update(telemetry={"energy_per_token_j": 0.5}) or None)
    assert groups_of(device_zero)[0].metrics["energy_source"].startswith("estimate: TDP")


# Statistics against known distributions.

def test_olympic_mean_and_aggregates():
    assert stats.olympic_mean([1, 2, 3, 100]) == 2.5
    assert stats.aggregate([1, 2, 3, 100], "median") == 2.5 and stats.aggregate([1, 3], "mean") == 2
    with pytest.raises(ValueError, match="--aggregate"):
        stats.aggregate([1.0], "max")


def test_bootstrap_interval_covers_the_true_rate():
    rng = np.random.default_rng(1)
    shape, scale, tokens = 20.0, 0.05, 1000.0  # step times ~ Gamma(20, 0.05): mean 1.0 s
    truth = tokens / (shape * scale)
    hits = 0
    for trial in range(200):
        times = rng.gamma(shape, scale, size=40)
        lo, hi = stats.bootstrap_ci([tokens] * 40, times, n_boot=1000, seed=trial)
        hits += lo <= truth <= hi
    assert 0.88 <= hits / 200 <= 0.99


def test_block_sums_are_the_sums_of_the_moving_block_resamples():
    """Each resample: ceil(n / b) blocks of b consecutive steps (b about n^(1/3)) at the generator's random starts,
    cut to n steps; its sums come from cumulative sums, equal to summing the resampled steps themselves."""
    for n in [0, 1, 2, 3, 7, 8, 9, 26, 27, 28, 64, 65, 300]:
        rng = np.random.default_rng(n)
        x, y = rng.random(n) * 1000, rng.random(n) + 0.5
        got = stats.resampled_sums((x, y), np.random.default_rng(7), 50)
        b = max(1, round(n ** (1 / 3)))
        starts = np.random.default_rng(7).integers(0, n - b + 1, size=(50, -(-n // b))) if n else np.zeros((50, 0), int)
        for column, sums in zip((x, y), got):
            by_hand = [sum(column[s + k] for s in row for k in range(b))
                       - sum(column[row[-1] + k] for k in range(n - (len(row) - 1) * b, b)) if n else 0.0
                       for row in starts]
            assert np.allclose(sums, by_hand, rtol=1e-12, atol=1e-9)


def test_ratio_interval_separates_real_differences_only():
    rng = np.random.default_rng(2)
    base = ([1000.0] * 40, rng.normal(1.0, 0.05, 40))
    same = ([1000.0] * 40, rng.normal(1.0, 0.05, 40))
    faster = ([1000.0] * 40, rng.normal(0.8, 0.04, 40))
    _, lo, hi = stats.ratio_ci(base, same)
    assert not stats.significant(lo, hi)
    point, lo, hi = stats.ratio_ci(base, faster)
    assert stats.significant(lo, hi) and lo > 1.15 and point == pytest.approx(1.25, rel=0.05)


@pytest.mark.slow
def test_steady_state_check_flags_a_drifting_window(real):
    _, a, _, _ = real
    assert stats.drift([1.0] * 10) == 0
    assert stats.drift([1.0, 1.0, 1.0, 1.0, 1.3, 1.3, 1.3, 1.3]) == pytest.approx(0.3)
    drifting = derived(a, edit=lambda r: [s.update(step_time_s=0.1 * (1 + i * 0.2)) for i, s in enumerate(r["steps"])])
    assert any("not steady" in f for f in groups_of(drifting)[0].flags)


# The command: console, report, plots, CSV, regression gate.

def compare(*args):
    return subprocess.run([sys.executable, "-m", "tprimat", "compare", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_compare_writes_report_plots_and_tables(real, tmp_path):
    root, a, _, c = real
    write_result(derived(a, time_scale=0.5, platform="nvidia", gpu="h100"), root / "h100")
    out = tmp_path / "report"
    proc = compare(root, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "tokens/s/device" in proc.stdout.replace("\n", "") or "tokens/s/dev" in proc.stdout
    assert "platform speedup" in proc.stdout
    report = (out / "report.md").read_text()
    for section in ("## Summary", "## Hardware and software", "## Configuration", "## Performance",
                    "## Memory and efficiency", "## Cost, energy and time to train", "## Methodology"):
        assert section in report
    assert "ESTIMATE" in report  # the H100 energy is a TDP estimate and says so
    import matplotlib.image as mpimg

    pngs = sorted((out / "plots").glob("*.png"))
    # no mfu chart: no group has an MFU (a CPU has no spec-sheet peak; the H100 copy keeps the CPU run's null)
    assert all(g["mfu"] is None for g in json.loads((out / "comparison.json").read_text())["groups"])
    assert {p.stem for p in pngs} == {"throughput", "step_time", "memory", "loss_lr", "cost", "energy"}
    for png in pngs:
        pixels = mpimg.imread(png)
        assert png.stat().st_size > 5000 and pixels.std() > 0.01, png
    rows = (out / "table.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 and "tokens_per_s_per_device" in rows[0]
    summary = json.loads((out / "comparison.json").read_text())
    # the H100 copy differs from a only in platform; c differs from a in methodology, and in precision too
    # where this CPU's best precision is bf16 (two axes: no single-axis pair)
    same_precision = a["spec"]["training"]["precision"] == c["spec"]["training"]["precision"]
    assert {s["kind"] for s in summary["speedups"]} == {"platform"} | ({"methodology"} if same_precision else set())
    (root / "h100" / "result.json").unlink()


@pytest.mark.slow
def test_filters(real):
    root, *_ = real
    proc = compare(root, "--methodology", "identical_config")
    assert proc.returncode == 0 and "maximum_performance" not in proc.stdout
    assert compare(root, "--platform", "amd").returncode == 1  # nothing left: says so, exits 1


@pytest.mark.slow
def test_regression_gate_exit_code_names_the_group(real, tmp_path):
    root, a, _, _ = real
    baseline, current = tmp_path / "baseline", tmp_path / "current"
    write_result(a, baseline)
    write_result(derived(a, time_scale=1.25), current)  # 20% slower
    proc = compare(current, "--baseline", baseline, "--fail-below", "0.95")
    assert proc.returncode == 3
    assert "REGRESSION: llama_tiny | native | cpu x1" in proc.stdout and "0.800 x baseline" in proc.stdout
    assert compare(current, "--baseline", baseline, "--fail-below", "0.7").returncode == 0


@pytest.mark.slow
def test_preflight_measures_and_compare_uses_the_ceiling(real, tmp_path):
    root, *_ = real
    pf = tmp_path / "preflight.json"
    proc = subprocess.run([sys.executable, "-m", "tprimat", "preflight", "--ranks", "2", "--sizes", "256,512",
                           "--allreduce-mib", "1", "--iters", "3", "--out", str(pf)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(pf.read_text())
    assert record["kind"] == "tprimat_preflight" and record["matmul_tflops"]["bf16"] > 0
    assert record["allreduce"]["ranks"] == 2 and record["allreduce"]["max_busbw_gbps"] > 0
    groups = build_groups(load([str(root)]).results, ceilings=__import__(
        "tprimat.compare.groups", fromlist=["ceilings_from"]).ceilings_from([record]))
    for g in groups:
        assert g.metrics["mfu"] is None  # no spec peak for a CPU
        assert g.metrics["mfu_vs_measured"] == pytest.approx(
            g.metrics["tflops_per_device"] / record["matmul_tflops"][g.precision])


@pytest.mark.slow
def test_report_tables_keep_their_columns(real, tmp_path):
    root, *_ = real
    assert compare(root, "--out", tmp_path).returncode == 0
    for line in (tmp_path / "report.md").read_text().splitlines():
        if line.startswith("| ") and "---" not in line:
            cells = [c for c in __import__("re").split(r"(?<!\\)\|", line)[1:-1]]
            assert len(cells) in (6, 8, 10, 19), line  # the column counts of the report's tables


@pytest.mark.slow
def test_parquet_table_matches_csv(real, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    root, *_ = real
    assert compare(root, "--out", tmp_path).returncode == 0
    table = pq.read_table(tmp_path / "table.parquet").to_pylist()
    rows = (tmp_path / "table.csv").read_text().splitlines()
    assert len(table) == len(rows) - 1 >= 2 and all(row["tokens_per_s_per_device"] > 0 for row in table)


@pytest.mark.slow
def test_results_of_different_schema_versions_are_not_compared(real):
    _, a, _, _ = real
    future = copy.deepcopy(derived(a, platform="nvidia", gpu="h100"))
    future["schema_version"] = "3.0"
    [s] = speedups(groups_of(a, future))
    assert s.refused and "schema versions differ (2.0 vs 3.0)" in s.refused
    before_provenance = {**future, "schema_version": "1.0"}  # ingested figures could be defaults then
    [s] = speedups(groups_of(a, before_provenance))
    assert s.refused and "schema versions differ (2.0 vs 1.0)" in s.refused
    columns_only = {**future, "schema_version": "1.1"}  # 2.0 changed how steps are stored, not what they mean
    [s] = speedups(groups_of(a, columns_only))
    assert s.refused is None and s.point > 0


@pytest.mark.slow
def test_compare_reads_ingested_real_logs(tmp_path):
    """Results ingested from real Primus runs (Llama 3.1 8B, 8 AMD GPUs) group and compare like live ones."""
    from tests.conftest import ROOT
    from tprimat.ingest.build import Meta, ingest_file

    log = ROOT.parent / "shared" / "logs" / "primus_3.log"
    if not log.exists():
        pytest.skip("corpus not present")
    meta = Meta(compose, ["model=llama", "platform=amd", "platform.gpu=mi300x", "platform.devices_per_node=8",
                 "training.seq_length=8192", "training.global_batch_size=128", "training.micro_batch_size=2"],
                warmup_steps=2)
    write_result(ingest_file(log, meta), tmp_path / "primus_3")
    [group] = build_groups(load([str(tmp_path)]).results)
    m = group.metrics
    assert m["measured_steps"] == 48 and m["tokens_per_s_per_device"] > 0
    assert m["tflops_per_device"] < 1307.4 and not any(f.startswith("IMPOSSIBLE") for f in group.flags)
    summary = group.first["summary"]
    assert summary["reported_tflops_per_device"] > 0 and summary["reported_flops_convention"]
    assert m["usd_per_1t_tokens"] is not None and m["energy_is_estimate"]
    assert compare(tmp_path, "--out", tmp_path / "report").returncode == 0


@pytest.mark.slow
def test_the_baseline_is_matched_by_spec_identity_not_by_label(real, tmp_path):
    """A run at half the sequence length prints the baseline's label; it is not that workload, and with nothing
    else to judge compare says so and exits with the regression code."""
    root, a, _, _ = real
    baseline, current = tmp_path / "baseline", tmp_path / "current"
    write_result(a, baseline)
    half = derived(a, edit=lambda r: r["spec"]["training"].update(seq_length=r["spec"]["training"]["seq_length"] // 2))
    write_result(half, current)
    proc = compare(current, "--baseline", baseline, "--fail-below", "0.95")
    assert proc.returncode == 3 and "gate ok" not in proc.stdout, proc.stdout
    assert "no baseline result with the spec identity" in proc.stdout and "nothing to judge" in proc.stdout
