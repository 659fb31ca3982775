"""Ingestion: the real-log corpus (../shared/logs, skipped when absent), the project's own fixtures for each
format and trap, TensorBoard and W&B sources, and a property test: parsers never raise."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tprimat.compose import compose
from tprimat.ingest.build import Meta, ingest_file, ingest_text
from tprimat.logs.parsers import parse_text
from tprimat.results.result import read_result, validate_result

CORPUS = ROOT.parent / "shared" / "logs"
CORPUS_LOGS = [pytest.param(p, id=p.stem) for p in sorted(CORPUS.glob("*.log"))] if CORPUS.is_dir() else []

STEP_KEYS = ("progress_bar_step", "iteration", "global_step")
TOP_LEVEL = {"loss", "lr", "grad_norm", "step_time_s", "memory_gib"}
RENAMED = {"mem_allocated_gb": "memory_gib", "max_mem_allocated_gb": "peak_memory_gib"}
NOT_STEP_FIELDS = {"iteration_from_progress_bar", "iterations_in_epoch_total", "log_index", "final_summary",
                   "progress_bar_total", "consumed_samples_printed", "iteration_from_progress_bar_line_after"}


def ours(step: dict, key: str):
    reported = step.get("reported") or {}
    if key == "step_time_s":
        return step["step_time_s"] if step["step_time_s"] is not None else reported.get("step_time_s_printed")
    if key == "step_time_ms":
        return ours(step, "step_time_s") * 1000
    if key == "step_time_ms_running_avg":
        return reported["step_time_s_running_avg"] * 1000
    if key in RENAMED:
        return step[RENAMED[key]]
    if key in TOP_LEVEL:
        return step[key]
    return reported[key]


def same(expected, actual) -> bool:
    if isinstance(expected, str) and expected.upper() == "N/A":
        return actual is None
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return actual is not None and actual == pytest.approx(expected, rel=1e-6, abs=1e-9)
    return expected == actual


@pytest.mark.skipif(not CORPUS_LOGS, reason="conformance corpus ../shared/logs not present")
@pytest.mark.parametrize("log", CORPUS_LOGS)
def test_corpus_log_matches_expected(log):
    truth = json.loads(log.with_suffix(".json").read_text())
    result = ingest_file(log, Meta(compose))
    assert validate_result(result) == []
    expected, steps = truth["expected"], result["steps"]
    if truth["framework"] == "mlperf":  # one record per throughput block, the printed values in ``reported``
        assert len(steps) == len(expected)
        for step, entry in zip(steps, expected):
            assert {k: step["reported"].get(k) for k in entry} == pytest.approx(entry)
        run = truth["expected_summary"]
        assert {k: result["source"][k] for k in ("run_start_ms", "run_stop_ms", "status", "final_eval_accuracy")} == \
            {k: run[k] for k in ("run_start_ms", "run_stop_ms", "status", "final_eval_accuracy")}
        if "samples_per_s" in expected[0]:
            assert result["summary"]["reported"]["samples_per_s"] == pytest.approx(run["median_samples_per_s"])
        return
    if not expected:  # runs that died before iteration 1: a failed result, never a crash or invented values
        assert result["status"] == "failed" and steps == [] and result["error"]
        return
    assert len(steps) == len([e for e in expected if "final_summary" not in e])
    by_step = {s["step"]: s for s in steps}
    for index, entry in enumerate(e for e in expected if "final_summary" not in e):
        key = next((k for k in STEP_KEYS if k in entry), None)
        step = by_step[int(entry[key])] if key and "log_index" not in entry else steps[index]
        for name, value in entry.items():
            if name in NOT_STEP_FIELDS or name in STEP_KEYS:
                continue
            assert same(value, ours(step, name)), (log.name, entry.get(key), name, value, ours(step, name))
    for entry in (e for e in expected if "final_summary" in e):
        assert result["source"]["final_summary"] == pytest.approx(entry["final_summary"])


# the corpus sidecars' config keys -> the spec keys an ingested log may state
SIDECAR_SETTINGS = {"gbs": "training.global_batch_size", "mbs": "training.micro_batch_size",
                    "seq_len": "training.seq_length", "tp": "parallelism.tp", "pp": "parallelism.pp",
                    "cp": "parallelism.cp", "dp": "parallelism.dp"}


@pytest.mark.skipif(not CORPUS_LOGS, reason="conformance corpus ../shared/logs not present")
@pytest.mark.parametrize("log", CORPUS_LOGS)
def test_corpus_log_states_only_settings_its_run_had(log):
    """Every setting an ingested corpus log states (the rest is null) is the run's own, as its sidecar records
    it; and the world size too."""
    config = json.loads(log.with_suffix(".json").read_text())["config"]
    result = ingest_file(log, Meta(compose))
    for name, key in SIDECAR_SETTINGS.items():
        section, leaf = key.split(".")
        stated = result["spec"][section][leaf]
        if stated is not None and name in config:
            assert stated == config[name], (key, result["source"]["stated"].get(key))
    if result["plan"]["world_size"] is not None:
        assert result["plan"]["world_size"] == config["num_gpus"]


# ---------------------------------------------------------------- the project's own fixtures, one per trap

ESC = "\x1b"
MEGATRON = """\
[2025-01-01 10:00:00] iteration        1/      10 | consumed samples:          256 | elapsed time per iteration (ms): 5000.0 | throughput per GPU (TFLOP/s/GPU): 300.5 | learning rate: 1.000000E-05 | global batch size:   256 | lm loss: 1.050000E+01 | loss scale: 1.0 | grad norm: 2.500 | number of skipped iterations:   0 | number of nan iterations:   0 |
[2025-01-01 10:00:05] iteration        2/      10 | consumed samples:          512 | elapsed time per iteration (ms): 4000.0 | learning rate: 2.000000E-05 | global batch size:   256 | loss scale: 65536.0 | number of skipped iterations:   1 | number of nan iterations:   0 |
[Rank 0] (after 2 iterations) memory (MB) | allocated: 2048.0 | max allocated: 4096.0 | reserved: 5000.0 | max reserved: 5000.0
3:  [2025-01-01 10:00:09] iteration        3/      10 | consumed samples:          768 | elapsed time per iteration (ms): 4100.5 | learning rate: 3.000000E-05 | global batch size:   256 | lm loss: 1.040000E+01 | loss scale: 65536.0 | grad norm: 2.100 | number of skipped iterations:   0 | number of nan iterations:   0 |
2:  [2025-01-01 10:00:09] iteration        3/      10 | consumed samples:          768 | elapsed time per iteration (ms): 9999.9 | learning rate: 3.000000E-05 | global batch size:   256 | lm loss: 9.990000E+01 | loss scale: 65536.0 | grad norm: 9.900 | number of skipped iterations:   0 | number of nan iterations:   0 |
"""
PRIMUS = (f"[{ESC}[32m20260101 10:00:00{ESC}[0m][{ESC}[36mrank-7/8{ESC}[0m][{ESC}[1mINFO {ESC}[0m] {ESC}[1m[----trainer.py:2509] : "
          " iteration        4/      10 | consumed samples:         1024 | elapsed time per iteration (ms): 2000.0/2500.0 | "
          "hip mem usage/free/total/usage_ratio: 27.58GB/164.40GB/191.98GB/14.37% | throughput per GPU (TFLOP/s/GPU): "
          "400.0/350.0 | tokens per GPU (tokens/s/GPU): 65536.0/60000.0 | learning rate: 1.000000E-05 | global batch "
          f"size:   256 | lm loss: 1.000000E+01 | loss scale: 1.0 | grad norm: 1.000 |{ESC}[0m\n")
NEMO = """\
[NeMo W 2025-01-01 10:00:00 nemo_logging:349] a warning
      that continues on an indented line

