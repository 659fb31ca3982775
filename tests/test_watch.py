"""The ranks' watch (tprimat.execute.watch) on torch.distributed's real store and process group, in this process:
a rendezvous a rank never joins fails within its bound naming that rank; after a collective fails, rank 0 names
exactly the ranks that neither beat nor reported, with what the others saw; Slurm's placement of ranks is read with
Slurm's own tool; the launcher holds a run stalled only mid-run. The faults between real nodes are
tests/test_slurm_nodes.py."""

from __future__ import annotations

import json
import shutil
import threading
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from tests.slurm_cluster import free_port
from tprimat.execute.rank import RankEnv, slurm_placement
from tprimat.execute.watch import QUIET_BEATS, RanksLost, RankWatch, RendezvousFailed, meet, on_failure
from tprimat.results.steplog import STEPS_FILE
from tprimat.sweep.jobs import StepWatch


def test_a_rendezvous_a_rank_never_joins_fails_within_its_bound_naming_the_rank(monkeypatch):
    """World of 3, only rank 0 starts: it fails after init_timeout_s (2 s here), not gloo's 30 minutes, and names
    ranks 1 and 2 as never joined."""
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.delenv("TPRIMAT_INIT_METHOD", raising=False)
    started = time.monotonic()
    with pytest.raises(RendezvousFailed) as caught:
        meet(RankEnv(0, 0, 3, "torchrun"), "gloo", "here", init_timeout_s=2)
    assert time.monotonic() - started < 20
    assert "within 2 s (benchmark.init_timeout_s): rank 1, rank 2 never joined" in str(caught.value)
    assert not dist.is_initialized()


def test_a_rank_that_cannot_reach_the_rendezvous_says_where_and_how_long(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))  # nobody serves it
    monkeypatch.delenv("TPRIMAT_INIT_METHOD", raising=False)
    with pytest.raises(RendezvousFailed, match=r"rank 1 on here could not reach the rendezvous at 127\.0\.0\.1:\d+ "
                                                r"within 2 s \(benchmark\.init_timeout_s\)"):
        meet(RankEnv(1, 0, 2, "torchrun"), "gloo", "here", init_timeout_s=2)


def test_rank_0_names_only_the_ranks_that_neither_beat_nor_reported():
    """Four ranks on one real TCPStore: rank 1 keeps beating, rank 2 reports the failure it saw, rank 3 beat once
    and then went silent (as a killed node does): rank 0 names rank 3 alone, within QUIET_BEATS beats."""
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, 4, True, timedelta(seconds=10), wait_for_workers=False)

    def client():
        return dist.TCPStore("127.0.0.1", port, 4, False, timedelta(seconds=10))

    watches = [RankWatch(server if r == 0 else client(), r, 4, f"node{r}", client()) for r in range(4)]
    for watch in watches:
        watch.sign_in()
    watches[1].start()
    watches[3].start()
    time.sleep(0.2)
    watches[3].stop()  # beat once, then silence
    watches[2].report(RuntimeError("Connection closed by peer"))
    threading.Event().wait(0.1)
    started = time.monotonic()
    assert watches[0].lost() == [3]
    assert time.monotonic() - started <= QUIET_BEATS + 1
    assert watches[0].hosts() == {0: "node0", 1: "node1", 2: "node2", 3: "node3"}
    raised = on_failure(watches[0], RuntimeError("Timed out waiting 10000ms for recv"), 10)
    assert isinstance(raised, RanksLost)
    assert str(raised).startswith("lost rank 3 on node3 (silent for 3 s after the collective failed), "
                                  "benchmark.collective_timeout_s=10: RuntimeError: Timed out waiting 10000ms for recv")
    assert "; rank 2 on node2 saw RuntimeError: Connection closed by peer" in str(raised)
    watches[1].stop()


def test_the_launcher_holds_a_run_stalled_only_mid_run_and_past_its_limit(tmp_path):
    """Rank 0's steps.jsonl as the launcher reads it: silent past the limit between a run's first and next-to-last
    step is a stall; an earlier run's file, the header alone, the last steps (the result being written), or a
    silence within ten slowest steps, not."""
    path = tmp_path / STEPS_FILE

    def append(record: dict) -> None:
        with path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    append({"step": 3, "step_time_s": 0.01, "repeat": 0})  # an earlier run's, before the watch began
    time.sleep(0.05)
    watch = StepWatch(tmp_path, max_steps=10, limit_s=0.3)
    time.sleep(0.4)
    assert watch.silent_s() == 0
    path.write_text(json.dumps({"header": {"run_id": "x"}}) + "\n")  # the new run starts its file
    time.sleep(0.4)
    assert watch.silent_s() == 0  # the header alone: not armed
    append({"step": 3, "step_time_s": 0.01, "repeat": 0})
    assert watch.silent_s() == 0
    time.sleep(0.4)
    assert watch.silent_s() > 0.3  # mid-run and silent past max(0.3 s, 10 x 0.01 s)
    append({"step": 4, "step_time_s": 0.2, "repeat": 0})
    assert watch.silent_s() == 0
    time.sleep(0.5)
    assert watch.silent_s() == 0  # within ten of its slowest step (2 s)
    append({"step": 9, "step_time_s": 0.01, "repeat": 0})
    time.sleep(2.2)
    assert watch.silent_s() == 0  # the next-to-last step on: the result is being written, not a stall


@pytest.mark.machine("packages")  # Debian's Slurm, from the suite's set-up
def test_slurm_placement_follows_srun_block_distribution(tmp_path, monkeypatch):
    """Expected by hand from Slurm's documented forms: ``2(x2),1`` is two tasks on each of the first two nodes, then
    one; the node list is expanded by scontrol itself (which reads a configuration first, as in any job)."""
    if shutil.which("scontrol") is None:
        pytest.skip("Slurm's scontrol is not installed (the suite installs Debian's Slurm when it runs as root)")
    (tmp_path / "slurm.conf").write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=gpu[07-09] CPUs=1\n")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    env = {"SLURM_STEP_NODELIST": "gpu[07-09]", "SLURM_STEP_TASKS_PER_NODE": "2(x2),1"}
    assert slurm_placement(env) == ["gpu07", "gpu07", "gpu08", "gpu08", "gpu09"]
    assert slurm_placement({"SLURM_JOB_NODELIST": "node[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)"}) == ["node1", "node2"]
    assert slurm_placement({}) == []
