"""tprimat's local launcher: one process per rank on this node (torchrun-style), output streamed with rank
prefixes, rank 0 hands back the records.

Supervision: every rank gets the kernel's parent-death signal (SIGKILL), so a killed launcher never leaves
ranks running; a thread per rank waits on it, so the first rank to fail is known exactly and named, and the
others are stopped (SIGTERM, then SIGKILL after a grace period) within seconds of it. A signal to the launcher
(``tprimat.execute.signals``) stops the ranks the same way on its way out.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Optional

import psutil

from tprimat.backends.base import RunOutcome
from tprimat.execute.distributed import RankedRun
from tprimat.results.records import StepRecord

log = logging.getLogger("tprimat")
RECORDS = "records.json"
GRACE_S = 5.0  # SIGTERM to SIGKILL for ranks that outlive the run
PR_SET_PDEATHSIG = 1


class RankFailed(RuntimeError):
    pass


def _forward(rank: int, stream, tail: deque) -> None:
    for line in stream:
        line = line.rstrip("\n")
        tail.append(line)
        print(f"[rank {rank}] {line}", flush=True)


def _rank_env(rank: int, nprocs: int, work: Path) -> dict:
    env = dict(os.environ)
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nprocs), LOCAL_WORLD_SIZE=str(nprocs),
               TPRIMAT_LAUNCHER="tprimat", TPRIMAT_INIT_METHOD=f"file://{work / 'rendezvous'}",
               TPRIMAT_RANK_OUTPUT=str(work))
    env.setdefault("OMP_NUM_THREADS", str(max(1, (psutil.cpu_count() or 1) // nprocs)))
    return env


def die_with_parent(parent_pid: int):
    """A ``preexec_fn``: the child gets SIGKILL when the launcher dies, however it dies (Linux prctl). The
    function is looked up here, in the parent: the forked child only calls it."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None

    def arm() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent_pid:  # the launcher died before the signal was armed
                os._exit(1)

    return arm


class Ranks:
    """The running ranks: their processes, output tails, and exits in the order they happened."""

    def __init__(self, launch: Path, work: Path, nprocs: int) -> None:
        self.exits: queue.Queue = queue.Queue()  # (rank, returncode), in the order the ranks exited
        self.procs, self.tails, self.threads = [], [], []
        arm = die_with_parent(os.getpid())
        for rank in range(nprocs):  # every rank forked before any thread of ours starts
            self.procs.append(subprocess.Popen([sys.executable, "-m", "tprimat.execute.worker", str(launch)],
                                               env=_rank_env(rank, nprocs, work), stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True, preexec_fn=arm))
        for rank, proc in enumerate(self.procs):
            tail: deque = deque(maxlen=40)
            self.tails.append(tail)
            self.threads.append(threading.Thread(target=_forward, args=(rank, proc.stdout, tail), daemon=True))
            self.threads[-1].start()
            threading.Thread(target=self._watch, args=(rank, proc), daemon=True).start()

    def _watch(self, rank: int, proc: subprocess.Popen) -> None:
        self.exits.put((rank, proc.wait()))

    def failure(self, rank: int, code: int) -> RankFailed:
        self.threads[rank].join(timeout=2)  # its last words
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        return RankFailed(f"rank {rank} {how} (the first rank to fail); its last output:\n" + "\n".join(self.tails[rank]))

    def wait(self, timeout_s: Optional[float]) -> None:
        """Until every rank exits 0; the first to fail (or the timeout) raises, naming it."""
        deadline = time.monotonic() + timeout_s if timeout_s else None
        for _ in self.procs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                rank, code = self.exits.get(timeout=left)
            except queue.Empty:
                raise RankFailed(f"ranks did not finish within {timeout_s:.0f} s") from None
            if code != 0:
                raise self.failure(rank, code)
        for thread in self.threads:
            thread.join(timeout=5)

    def stop(self) -> None:
        """SIGTERM to every live rank, SIGKILL to any still alive after the grace period."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def spawn_local(spec: dict, run_dir: Path, nprocs: int, timeout_s: float | None = None,
                header: Optional[dict] = None) -> RankedRun:
    """Run ``nprocs`` ranks of ``spec``; rank 0 writes steps.jsonl (``header`` first) in ``run_dir``."""
    work = run_dir / ".ranks"
    work.mkdir(parents=True, exist_ok=True)
    for stale in (work / "rendezvous", work / RECORDS):
        stale.unlink(missing_ok=True)
    launch = work / "launch.json"
    launch.write_text(json.dumps({"spec": spec, "header": header or {}}))
    ranks = Ranks(launch, work, nprocs)
    try:
        ranks.wait(timeout_s)
    finally:
        ranks.stop()
    data = json.loads((work / RECORDS).read_text())
    return RankedRun([StepRecord(**s) for s in data["steps"]], data["rank_step_times"], data["rank_losses"],
                     RunOutcome(**data["outcome"]), data.get("hosts") or [], data.get("rendezvous") or {})