Training epoch 0, iteration 0/9 | lr: 1.499e-07 | global_batch_size: 64 | global_step: 0 | reduced_train_loss: 10.84 | train_step_timing in s: 3.632 | TFLOPS_per_GPU: 1.249e+03
Training epoch 0, iteration 1/9 | lr: 2.999e-07 | global_batch_size: 64 | global_step: 1 | reduced_train_loss: 10.8 | train_step_timing in s: -1.5
Training epoch 1, iteration 0/9 | lr: 4.5e-07 | global_batch_size: 64 | global_step: 10 | reduced_train_loss: 10.7 | train_step_timing in s: 0.45
"""
TITAN = (f"[rank0]:[titan] 2025-01-01 10:00:00,000 - root - INFO - {ESC}[31mstep:  1  {ESC}[32mloss: 12.0  "
         f"{ESC}[33mgrad_norm: 3.0  {ESC}[34mmemory: 10.00GiB(5.00%)  tps: 1,234  tflops: 10.5  mfu: N/A{ESC}[39m\n"
         "[rank0]:[titan] 2025-01-01 10:00:01,000 - root - INFO - step:  2  loss: 11.0  grad_norm: 2.0  "
         "memory: 11.00GiB(5.50%)  wps: 2,000  tflops: 20.0  mfu: 1.50%\n")
DEEPSPEED = """\
[2023-08-02 00:41:17,455] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=2, lr=[0.0001], mom=[(0.9, 0.999)]
[2023-08-02 00:41:17,936] [INFO] [timer.py:215:stop] epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=200.5, CurrSamplesPerSec=210.25, MemAllocated=0.5GB, MaxMemAllocated=1.5GB
2023-08-02 00:41:17.936 | INFO     | __main__:log_dist:54 - [Rank 0] Loss: 9.5
"""
HF = """\
***** Running training *****
{'loss': '2.5', 'grad_norm': '1.5', 'learning_rate': '5e-05', 'epoch': '0.01'}
  1%|1         | 1/100 [00:01<01:39,  1.00s/it]
{'loss': 2.25, 'grad_norm': 1.25, 'learning_rate': 4.95e-05, 'epoch': 0.02
  2%|2         | 2/100 [00:02<01:38,  1.00s/it]
{'train_runtime': 100.0, 'train_samples_per_second': 1.0, 'train_loss': 2.4, 'epoch': 1.0}
"""
DIED = """\
[before the start of training step] datetime: 2025-01-01 10:00:00
Traceback (most recent call last):
  File "pretrain_gpt.py", line 1, in <module>
torch.OutOfMemoryError: CUDA out of memory.
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
"""


def test_megatron_traps_skipped_iteration_srun_prefix_duplicate_ranks_memory():
    parsed = parse_text(MEGATRON)
    assert parsed.format == "megatron" and [s["step"] for s in parsed.steps] == [1, 2, 3]
    one, two, three = parsed.steps
    assert one["step_time_s"] == 5.0 and one["reported"]["tflops_per_gpu"] == 300.5 and one["loss"] == 10.5
    assert two["loss"] is None and two["grad_norm"] is None and two["reported"]["skipped_iterations"] == 1
    assert two["memory_gib"] == 2.0 and two["peak_memory_gib"] == 4.0
    assert three["loss"] == 10.4 and three["step_time_s"] == pytest.approx(4.1005)  # first printing rank wins


def test_primus_ansi_prefix_and_instant_average_pairs():
    parsed = parse_text(PRIMUS)
    assert parsed.format == "primus"
    [step] = parsed.steps
    assert step["step"] == 4 and step["step_time_s"] == 2.0 and step["reported"]["step_time_s_running_avg"] == 2.5
    assert step["reported"]["tflops_per_gpu"] == 400.0 and step["reported"]["tflops_per_gpu_running_avg"] == 350.0
    assert step["reported"]["tokens_per_s_per_gpu"] == 65536.0 and step["loss"] == 10.0


def test_nemo_scientific_numbers_epochs_and_negative_times():
    result = ingest_text(NEMO, "nemo.log", Meta(compose, ["training.seq_length=128"], warmup_steps=0))
    assert result["source"]["format"] == "nemo" and [s["step"] for s in result["steps"]] == [0, 1, 10]
    assert result["steps"][0]["reported"]["tflops_per_gpu"] == 1249.0
    assert result["steps"][1]["step_time_s"] is None and result["steps"][1]["reported"]["step_time_s_printed"] == -1.5
    assert any("not positive" in w for w in result["warnings"])
    assert result["summary"]["measured_steps"] == 2 and validate_result(result) == []


def test_torchtitan_colours_thousands_separators_old_wps_and_na_mfu():
    parsed = parse_text(TITAN)
    assert parsed.format == "torchtitan"
    one, two = parsed.steps
    assert one["reported"]["tokens_per_s_per_gpu"] == 1234 and one["reported"]["mfu_pct"] is None
    assert two["reported"]["tokens_per_s_per_gpu"] == 2000 and two["reported"]["mfu_pct"] == 1.5
    assert one["memory_gib"] == 10.0 and one["reported"]["memory_pct"] == 5.0


def test_deepspeed_loss_from_the_script_line():
    [step] = parse_text(DEEPSPEED).steps
    assert step["step"] == 10 and step["loss"] == 9.5 and step["lr"] == 0.0001
    assert step["reported"]["skipped_cumulative"] == 2 and step["peak_memory_gib"] == 1.5


def test_hf_string_values_split_dict_and_final_summary():
    parsed = parse_text(HF)
    assert parsed.format == "hf" and [s["step"] for s in parsed.steps] == [1, 2]
    assert parsed.steps[0]["loss"] == 2.5 and parsed.steps[1]["lr"] == 4.95e-05
    assert parsed.extra["final_summary"]["train_runtime"] == 100.0


def test_a_run_that_died_before_iteration_one_is_a_failed_result():
    result = ingest_text(DIED, "died.log", Meta(compose))
    assert result["status"] == "failed" and result["steps"] == [] and "OutOfMemoryError" in result["error"]
    assert validate_result(result) == []


def test_ingested_summary_uses_the_live_metrics_and_keeps_the_framework_figure():
    meta = Meta(compose, ["model=llama", "platform=nvidia", "platform.gpu=h100", "platform.devices_per_node=8",
                 "training.seq_length=8192", "training.global_batch_size=256"], warmup_steps=0)
    result = ingest_text(MEGATRON, "m.log", meta)
    s = result["summary"]
    tokens = 256 * 8192
    assert s["tokens_per_s"] == pytest.approx(3 * tokens / (5.0 + 4.0 + 4.1005))
    assert s["reported_tflops_per_device"] == 300.5 and s["reported_flops_convention"].startswith("unknown")
    assert result["plan"]["flops_convention"] == "megatron" and result["spec"]["framework"]["name"] == "megatron"


def test_tensorboard_event_files(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    for step in range(1, 6):
        writer.add_scalar("lm loss", 10.0 - step, step)
        writer.add_scalar("learning-rate", 1e-4 * step, step)
        writer.add_scalar("iteration-time", 2.0, step)
    writer.close()
    [events] = list(tmp_path.glob("events.out.tfevents*"))
    result = ingest_file(events, Meta(compose, ["training.seq_length=1024", "training.global_batch_size=8"], warmup_steps=1))
    assert result["source"]["format"] == "tensorboard" and validate_result(result) == []
    assert [s["loss"] for s in result["steps"]] == [9.0, 8.0, 7.0, 6.0, 5.0]
    assert result["summary"]["tokens_per_s"] == pytest.approx(8 * 1024 / 2.0)


@pytest.mark.slow
def test_wandb_offline_run_of_a_real_benchmark(default_run):
    run_dir, _ = default_run
    from tprimat.results.wandb_offline import find_offline_runs

    live = read_result(run_dir / "result.json")
    result = ingest_file(find_offline_runs(run_dir)[0], Meta(compose))
    assert result["source"]["format"] == "wandb"
    assert [s["loss"] for s in result["steps"]] == pytest.approx([s["loss"] for s in live["steps"]])
    assert [s["step_time_s"] for s in result["steps"]] == pytest.approx([s["step_time_s"] for s in live["steps"]])
    # the run's W&B config is its spec, its history marks warm-up and repeat: the run's own summary comes back
    assert result["spec"]["model"] == live["spec"]["model"] and result["plan"]["world_size"] == 1
    assert [s["warmup"] for s in result["steps"]] == [s["warmup"] for s in live["steps"]]
    for key in ("tokens_per_s_per_device", "tflops_per_device", "measured_steps", "step_time_s", "loss_final"):
        assert result["summary"][key] == pytest.approx(live["summary"][key], rel=1e-12), key
    assert result["source"]["stated"]["training.seq_length"] == "log: W&B run config (a tprimat run's spec)"


def test_an_ingested_log_names_its_file_by_sha256(tmp_path):
    """The digest, taken in blocks, is the file's: here a log of several blocks."""
    import hashlib

    log = tmp_path / "long.log"
    log.write_text(MEGATRON * 6000)  # > 1 MiB: more than one block
    result = ingest_file(log, Meta(compose))
    assert log.stat().st_size > 1 << 20 and result["source"]["file"] == "long.log"
    assert result["source"]["sha256"] == hashlib.sha256(log.read_bytes()).hexdigest()


@pytest.mark.slow
def test_cli_writes_one_result_per_run(tmp_path):
    import subprocess
    import sys

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_text(MEGATRON)
    (logs / "b.log").write_text(DIED)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "tprimat", "ingest", str(logs), "--out", str(out), "--model", "llama",
                           "--seq-length", "4096", "--devices", "8"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    results = [read_result(p) for p in out.rglob("result.json")]
    assert sorted(r["status"] for r in results) == ["failed", "ok"]
    assert all(validate_result(r) == [] for r in results)


# ---------------------------------------------------------------- property test: never raise

FORMATS = ["auto", "megatron", "primus", "nemo", "torchtitan", "deepspeed", "hf"]
FIXTURE_LINES = (MEGATRON + PRIMUS + NEMO + TITAN + DEEPSPEED + HF + DIED).splitlines()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.sampled_from(FORMATS))
def test_parsers_never_raise_on_random_text(text, fmt):
    parse_text(text, fmt)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(FIXTURE_LINES) - 1), st.integers(0, 400), st.integers(0, 400),
                          st.text(max_size=8)), max_size=12), st.sampled_from(FORMATS))
