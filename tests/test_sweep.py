"""Sweeps: tprimat plan expands and validates every point without running anything, agreeing with the launcher."""

import csv
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import CONF, run_inprocess
from tprimat.compose import Composer, expand
from tprimat.sweep.plan import plan_sweep

SWEEP = ["platform=nvidia", "platform.gpu=h100", "model=llama,llama70b", "parallelism.tp=1,2,3,8"]


def plan(overrides):
    return plan_sweep(expand(overrides), Composer().compose)


def test_expand_is_the_cartesian_product():
    points = expand(["model=llama,qwen", "parallelism.tp=1,2", "training.max_steps=3"])
    assert len(points) == 4 and ["model=qwen", "parallelism.tp=2", "training.max_steps=3"] in points


def test_plan_marks_each_point_with_its_reason_and_numbers():
    points = {" ".join(p.overrides): p for p in plan(SWEEP)}
    assert len(points) == 8
    ok = points["platform=nvidia platform.gpu=h100 model=llama parallelism.tp=1"]
    assert ok.valid and ok.world_size == 8 and ok.dp == 8 and ok.flops_per_token == pytest.approx(51.47e9, rel=1e-3)
    assert ok.memory_estimate_gib <= ok.device_memory_gib
    bad = points["platform=nvidia platform.gpu=h100 model=llama parallelism.tp=3"]
    assert not bad.valid and "world size must be a multiple of tp * pp * cp" in bad.reason
    big = points["platform=nvidia platform.gpu=h100 model=llama70b parallelism.tp=1"]
    assert not big.valid and "exceeds 80.0 GiB" in big.reason


@pytest.mark.parametrize("overrides", [["parallelism.tp=2"], ["platform=nvidia", "platform.gpu=h100", "model=llama"],
                                       ["training.precision=fp8"], ["platform.devices_per_node=2", "parallelism.fsdp=true"]])
def test_plan_agrees_with_a_dry_run(tmp_path, overrides):
    [point] = plan(overrides)
    out = run_inprocess(tmp_path, [*overrides, "dry_run=true"])
    backend_ok = not (out.result["plan"] or {}).get("backend_problems")
    assert point.valid == (out.status == "dry_run" and backend_ok)


def test_type_errors_and_unknown_keys_are_a_points_reason():
    bad_type, good = plan(["parallelism.tp=two,1"])
    assert not bad_type.valid and "parallelism.tp='two': must be of type int" in bad_type.reason and good.valid
    [unknown] = plan(["training.nope=1"])
    assert not unknown.valid and "training.nope: unknown key" in unknown.reason


@pytest.mark.slow
def test_plan_command_writes_a_csv_and_exits_2_when_a_point_is_invalid(tmp_path):
    out = tmp_path / "plan.csv"
    proc = subprocess.run([sys.executable, "-m", "tprimat", "plan", *SWEEP, "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 8 and {r["valid"] for r in rows} == {"True", "False"}
    assert "tprimat plan: 8 points" in proc.stdout


# ---------------------------------------------------------------- launching sweeps

QUICK_RUN = ["training.max_steps=3", "benchmark.warmup_steps=1", "training.optimizer.warmup_steps=1",
             "training.seq_length=64", "logging.wandb.mode=disabled"]


def sweep(sweep_dir, *overrides, timeout=600, python=()):
    sweep_dir.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, *python, str(CONF.parent / "launch.py"), "-m", f"hydra.sweep.dir={sweep_dir}",
                           *overrides], cwd=sweep_dir.parent, capture_output=True, text=True, timeout=timeout)


def result_of(path):

    from tprimat.results.result import read_result, validate_result

    result = read_result(path / "result.json")
    assert validate_result(result) == [], validate_result(result)
    return result


@pytest.mark.slow
def test_invalid_points_are_recorded_and_never_launched_and_a_summary_is_saved(tmp_path):
    proc = sweep(tmp_path / "s", "parallelism.tp=2,1", *QUICK_RUN, f"resume_from={tmp_path / 'none'}")
    assert proc.returncode == 1, proc.stderr[-2000:]
    invalid, ok = result_of(tmp_path / "s" / "0"), result_of(tmp_path / "s" / "1")
    assert invalid["status"] == "invalid" and "parallelism.tp=2" in invalid["error"] and invalid["steps"] == []
    assert not (tmp_path / "s" / "0" / ".hydra").exists()  # never launched: Hydra never ran the job
    assert ok["status"] == "ok" and ok["spec_hash"]
    rows = list(csv.DictReader((tmp_path / "s" / "sweep_summary.csv").open()))
    assert [r["status"] for r in rows] == ["invalid", "ok"] and "world size" in rows[0]["reason"]
    assert float(rows[1]["tokens_per_s_per_device"]) > 0
    assert "| 1 |" in (tmp_path / "s" / "sweep_summary.md").read_text()


@pytest.mark.slow
def test_a_point_that_cannot_compose_stops_the_sweep_before_any_point_is_written(tmp_path):
    """Hydra's own composition error, naming the missing option, and no point written or run (tprimat's sweeper
    leaves that check to the launcher, which composes every point before preparing any): the first point composes
    but is invalid (tp=2 on one device), so preparing it before composing the second would leave its result."""
    proc = sweep(tmp_path / "s", "model=llama_tiny,nope", "parallelism.tp=2", *QUICK_RUN)
    assert proc.returncode == 1 and "Could not find 'model/nope'" in proc.stderr, proc.stderr[-2000:]
    assert [p.name for p in (tmp_path / "s").iterdir() if not p.name.startswith(".")] == ["multirun.yaml"]  # its claim aside


