"""Sweeps on a REAL Slurm: a private single-node cluster (Debian's slurmctld/slurmd/slurmdbd, munge, MariaDB for
accounting) started on loopback for these tests, a 2-point sweep with 2 tasks (gloo ranks) per point, and a
cancelled job recorded as failed. Needs root and Debian's packages (installed by the fixture when missing)."""

import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.slurm_cluster import Cluster, install, wait_for
from tprimat.results.result import read_result
from tprimat.results.steplog import read_steps

pytestmark = pytest.mark.slow  # multi-process runs, Slurm (beside the other worker: waits on the thing, generous bounds)

pytest.importorskip("submitit")
RUN = ["training.max_steps=3", "benchmark.warmup_steps=1", "training.optimizer.warmup_steps=1",
       "logging.wandb.mode=disabled", "platform=cpu", "platform.devices_per_node=2", "benchmark.telemetry=false"]
SLURM = ["hydra.launcher.gpus_per_node=null", "hydra.launcher.cpus_per_task=1",
         "hydra.launcher.timeout_min=5", "hydra.launcher.signal_delay_s=15"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = install()
    if why:
        pytest.skip(why)
    c = Cluster(tmp_path_factory.mktemp("slurm")).start()
    yield c
    c.stop()


def sweep_cmd(sweep_dir, *overrides, launcher="slurm"):
    return [sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={sweep_dir}",
            f"hydra/launcher={launcher}", *SLURM, *overrides,
            f"resume_from={sweep_dir}/none"]


def test_two_point_sweep_two_tasks_each(cluster, tmp_path):
    proc = subprocess.run(sweep_cmd(tmp_path / "s", *RUN, "parallelism.fsdp=false,true", launcher="submitit_slurm"), cwd=tmp_path,
                          env=cluster.env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for point in ("0", "1"):
        result = read_result(tmp_path / "s" / point / "result.json")
        assert result["status"] == "ok" and result["ranks"]["world_size"] == 2
        assert result["environment"]["env"]["SLURM_NTASKS"] == "2"  # initialised from Slurm's tasks
        assert (tmp_path / "s" / point / ".hydra" / "config.yaml").exists()
    jobs = settled_jobs(cluster)
    assert [state for _, state in jobs].count("COMPLETED") >= 2, jobs


def settled_jobs(cluster, timeout_s: float = 180) -> list[tuple[str, str]]:
    """sacct's (job, state) once no job is still ending: the sweep returns as soon as every point's result
    exists, which can be a moment before Slurm has recorded the job's end."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = cluster.run("sacct", "-n", "-X", "-P", "-o", "JobID,State").stdout
        jobs = [tuple(line.split("|")[:2]) for line in out.splitlines() if "|" in line]
        if time.monotonic() > deadline or not any(s in ("PENDING", "RUNNING", "COMPLETING") for _, s in jobs):
            return jobs
        time.sleep(1)


def test_a_cancelled_job_is_recorded_as_failed(cluster, tmp_path):
    long_run = [o for o in RUN if not o.startswith("training.max_steps")] + ["training.max_steps=100000"]
    proc = subprocess.Popen(sweep_cmd(tmp_path / "s", *long_run), cwd=tmp_path, env=cluster.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, job = time.monotonic() + 240, ""
    while time.monotonic() < deadline and not job:
        job = cluster.run("squeue", "-h", "-t", "RUNNING", "-o", "%i").stdout.strip()
        time.sleep(1)
    assert job, "the job never started"
    wait_for(lambda: read_steps(tmp_path / "s" / "0")[1], "the job's first measured step", 240)  # cancelled mid-run
    assert cluster.run("scancel", job.split()[0]).returncode == 0
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, output[-3000:]
    result = read_result(tmp_path / "s" / "0" / "result.json")
    assert result["status"] == "failed" and "CANCELLED" in result["error"]
    assert "failed" in (tmp_path / "s" / "sweep_summary.csv").read_text()


def test_srun_one_task_per_rank(cluster, tmp_path):
    """``srun -n 2 python launch.py``: each task initialises torch.distributed from Slurm's environment (the
    job's first node and a port from the job id); rank 0 alone writes the result and Hydra's config dump."""
    run_dir = tmp_path / "run"
    proc = subprocess.run(["srun", "-n", "2", "--cpus-per-task=1", "--time=5", sys.executable, str(ROOT / "launch.py"),
                           f"hydra.run.dir={run_dir}", *RUN], cwd=tmp_path, env=cluster.env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = read_result(run_dir / "result.json")
    assert result["status"] == "ok" and result["ranks"]["world_size"] == 2
    assert result["environment"]["env"]["SLURM_NTASKS"] == "2"
    assert (run_dir / ".hydra" / "config.yaml").exists()