def test_parsers_never_raise_on_corrupted_real_lines(edits, fmt):
    lines = []
    for index, cut_at, insert_at, junk in edits:
        line = FIXTURE_LINES[index][:cut_at]
        lines.append(line[:insert_at] + junk + line[insert_at:])
    parse_text("\n".join(lines), fmt)


def test_a_directory_walk_finds_every_run_file_and_not_wandbs_own_debug_logs(tmp_path):
    """A run directory as tprimat leaves it: its console log and its W&B offline run are runs to ingest; W&B's
    debug logs beside the .wandb file are W&B's own, not a training log (each gave a failed result)."""
    from tprimat.ingest.build import find_runs

    files = ["run1/launch.log", "run1/wandb/debug.log", "run1/wandb/debug-internal.log",
             "run1/wandb/offline-run-1/logs/debug-core.log", "run1/wandb/offline-run-1/run-1.wandb",
             "run1/events.out.tfevents.1.host", "run1/stdout.txt", "run1/result.json"]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    found = [p.relative_to(tmp_path).as_posix() for p in find_runs([str(tmp_path)])]
    assert found == ["run1/events.out.tfevents.1.host", "run1/launch.log", "run1/stdout.txt",
                     "run1/wandb/offline-run-1/run-1.wandb"]
    assert find_runs([str(tmp_path / "run1/wandb/debug.log")]) == [tmp_path / "run1/wandb/debug.log"]  # named: read
