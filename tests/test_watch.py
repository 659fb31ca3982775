"""The ranks' watch (tprimat.execute.watch) on torch.distributed's real store and process group, in this process:
a rendezvous a rank never joins fails within its bound naming that rank; after a collective fails, rank 0 names
exactly the ranks that neither beat nor reported; Slurm's placement of ranks is read with Slurm's own tool. The
faults between real nodes are tests/test_slurm_nodes.py."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from tprimat.execute.distributed import RankEnv
from tprimat.execute.watch import QUIET_BEATS, RankWatch, RendezvousFailed, meet, slurm_placement


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    watches[1].stop()


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="Slurm's scontrol is not installed")
def test_slurm_placement_follows_srun_block_distribution(tmp_path, monkeypatch):
    """Expected by hand from Slurm's documented forms: ``2(x2),1`` is two tasks on each of the first two nodes, then
    one; the node list is expanded by scontrol itself (which reads a configuration first, as in any job)."""
    (tmp_path / "slurm.conf").write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=gpu[07-09] CPUs=1\n")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    env = {"SLURM_STEP_NODELIST": "gpu[07-09]", "SLURM_STEP_TASKS_PER_NODE": "2(x2),1"}
    assert slurm_placement(env) == ["gpu07", "gpu07", "gpu08", "gpu08", "gpu09"]
    assert slurm_placement({"SLURM_JOB_NODELIST": "node[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)"}) == ["node1", "node2"]
    assert slurm_placement({}) == []