@pytest.mark.slow
def test_resume_skips_finished_points_and_reruns_failed_or_missing_ones(tmp_path):
    import json

    first = tmp_path / "first"
    assert sweep(first, "training.seed=1,2,3", *QUICK_RUN, f"resume_from={tmp_path}").returncode == 0
    (first / "1" / "result.json").unlink()  # missing
    failed = result_of(first / "2")
    failed["status"] = "failed"  # as if the job had died
    (first / "2" / "result.json").write_text(json.dumps(failed))
    second = tmp_path / "second"
    proc = sweep(second, "training.seed=1,2,3", *QUICK_RUN, f"resume_from={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = list(csv.DictReader((second / "sweep_summary.csv").open()))
    assert [r["status"] for r in rows] == ["skipped", "ok", "ok"]
    assert str(first / "0") in rows[0]["reason"]
    assert not (second / "0" / "result.json").exists()


@pytest.mark.slow
def test_submitit_local_one_task_per_rank(tmp_path):
    """Each point's two tasks train as two ranks; the sweep itself (plan, submit, collect) never imports torch, as
    Python's own import profiler (-X importtime) of that process shows: its jobs train, it does not."""
    pytest.importorskip("submitit")
    proc = sweep(tmp_path / "s", "hydra/launcher=submitit_local",
                 "hydra.launcher.timeout_min=5", "platform=cpu", "platform.devices_per_node=2", *QUICK_RUN,
                 "parallelism.fsdp=false,true", f"resume_from={tmp_path / 'none'}", python=("-X", "importtime"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = [line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "tprimat.launch" in imported and "torch" not in imported
    for point in ("0", "1"):
        result = result_of(tmp_path / "s" / point)
        assert result["status"] == "ok" and result["ranks"]["world_size"] == 2
        assert result["environment"]["env"]["WORLD_SIZE"] == "2"  # initialised from the submitit tasks
        assert (tmp_path / "s" / point / ".hydra" / "config.yaml").exists()  # written once, by rank 0


@pytest.mark.slow
def test_runs_of_one_sweep_share_a_wandb_group_with_tags(tmp_path):
    from tprimat.results.wandb_offline import find_offline_runs, read_offline_run

    proc = sweep(tmp_path / "day" / "time", "training.seed=1,2", *QUICK_RUN[:4], f"resume_from={tmp_path / 'none'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = [read_offline_run(p) for p in find_offline_runs(tmp_path / "day")]
    assert len(runs) == 2 and {r.group for r in runs} == {"sweep-day-time"}
    assert all({"platform:cpu", "framework:native", "model:llama_tiny", "methodology:maximum_performance"}
               <= set(r.tags) for r in runs)
    assert all(r.summary["tokens_per_s"] > 0 for r in runs)


@pytest.mark.slow
@pytest.mark.machine("packages")  # Debian's Slurm, from the suite's set-up
def test_slurm_keys_reach_the_sbatch_script(tmp_path):
    if shutil.which("srun") is None:
        pytest.skip("no srun here: submitit's Slurm executor needs Slurm's client (the suite installs Debian's Slurm "
                    "when it runs as root: tests/machine.py)")
    pytest.importorskip("submitit")
    from tprimat.sweep.launch import make_executor

    executor = make_executor("slurm", {"submitit_folder": str(tmp_path / "%j"), "timeout_min": 5, "tasks_per_node": 8,
                                       "nodes": 2, "gpus_per_node": 8, "partition": "gpu", "gres": "gpu:8",
                                       "exclude": "node3", "mem_per_cpu": "4G", "account": "research"})
    sbatch = executor._executor._make_submission_file_text("python -m x", "uid")  # the script submitit submits
    for line in ("--partition=gpu", "--gres=gpu:8", "--exclude=node3", "--mem-per-cpu=4G", "--account=research",
                 "--ntasks-per-node=8", "--nodes=2", "--time=5", "--no-requeue"):
        assert f"#SBATCH {line}" in sbatch, line
    asked = make_executor("slurm", {"submitit_folder": str(tmp_path / "%j"), "additional_parameters": {"requeue": True}})
    sbatch = asked._executor._make_submission_file_text("python -m x", "uid")
    assert "#SBATCH --requeue" in sbatch and "--no-requeue" not in sbatch  # the sweep's own choice stands


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from([
    "platform=nvidia", "platform=amd", "platform=cpu", "platform.gpu=h100", "platform.gpu=mi300x", "model=qwen",
    "model=mistral", "model=llama70b", "framework=megatron", "framework=nemo", "framework=torchtitan",
    "framework=deepspeed", "framework=transformers", "methodology=identical_config", "parallelism.tp=2",
    "parallelism.cp=2", "training.micro_batch_size=2", "training.precision=fp32", "platform.nodes=2",
    "training.activation_checkpointing=full", "platform.tuned.fsdp=false", "platform.tuned.precision=fp8"]),
    min_size=1, max_size=6, unique_by=lambda o: o.split("=")[0]))
def test_fast_composition_equals_hydra_and_omegaconf_resolving_everything(overrides):
    """The sweep composer resolves only the interpolations a point's overrides reach, remembering answers: the
    config it gives is the one Hydra composes and OmegaConf resolves whole for the same overrides."""
    from tprimat.compose import compose

    composer, expected = Composer(), compose(overrides)
    assert composer.compose(overrides) == expected
    assert composer.compose(overrides) == expected  # a second time, from the caches
