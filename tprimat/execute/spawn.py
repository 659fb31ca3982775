"""tprimat's local launcher: one process per rank on this node (torchrun-style), output streamed with rank
prefixes, rank 0 hands back the records.

The ranks are forked from the process's forkserver (``tprimat.backends.native.forkserver``: torch, torch._dynamo and
the native backend imported once), not started as fresh interpreters that import them each; each rank gets the
environment it would have been started with (this process's, as it is now, and its rank's variables), its output
on a pipe of its own, and the name ``tprimat-rankN`` (what ps and top show). What is read once, when torch is
imported or the interpreter starts (TORCH_LOGS, TORCHDYNAMO_* and TORCHINDUCTOR_* settings, TMPDIR, the CPU
affinity and limits), comes from the forkserver's start: within one ``python launch.py`` the launcher's own; in a
process that runs many (a sweep in one process, a Python caller), its first run's.

Supervision: a rank watches a pipe from this launcher and kills itself when the launcher is gone, however it
went (a SIGKILL included), so a killed launcher never leaves ranks running; a thread per rank waits on it, so
the first rank to fail is known exactly and named, and the others are stopped (SIGTERM, then SIGKILL after a
grace period) within seconds of it. A signal to the launcher (``tprimat.execute.signals``) stops the ranks the
same way on its way out.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Optional

import psutil

from tprimat.backends.base import RunOutcome
from tprimat.backends.native.forkserver import forkserver
from tprimat.execute.distributed import RankedRun
from tprimat.results.records import StepRecord

log = logging.getLogger("tprimat")
RECORDS = "records.json"
GRACE_S = 5.0  # SIGTERM to SIGKILL for ranks that outlive the run
PR_SET_NAME = 15
RANK_NAME = "tprimat-rank{rank}"


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


def _die_with_launcher(launcher) -> None:
    """A rank's thread: the launcher holds the other end of this pipe until the rank ends; its end (the launcher
    gone, however it died) kills the rank."""
    try:
        launcher.recv_bytes()
    except (EOFError, OSError):
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def rank_main(launch: str, env: dict, output, launcher, rank: int) -> None:
    """In the forked process: the rank's output to its pipe, its environment, name and threads, then the worker
    (``tprimat.execute.worker``), which ends the process."""
    for fd in (1, 2):
        os.dup2(output.fileno(), fd)
    output.close()
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # line by line to the launcher, whatever the forkserver had
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(env)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_NAME, RANK_NAME.format(rank=rank).encode(), 0, 0, 0)
    threading.Thread(target=_die_with_launcher, args=(launcher,), daemon=True).start()
    import torch

    threads = threads_of(env["OMP_NUM_THREADS"])
    if threads:
        torch.set_num_threads(threads)
    from tprimat.execute.worker import run

    run(launch)


def threads_of(omp_num_threads: str) -> int | None:
    """Torch's threads from OMP_NUM_THREADS, which OpenMP also reads as a list per nesting level ("4,2"); None
    where it gives no count (torch keeps its own)."""
    first = omp_num_threads.split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None


class Ranks:
    """The running ranks: their processes, output tails, and exits in the order they happened."""

    def __init__(self, launch: Path, work: Path, nprocs: int) -> None:
        self.exits: queue.Queue = queue.Queue()  # (rank, exit code), in the order the ranks exited
        self.procs, self.tails, self.threads, self.ended, self.lifelines = [], [], [], [], []
        try:
            context = forkserver("tprimat.execute.worker")
            # every rank started before any watcher joins one: multiprocessing polls its children at each start,
            # and an exit status read twice is lost
            streams = [self._start(context, launch, work, rank, nprocs) for rank in range(nprocs)]
            for rank, stream in enumerate(streams):
                tail: deque = deque(maxlen=40)
                self.tails.append(tail)
                self.threads.append(threading.Thread(target=_forward, args=(rank, stream, tail), daemon=True))
                self.threads[-1].start()
                threading.Thread(target=self._watch, args=(rank,), daemon=True).start()
        except BaseException:  # a signal or a failure while starting them: none of those started runs on
            for proc in self.procs:
                proc.kill()
            for lifeline in self.lifelines:
                lifeline.close()
            raise

    def _start(self, context, launch: Path, work: Path, rank: int, nprocs: int):
        """Fork one rank; its output stream (read here)."""
        receive, output = context.Pipe(duplex=False)
        watch, lifeline = context.Pipe(duplex=False)
        self.lifelines.append(lifeline)
        proc = context.Process(target=rank_main, args=(str(launch), _rank_env(rank, nprocs, work), output, watch, rank),
                               name=RANK_NAME.format(rank=rank))  # not daemonic: a rank may start processes of its own
        proc.start()
        self.procs.append(proc)
        self.ended.append(threading.Event())
        output.close()
        watch.close()
        stream = os.fdopen(os.dup(receive.fileno()), "r", errors="replace")
        receive.close()
        return stream

    def _watch(self, rank: int) -> None:
        """The only caller of the rank's join (a forked process's exit status is read once)."""
        self.procs[rank].join()
        self.ended[rank].set()
        self.exits.put((rank, self.procs[rank].exitcode))

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

    def _signal(self, rank: int, signum: int) -> None:
        if not self.ended[rank].is_set():
            try:
                os.kill(self.procs[rank].pid, signum)
            except ProcessLookupError:  # ended between the check and the signal
                pass

    def stop(self) -> None:
        """SIGTERM to every live rank, SIGKILL to any still alive after the grace period."""
        for rank in range(len(self.procs)):
            self._signal(rank, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        for rank, ended in enumerate(self.ended):
            if not ended.wait(timeout=max(0.1, deadline - time.monotonic())):
                self._signal(rank, signal.SIGKILL)
                ended.wait(timeout=GRACE_S)
        for lifeline in self.lifelines:
            lifeline.close()


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
