"""Slurm for real: a private cluster of network namespaces (scripts/slurm_cluster.py ``NodesCluster``), each
slurmd in its own namespace with its own address on a private bridge. A sweep over platform.nodes=1,2 through
hydra/launcher=submitit_slurm trains over gloo across the namespaces; the 2-node run's losses match the 1-node run of
the same global batch (as the DDP tests hold them); the result names each rank's node and the rendezvous used, and
the interface gloo used is the one routing to the first node, derived, not loopback. One-node jobs of two ranks
run on the same cluster (one cluster at a time on a machine: all of Slurm's tests are in this module, so that one
worker runs them while the other goes on). A shaped link is measured; faults between the nodes (a rank killed, a
link down, a slurmd stopped, a rendezvous that cannot form) end bounded and named. Needs root (skipped without)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, running_alone
from tests.slurm_cluster import NodesCluster, install, netns_reason, wait_for
from tprimat.results.result import read_result, validate_result
from tprimat.results.steplog import read_steps

pytestmark = [pytest.mark.slow,  # a cluster of namespaces, ranks on two nodes (beside the other worker: loose bounds)
              pytest.mark.machine("packages")]  # Debian's Slurm, from the suite's set-up

pytest.importorskip("submitit")
RUN = ["training.max_steps=5", "benchmark.warmup_steps=1", "training.optimizer.warmup_steps=1",
       "logging.wandb.mode=disabled", "platform=cpu", "training.precision=fp32", "benchmark.telemetry=false",
       "platform.devices_per_node=1"]
SLURM = ["hydra.launcher.gpus_per_node=null", "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=5",
         "hydra.launcher.signal_delay_s=15"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = install() or netns_reason()
    if why:
        pytest.skip(why)
    c = NodesCluster(tmp_path_factory.mktemp("nodes"), nodes=2).start()
    yield c
    c.stop()
    assert c.left_behind == [], c.left_behind  # no process was left in any namespace


def sweep(cluster, sweep_dir, *overrides, resume_from=None, timeout_s=600):
    return subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={sweep_dir}",
                           "hydra/launcher=submitit_slurm", *SLURM, *overrides, f"resume_from={resume_from or sweep_dir}"],
                          cwd=sweep_dir.parent, env=cluster.env, capture_output=True, text=True, timeout=timeout_s)


def test_two_nodes_train_across_namespaces_as_one_node_does_and_resume(cluster, tmp_path):
    proc = sweep(cluster, tmp_path / "s", *RUN, "platform.nodes=1,2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    one, two = (read_result(tmp_path / "s" / point / "result.json") for point in ("0", "1"))
    for result in (one, two):
        assert validate_result(result) == [] and result["status"] == "ok"
    assert two["plan"]["world_size"] == 2 and two["spec"]["training"]["global_batch_size"] == \
        one["spec"]["training"]["global_batch_size"]
    assert [s["loss"] for s in two["steps"]] == pytest.approx([s["loss"] for s in one["steps"]], rel=1e-5)
    ranks = two["ranks"]
    assert [r["host"] for r in ranks["per_rank"]] == ["node1", "node2"] and set(ranks["per_node"]) == {"node1", "node2"}
    assert ranks["rendezvous"]["master_addr"] == "node1" and ranks["rendezvous"]["interface"] == "eth0", ranks
    assert two["environment"]["env"]["SLURM_JOB_NUM_NODES"] == "2"
    again = sweep(cluster, tmp_path / "s2", *RUN, "platform.nodes=1,2", resume_from=tmp_path / "s")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]  # both finished ok: both skipped
    assert "2 skipped" in again.stdout + again.stderr or (again.stdout + again.stderr).count("skipped") >= 2



# One node of the same cluster, two tasks (gloo ranks through a rendezvous file, on loopback) per point
ONE_NODE_RUN = ["training.max_steps=3", "benchmark.warmup_steps=1", "training.optimizer.warmup_steps=1",
                "logging.wandb.mode=disabled", "platform=cpu", "platform.devices_per_node=2", "benchmark.telemetry=false"]


def sweep_cmd(sweep_dir, *overrides, launcher="slurm"):
    return [sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={sweep_dir}",
            f"hydra/launcher={launcher}", *SLURM, *overrides,
            f"resume_from={sweep_dir}/none"]


def test_two_point_sweep_two_tasks_each(cluster, tmp_path):
    command = sweep_cmd(tmp_path / "s", *ONE_NODE_RUN, "parallelism.fsdp=false,true", launcher="submitit_slurm")
    proc = subprocess.run(command, cwd=tmp_path, env=cluster.env, capture_output=True, text=True, timeout=600)
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
    long_run = [o for o in ONE_NODE_RUN if not o.startswith("training.max_steps")] + ["training.max_steps=100000"]
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
                           f"hydra.run.dir={run_dir}", *ONE_NODE_RUN], cwd=tmp_path, env=cluster.env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = read_result(run_dir / "result.json")
    assert result["status"] == "ok" and result["ranks"]["world_size"] == 2
    assert result["environment"]["env"]["SLURM_NTASKS"] == "2"
    assert (run_dir / ".hydra" / "config.yaml").exists()

SHAPED_MBIT = 400  # node links shaped with tc tbf: 400 Mbit/s = 0.05 GB/s each way


@pytest.fixture(scope="module")
def shaped(cluster, tmp_path_factory):
    """Both nodes' links shaped to 400 Mbit/s: ``tprimat preflight`` run as two ranks across the nodes, then the real
    2-node run, each rank on one thread (the namespaces share this machine's cores): (the preflight file, the run's
    tokens/s per device, its overrides). Timed: made inside the exclusive test only."""
    assert running_alone(), "the real 2-node run is timed: made inside an exclusive test only"
    folder = tmp_path_factory.mktemp("shaped")
    for node in (1, 2):
        cluster.shape(node, SHAPED_MBIT)
    env = {**cluster.env, "OMP_NUM_THREADS": "1"}
    try:
        pf = folder / "preflight.json"
        done = subprocess.run(["srun", "-N2", "-n2", f"--chdir={ROOT}", sys.executable, "-m", "tprimat", "preflight",
                               "--sizes", "256", "--dtypes", "fp32", "--iters", "3", "--attention", "1,2,64,32",
                               "--allreduce-mib", "8,16", "--out", str(pf)], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        run = [*RUN, "training.max_steps=8", "benchmark.warmup_steps=2", "platform.nodes=2"]
        real = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={folder / 's'}",
                               "hydra/launcher=submitit_slurm", *SLURM, *run, f"resume_from={folder / 's'}"],
                              cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        assert real.returncode == 0, real.stdout[-3000:] + real.stderr[-3000:]
    finally:
        for node in (1, 2):
            cluster.shape(node, None)
    return pf, read_result(folder / "s" / "0" / "result.json"), run


@pytest.mark.exclusive  # the real 2-node run alone on the cores: beside the other worker it slowed by +81%
def test_a_shaped_link_is_measured_across_the_nodes_and_a_two_node_run_trains_through_it(shaped):
    """The preflight's all-reduce bus bandwidth is within 20% of the shaped rate (a 2-rank ring moves the buffer
    once each way: bus bandwidth = the link's rate), over the nodes' own interface; the 2-node run ends ok."""
    pf, result, _ = shaped
    allreduce = json.loads(pf.read_text())["allreduce"]
    assert allreduce["ranks"] == 2 and allreduce["rendezvous"]["interface"] == "eth0"
    assert allreduce["max_busbw_gbps"] == pytest.approx(SHAPED_MBIT / 8 / 1000, rel=0.2)
    assert result["status"] == "ok" and result["ranks"]["world_size"] == 2


def test_the_two_node_step_is_projected_from_one_nodes_slice_and_the_measured_link(shaped, tmp_path):
    """``tprimat project --measure --preflight`` projects the 2-node step from a slice measured on one process here
    plus the preflight's bandwidth; its error against the real 2-node run is stated in docs/benchmarks.md and bounded
    here. Not exclusive: the slices run on one thread, as each rank did, beside one other test on a 2-core machine,
    and each slice's step is the fastest of its 2 interleaved rounds (``--rounds 2``;
    ``tprimat.execute.slice.uncontended``); held alone, its 64 s of measuring left a core idle (2026-11-29), and the
    default 3 to 5 rounds took 84 s of the suite's CPU beside the other worker, for a bound this loose."""
    pf, result, run = shaped
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proj = subprocess.run([sys.executable, "-m", "tprimat", "project", "--measure", "--rounds", "2", "--preflight", str(pf),
                           *[o for o in run if not o.startswith("benchmark.telemetry")], "--json",
                           str(tmp_path / "projection.json")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proj.returncode == 0, proj.stdout[-3000:] + proj.stderr[-3000:]
    (point,) = json.loads((tmp_path / "projection.json").read_text())
    error = point["projection"]["tokens_per_s_per_device"] / result["summary"]["tokens_per_s_per_device"] - 1
    print(f"2-node projection from one node's slice + preflight: error {error:+.1%} against the real run")
    # +14% to +50% on a quiet machine (docs/benchmarks.md: the all-reduce is not hidden behind the backward on a
    # one-core rank): a projection off by half either way (-50%: half the real rate; +100%: twice it) fails
    assert -0.35 < error < 0.75, error


# long enough for a fault to land mid-run; repeats are a measurement setting, not part of what is trained (the spec's
# identity): a sweep resuming with benchmark.repeats=1 runs the same point again, in seconds
FAULT_RUN = [*RUN, "platform.nodes=2", "benchmark.collective_timeout_s=5"]
LONG = ["benchmark.repeats=60"]


def start_faulted(cluster, sweep_dir, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={sweep_dir}",
                             "hydra/launcher=submitit_slurm", *SLURM, *FAULT_RUN, *LONG, *extra, "resume_from=null"],
                            cwd=sweep_dir.parent, env={**cluster.env, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def fault_mid_run(cluster, sweep_dir, fault) -> tuple[float, int, dict]:
    """Four measured steps, then ``fault()``: how long the sweep took to end after it, the steps recorded before
    it, and the point's result (the sweep summed up and exited 1)."""

    sweep_dir.mkdir(parents=True)
    proc = start_faulted(cluster, sweep_dir)
    wait_for(lambda: len(read_steps(sweep_dir / "0")[1]) >= 4, "four measured steps", 240)
    before, started = len(read_steps(sweep_dir / "0")[1]), time.monotonic()
    fault()
    output, _ = proc.communicate(timeout=400)
    ended_s = time.monotonic() - started
    assert proc.returncode == 1 and "sweep: 1 points, 0 ok, 1 not ok" in output, output[-3000:]
    result = read_result(sweep_dir / "0" / "result.json")
    assert result["status"] == "failed" and len(result["steps"]) >= before, result["error"][:500]
    print(f"ended {ended_s:.1f} s after the fault: {result['error'].splitlines()[0][:300]}")
    return ended_s, before, result


def jobs_left(cluster) -> list[str]:
    """Every process in the nodes' namespaces but the slurmd daemons themselves."""
    return [pid for i in (1, 2) for pid in subprocess.run(["ip", "netns", "pids", cluster.ns(i)], capture_output=True,
                                                          text=True).stdout.split()
            if Path(f"/proc/{pid}/cmdline").exists()
            and Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] != b"slurmd"]


def ranks_on(cluster, node: int) -> list[str]:
    """The training processes (submitit's tasks, not srun) in node's namespace."""
    found = []
    for pid in subprocess.run(["ip", "netns", "pids", cluster.ns(node)], capture_output=True, text=True).stdout.split():
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if Path(f"/proc/{pid}/cmdline").exists() else []
        if argv and b"python" in argv[0] and b"submitit" in b" ".join(argv):
            found.append(pid)
    return found


def test_faults_between_nodes_end_bounded_named_with_their_steps_and_the_sweep_resumes(cluster, tmp_path):
    """node2's rank killed mid-run (as a node that dies takes its processes): srun names node2's task and rank 0
    names its silent rank; the job ends within 120 s. node2's link taken down mid-run: the collectives time out
    (benchmark.collective_timeout_s=5), rank 0 names node2's rank as silent, and tprimat cancels the job srun still
    holds for the unreachable node: it ends within 5 + 3 + 10 s of the fault plus Slurm's cancel (bound 90 s beside
    the other worker). node2's slurmd stopped mid-run: its steps run on until slurmctld holds node2 lost
    (SlurmdTimeout=15 in the test cluster, Slurm's default 300) and ends the job NODE_FAIL, not requeued; the result
    names node2 as Slurm does (bound 15 + 60 s). Each keeps every step recorded before the fault, and once node2 is
    back nothing of any job is left in any namespace; one sweep resuming from all three runs the point again (the
    same spec), to ok."""
    started = time.monotonic()
    def kill_node2s_rank():
        pids = ranks_on(cluster, 2)
        assert pids, "no rank on node2"
        subprocess.run(["kill", "-9", *pids], check=True)

    ended_s, _, result = fault_mid_run(cluster, tmp_path / "kill", kill_node2s_rank)
    assert ended_s < 120, ended_s
    assert "lost node2 (task 1: Killed)" in result["error"], result["error"][:500]
    assert "lost rank 1 on node2 (silent for 3 s after the collective failed)" in result["error"], result["error"]
    assert jobs_left(cluster) == []
    print(f"kill fault: {time.monotonic() - started:.0f} s")
    try:
        ended_s, _, result = fault_mid_run(cluster, tmp_path / "link", lambda: cluster.link(2, False))
        assert ended_s < 90, ended_s
        assert "lost rank 1 on node2 (silent for 3 s after the collective failed)" in result["error"], result["error"]
        assert "cancelled by tprimat" in result["error"]
        cluster.recover(2)
        wait_for(lambda: jobs_left(cluster) == [], "the cut-off job's processes to end once node2 is back", 120)
        print(f"link fault and node2 back: {time.monotonic() - started:.0f} s")
        ended_s, _, result = fault_mid_run(cluster, tmp_path / "slurmd", lambda: cluster.stop_slurmd(2))
        assert ended_s < cluster.slurmd_timeout_s + 60, ended_s
        assert "NODE_FAIL, lost node2 (down*: Not responding)" in result["error"], result["error"][:500]
        assert jobs_left(cluster) == []
        assert "PD" not in cluster.run("squeue", "-h", "-o", "%t").stdout  # not requeued behind the sweep's back
    finally:
        cluster.recover(2)
    print(f"slurmd fault and node2 back: {time.monotonic() - started:.0f} s")
    again = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={tmp_path / 'again'}",
                            "hydra/launcher=submitit_slurm", *SLURM, *FAULT_RUN, f"resume_from={tmp_path}"],
                           cwd=tmp_path, env=cluster.env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    rerun = read_result(tmp_path / "again" / "0" / "result.json")
    assert rerun["status"] == "ok" and rerun["spec_hash"] == result["spec_hash"]  # the failed point, run again
    print(f"resumed: {time.monotonic() - started:.0f} s")


def test_a_rendezvous_that_cannot_form_fails_bounded_naming_the_rank_that_never_joined(cluster, tmp_path):
    """node2 resolves node1 to an address nobody holds (a wrong hosts entry, a stale DNS record): its rank never
    reaches the rendezvous. Rank 0 fails after benchmark.init_timeout_s=8 naming rank 1 on node2 as never joined
    (not gloo's 30-minute default), the job ends within 120 s of its launch, and nothing is left behind."""

    hosts = cluster.hosts_file(2)
    saved = hosts.read_text()
    hosts.write_text(saved.replace(f"{cluster.addr(1)} node1", f"{cluster.subnet}.99 node1"))
    try:
        (tmp_path / "s").mkdir()
        started = time.monotonic()
        proc = start_faulted(cluster, tmp_path / "s", "benchmark.init_timeout_s=8")
        output, _ = proc.communicate(timeout=400)
        ended_s = time.monotonic() - started
    finally:
        hosts.write_text(saved)
    assert proc.returncode == 1 and ended_s < 120, (ended_s, output[-3000:])
    error = read_result(tmp_path / "s" / "0" / "result.json")["error"]
    print(f"ended {ended_s:.1f} s after launch: {error.splitlines()[0][:300]}")
    assert "within 8 s (benchmark.init_timeout_s): rank 1 on node2 never joined" in error, error[:500]
    assert jobs_left(cluster) == []
