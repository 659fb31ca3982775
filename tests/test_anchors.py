"""The published rows (tprimat/compare/anchors.json) and ``tprimat compare --anchors``.

Oracles: FACTS section 6's FLOPs per token at seq 8192 (Llama-3-8B 51.5 GFLOP causal-halved, 57.9 not), which
reproduce the published TFLOP/s of each row within 2%; the published tokens/s themselves (a ratio is this run's
rate over the number in the file, read back)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from tests.conftest import run_inprocess
from tprimat.compare.anchors import load
from tprimat.compose import compose
from tprimat.spec.build import build_spec
from tprimat.spec.flops import flops_per_token

LLAMA8_GFLOP = {"megatron": 51.5, "megatron_legacy": 57.9}  # FACTS section 6, seq 8192


def test_the_packaged_rows_are_sourced_and_consistent():
    doc = load()
    rows = doc["rows"]
    assert doc["kind"] == "tprimat_anchors" and doc["version"] >= 1 and len(rows) >= 12
    assert len({r["id"] for r in rows}) == len(rows)
    for row in rows:
        assert row["source"] and row["kind"] in ("measured", "floor") and row["tokens_per_s_per_device"] > 0
        model = build_spec(compose([f"model={row['model']}", "dry_run=true"])).model  # a model tprimat knows
        ours = row["tokens_per_s_per_device"] * flops_per_token(model, row["seq_length"], "megatron") / 1e12
        assert row["tflops_per_device_tprimat"] == pytest.approx(ours, abs=0.06)
        if row["tflops_per_device"] and row["flops_convention"] and "consistency" not in row:
            theirs = row["tokens_per_s_per_device"] * flops_per_token(model, row["seq_length"],
                                                                      row["flops_convention"]) / 1e12
            assert theirs == pytest.approx(row["tflops_per_device"], rel=0.02), row["id"]
    bridge = next(r for r in rows if r["id"] == "megatron-bridge-25.11-h100-llama3-8b-fp8")
    assert bridge["tflops_per_device_tprimat"] == pytest.approx(14451 * LLAMA8_GFLOP["megatron"] / 1e3, rel=2e-3)
    nemo = next(r for r in rows if r["id"] == "nemo-24.07-h100-llama3-8b-fp8")  # published in the legacy convention
    assert nemo["tflops_per_device"] == pytest.approx(12036 * LLAMA8_GFLOP["megatron_legacy"] / 1e3, rel=2e-3)
    assert nemo["tflops_per_device_tprimat"] == pytest.approx(12036 * LLAMA8_GFLOP["megatron"] / 1e3, rel=2e-3)


MLLOG = ':::MLLOG {{"namespace": "", "time_ms": {t}, "event_type": "{e}", "key": "{k}", "value": {v}, "metadata": {m}}}'


def mlperf_log(blocks: int = 4, samples: int = 12288, block_ms: int = 400_000, throughput: float = 30.72) -> str:
    """An MLPerf Training v5.1 result log of Llama 3.1 8B on 8 MI355X (the structure of AMD's real ones: submission
    keys, batch and sequence, block_start / tracked_stats throughput in samples/s / block_stop with samples_count),
    written here: 30.72 samples/s x 8,192 tokens / 8 GPUs = 31,457 tokens/s/GPU."""
    t, lines = 1_759_966_206_000, []
    for key, value in (("submission_benchmark", '"llama31_8b"'), ("submission_platform", '"MI355X"'),
                       ("global_batch_size", "32"), ("max_sequence_length", "8192"), ("seed", "1")):
        lines.append(MLLOG.format(t=t, e="POINT_IN_TIME", k=key, v=value, m="{}"))
    lines.append(MLLOG.format(t=t, e="INTERVAL_START", k="run_start", v="null", m="{}"))
    for b in range(blocks):
        lines.append(MLLOG.format(t=t, e="INTERVAL_START", k="block_start", v="null",
                                  m=f'{{"samples_count": {b * samples}}}'))
        t += block_ms
        lines.append(MLLOG.format(t=t, e="POINT_IN_TIME", k="tracked_stats", v=f'{{"throughput": {throughput}}}',
                                  m=f'{{"step": {(b + 1) * samples}}}'))
        lines.append(MLLOG.format(t=t, e="INTERVAL_END", k="block_stop", v="null",
                                  m=f'{{"samples_count": {(b + 1) * samples}}}'))
        t += 10_000
    return "\n".join(lines) + "\n"


def cli(*argv) -> int:
    from tprimat.cli import main

    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit) as code:
        main(list(argv))
    return code.value.code


@pytest.mark.slow
def test_compare_anchors_sets_the_published_rows_beside_each_group(tmp_path):
    """A real CPU run in bf16 and in fp32 and an ingested MLPerf log, compared with --anchors: the MLPerf group has
    the MI355X rows of its model beside it (its ratio to each, the differences named), the CPU groups none; the
    rows appear in comparison.json (marked published, with their source) and in report.md."""
    runs = tmp_path / "results"
    steps = ["training.max_steps=4", "benchmark.warmup_steps=1", "training.optimizer.warmup_steps=1",
             "logging.wandb.mode=disabled", "platform=cpu"]
    for precision in ("bf16", "fp32"):
        assert run_inprocess(runs / precision, [*steps, f"training.precision={precision}"]).status == "ok"
    log = tmp_path / "mlperf_mi355x.log"
    log.write_text(mlperf_log())
    assert cli("ingest", str(log), "--out", str(runs / "mlperf"), "--devices", "8", "--model", "llama",
               "--platform", "amd", "--gpu", "mi355x", "--precision", "fp8") == 0
    out = tmp_path / "report"
    assert cli("compare", str(runs), "--anchors", "--out", str(out)) == 0
    comparison = json.loads((out / "comparison.json").read_text())
    ids = {row["id"] for row in comparison["anchors"]}
    assert {"mlperf-5.1-mi355x-llama31-8b-fp8", "rocm-cvs-mi355x-llama31-8b-fp8-floor"} == ids
    assert all(row["published"] and row["source"] and row["tokens_per_s_per_device"] for row in comparison["anchors"])
    by_model = {g["model"]: g for g in comparison["groups"]}
    assert by_model["llama_tiny"]["anchors"] == []
    mlperf = by_model["llama"]
    rate = mlperf["tokens_per_s_per_device"]
    assert rate == pytest.approx(30.72 * 8192 / 8)
    beside = {row["id"]: row for row in mlperf["anchors"]}
    assert beside["mlperf-5.1-mi355x-llama31-8b-fp8"]["ratio"] == pytest.approx(rate / 31390)
    assert any("acceptance floor" in d for d in beside["rocm-cvs-mi355x-llama31-8b-fp8-floor"]["differences"])
    assert "global batch 32 vs 128" in beside["rocm-cvs-mi355x-llama31-8b-fp8-floor"]["differences"]
    report = (out / "report.md").read_text()
    assert "## Beside the published numbers" in report and "mlperf-5.1-mi355x-llama31-8b-fp8 (measured)" in report


def test_a_flag_raised_by_several_runs_is_one_line_with_its_count():
    from tprimat.compare.flags import counted

    flags = ["not steady: median step time moved -5.5% across run_a", "IMPOSSIBLE: 2,000 TFLOP/s",
             "not steady: median step time moved -24.8% across run_b"]
    assert counted(flags) == ["not steady (2 runs; the first: median step time moved -5.5% across run_a)",
                              "IMPOSSIBLE: 2,000 TFLOP/s"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:  # a stream that says it is a terminal, as a console's stderr does
        return True


def test_progress_shows_on_a_terminal_and_stays_quiet_elsewhere(monkeypatch):
    """A sweep's points through `tprimat plan`: a progress bar on a terminal's stderr, nothing on a pipe."""
    from tprimat.compose import Composer, expand
    from tprimat.sweep.plan import plan_sweep

    points = expand(["platform=cpu", "training.micro_batch_size=1,2,4", "dry_run=true"])
    for stream, shown in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stream)
        planned = plan_sweep(points, Composer().compose)
        assert len(planned) == 3
        assert ("planning" in stream.getvalue()) is shown, stream.getvalue()


@pytest.mark.slow
def test_a_deep_checks_stages_show_inside_a_sweeps_bar(monkeypatch):
    """`tprimat plan --deep` over two points of a 2-stage pipeline: the stages' line joins the points' bar (rich
    allows one live display; a second bar would raise), and the check still measures both stages."""
    from tprimat.compose import Composer, expand
    from tprimat.sweep.plan import plan_sweep

    stream = Terminal()
    monkeypatch.setattr("sys.stderr", stream)
    points = expand(["platform=cpu", "model=llama_tiny", "platform.devices_per_node=2", "parallelism.pp=2",
                     "training.global_batch_size=4,8", "dry_run=true"])
    planned = plan_sweep(points, Composer().compose, deep=True)
    assert [len(p.deep_roles) for p in planned] == [2, 2]
    assert "planning" in stream.getvalue() and "deep check: stage" in stream.getvalue()
