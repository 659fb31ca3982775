"""tprimat's local launcher: one process per rank on this node (torchrun-style), output streamed with rank
prefixes, the first failure stops every rank, rank 0 hands back the records."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import psutil

from tprimat.backends.base import RunOutcome
from tprimat.execute.distributed import RankedRun
from tprimat.results.records import StepRecord

log = logging.getLogger("tprimat")
RECORDS = "records.json"


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


def spawn_local(spec: dict, run_dir: Path, nprocs: int, timeout_s: float | None = None) -> RankedRun:
    work = run_dir / ".ranks"
    work.mkdir(parents=True, exist_ok=True)
    for stale in (work / "rendezvous", work / RECORDS):
        stale.unlink(missing_ok=True)
    launch = work / "launch.json"
    launch.write_text(json.dumps({"spec": spec}))
    procs, tails, threads = [], [], []
    for rank in range(nprocs):
        proc = subprocess.Popen([sys.executable, "-m", "tprimat.execute.worker", str(launch)], env=_rank_env(rank, nprocs, work),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tail: deque = deque(maxlen=40)
        thread = threading.Thread(target=_forward, args=(rank, proc.stdout, tail), daemon=True)
        thread.start()
        procs.append(proc), tails.append(tail), threads.append(thread)
    _wait(procs, tails, threads, timeout_s)
    data = json.loads((work / RECORDS).read_text())
    return RankedRun([StepRecord(**s) for s in data["steps"]], data["rank_step_times"], data["rank_losses"],
                     RunOutcome(**data["outcome"]))


def _wait(procs: list, tails: list, threads: list, timeout_s: float | None) -> None:
    start = time.monotonic()
    try:
        while any(p.poll() is None for p in procs):
            failed = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed:
                rank, code = failed[0]
                raise RankFailed(f"rank {rank} exited with code {code}; its last output:\n" + "\n".join(tails[rank]))
            if timeout_s and time.monotonic() - start > timeout_s:
                raise RankFailed(f"ranks did not finish within {timeout_s:.0f} s")
            time.sleep(0.2)
        for thread in threads:
            thread.join(timeout=5)
        failed = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0]
        if failed:
            rank, code = failed[0]
            raise RankFailed(f"rank {rank} exited with code {code}; its last output:\n" + "\n".join(tails[rank]))
    finally:
        _stop(procs)


def _stop(procs: list) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
