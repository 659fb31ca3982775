"""A tprimat run's own console log (``launch.log``), ingested back, gives the run's own summary: the log
states the spec, each step to the microsecond and which steps were warm-up (``tprimat.logs.tprimat``)."""

import logging

import pytest

from tests.conftest import QUICK, run_inprocess
from tprimat.compose import compose
from tprimat.ingest.build import Meta, ingest_file, ingest_text
from tprimat.logs.parsers import detect, parse_lines
from tprimat.logs.tprimat import WHERE
from tprimat.results.result import read_result

HEADLINE = ("tokens_per_s_per_device", "tflops_per_device")


def same_summary(ingested: dict, run: dict) -> None:
    got, want = ingested["summary"], run["summary"]
    for key in HEADLINE:
        assert got[key] == pytest.approx(want[key], rel=1e-4), key  # step times printed to 1 us
    assert got["peak_memory_gib"] == pytest.approx(want["peak_memory_gib"], abs=5.001e-4)  # printed to 1/1000 GiB
    assert got["step_time_s"]["median"] == pytest.approx(want["step_time_s"]["median"], abs=1e-6)
    assert got["repeats"] == want["repeats"]


@pytest.mark.slow
def test_the_main_jobs_log_ingested_back_gives_its_summary(default_run):
    run_dir, proc = default_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = read_result(run_dir / "result.json")
    ingested = ingest_file(run_dir / "launch.log", Meta(compose, []))
    assert ingested["status"] == "ok" and ingested["source"]["format"] == "tprimat"
    assert ingested["framework"]["name"] == "native" and ingested["spec"]["model"] == run["spec"]["model"]
    assert ingested["plan"]["flops_per_token"] == run["plan"]["flops_per_token"]
    assert ingested["source"]["stated"]["training.seq_length"] == WHERE
    same_summary(ingested, run)
    assert ingested["summary"]["provenance"]["tflops_per_device"] == "computed"
    assert "sk-test-secret" not in (run_dir / "launch.log").read_text()  # the spec line is the redacted spec


def test_repeats_and_their_warm_up_steps_come_back_as_the_run_marked_them(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="tprimat"):
        out = run_inprocess(tmp_path, [*QUICK, "training.max_steps=5", "benchmark.warmup_steps=2",
                                       "benchmark.repeats=2", "benchmark.telemetry=false",
                                       "training.seq_length=64"])
    text = "\n".join(f"[2026-11-24 10:00:00,000][tprimat][INFO] - {r.getMessage()}" for r in caplog.records)
    ingested = ingest_text(text, "run.log", Meta(compose, []))
    key = [(s["repeat"], s["step"], s["warmup"]) for s in ingested["steps"]]
    assert key == [(s["repeat"], s["step"], s["warmup"]) for s in out.result["steps"]]
    assert sum(w for _, _, w in key) == 4  # two warm-up steps in each repeat
    assert ingested["spec"]["benchmark"]["warmup_steps"] == 2
    same_summary(ingested, out.result)


def test_every_log_format_is_a_format_option_of_tprimat_ingest():
    from tprimat.cli import build_parser
    from tprimat.logs.parsers import PARSERS

    for fmt in ("tprimat", *PARSERS, "tensorboard", "wandb"):
        assert build_parser().parse_args(["ingest", "launch.log", "--format", fmt]).format == fmt


def test_figures_the_run_did_not_have_stay_null():
    line = ("repeat 0 step 3/9 | loss n/a | lr 1.000e-04 | grad_norm n/a | step_time 0.250000 s | n/a tokens/s | "
            "memory n/a GiB | peak_memory 2.500 GiB (warm-up)")
    spec = 'spec (world size 4): {"training": {"seq_length": 128, "global_batch_size": 8}, "model": {"name": "x"}}'
    assert detect(spec + "\n" + line) == "tprimat"
    parsed = parse_lines([spec, line], "tprimat")
    (step,) = parsed.steps
    assert (step["loss"], step["grad_norm"], step["memory_gib"]) == (None, None, None)
    assert (step["step"], step["step_time_s"], step["peak_memory_gib"], step["warmup"]) == (3, 0.25, 2.5, True)
    assert parsed.facts["world_size"] == (4, WHERE) and parsed.facts["training.seq_length"] == (128, WHERE)


def test_a_gpt2_runs_log_states_its_architecture_and_its_flops_come_back(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="tprimat"):
        out = run_inprocess(tmp_path, [*QUICK, "model=gpt2_tiny", "benchmark.telemetry=false"])
    ingested = ingest_text("\n".join(r.getMessage() for r in caplog.records), "run.log", Meta(compose, []))
    assert ingested["spec"]["model"]["mlp"] == "gelu" and ingested["spec"]["model"]["vocab_pad_multiple"] == 64
    assert ingested["plan"]["flops_per_token"] == out.result["plan"]["flops_per_token"]
