"""Multi-process runs: rank environment (torchrun, Slurm, or tprimat's own local launch), process-group
set-up, and the gather of every rank's step times so a result shows the slowest rank and the spread."""

from __future__ import annotations

import logging
import os
import re
import socket
import statistics
import sys
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import torch
import torch.distributed as dist

from tprimat.backends.base import RunOutcome
from tprimat.execute.rank import RankEnv
from tprimat.execute.watch import RankWatch, meet, on_failure, tighten
from tprimat.results.records import StepRecord

INIT_TIMEOUT_S, COLLECTIVE_TIMEOUT_S = 300.0, 100.0  # benchmark.init_timeout_s, benchmark.collective_timeout_s


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: ``node[07-09,12],gpu3`` -> ``node07``."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        raise ValueError(f"SLURM_JOB_NODELIST={nodelist!r} is not a Slurm node list")
    prefix, ranges = match.groups()
    return prefix + ranges.split(",")[0].split("-")[0] if ranges else prefix


def slurm_rendezvous(environ=os.environ) -> dict[str, str]:
    """MASTER_ADDR and MASTER_PORT for ranks started by srun (one task per rank): the job's first node, and a
    port derived from the job id so that two jobs sharing a node do not collide."""
    return {"MASTER_ADDR": first_host(environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST", "")),
            "MASTER_PORT": str(20000 + int(environ.get("SLURM_JOB_ID", "0")) % 20000)}


def interface_to(host: str) -> Optional[str]:
    """The network interface this machine reaches ``host`` through (the one holding the source address the kernel
    picks for it), or None: gloo then falls back to its own choice (the address of this host's name)."""
    import psutil

    try:
        address = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((address, 9))  # a UDP "connect" sends nothing: it asks the routing table
            local = probe.getsockname()[0]
    except OSError:
        return None
    return next((name for name, addrs in psutil.net_if_addrs().items()
                 if any(a.family == socket.AF_INET and a.address == local for a in addrs)), None)


def host_name() -> str:
    """The node a rank runs on: Slurm's name for it where Slurm started the rank, else this machine's hostname."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def rendezvous_used() -> dict:
    return {"init_method": os.environ.get("TPRIMAT_INIT_METHOD", "env://"),
            "master_addr": os.environ.get("MASTER_ADDR"), "master_port": os.environ.get("MASTER_PORT"),
            "interface": os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("NCCL_SOCKET_IFNAME")}


def exit_rank(code: int) -> None:
    """End a rank's process once its work is handed over (records written, process group destroyed): flush and
    leave without interpreter teardown. Tearing down torch.distributed's C++ state at exit can abort a finished
    rank ("terminate called without an active exception", seen with gloo and DTensor meshes), which would turn
    a complete run into a failed one."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def device_type(platform_name: str) -> str:
    """torch.distributed's device kind for a platform: ROCm runs through torch.cuda too."""
    return "cpu" if platform_name == "cpu" else "cuda"


def init_process_group(env: RankEnv, device_type: str, init_timeout_s: float = INIT_TIMEOUT_S) -> RankWatch:
    """Form the default group (bounded by ``init_timeout_s``) over the right link; the watch that goes with it."""
    if device_type == "cuda":
        torch.cuda.set_device(env.local_rank)
    elif env.source == "tprimat":  # local ranks: keep gloo on loopback
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if env.source == "slurm" and "MASTER_ADDR" not in os.environ:
        os.environ.update(slurm_rendezvous())
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if device_type == "cpu" and "GLOO_SOCKET_IFNAME" not in os.environ:
        found = interface_to(os.environ["MASTER_ADDR"])  # the link this node reaches the rendezvous on
        if found:
            os.environ["GLOO_SOCKET_IFNAME"] = found
    return meet(env, "nccl" if device_type == "cuda" else "gloo", host_name(), init_timeout_s)


@dataclass(frozen=True)
class RankedRun:
    steps: list[StepRecord]  # rank 0's records, step_time_s = the slowest rank's time for that step
    rank_step_times: list[list[float]]  # [rank][step index]
    rank_losses: list[list[float]]  # [rank][step index]: the loss each rank reported
    outcome: RunOutcome  # what the backend handed back on this rank (effective settings, audit)
    hosts: list[str] = field(default_factory=list)  # [rank]: the node it ran on
    rendezvous: dict = field(default_factory=dict)  # how the ranks met (rank 0's view)


def run_on_this_rank(run: Callable[[Callable[[StepRecord], None]], RunOutcome], env: RankEnv, device_type: str,
                     on_step: Optional[Callable[[StepRecord], None]] = None, init_timeout_s: float = INIT_TIMEOUT_S,
                     collective_timeout_s: float = COLLECTIVE_TIMEOUT_S) -> Optional[RankedRun]:
    """Train on this rank through ``run(on_step)``; rank 0 returns every rank's timings, others None. Every wait
    is bounded (tprimat.execute.watch): a collective that fails raises, on rank 0 naming the ranks lost."""
    watch = init_process_group(env, device_type, init_timeout_s)
    records: list[StepRecord] = []
    tightened: set = set()

    def collect(record: StepRecord) -> None:
        records.append(record)
        tighten(collective_timeout_s, tightened)
        if on_step and env.rank == 0:
            on_step(record)

    try:
        outcome = run(collect)
        gathered: list = [None] * env.world_size
        dist.all_gather_object(gathered, (host_name(), [(r.step_time_s, r.loss) for r in records]))
        dist.barrier()
    except Exception as exc:
        failure = on_failure(watch, exc, collective_timeout_s)
        if failure is exc:
            raise
        raise failure from exc
    finally:
        watch.stop()
        dist.destroy_process_group()
    return ranked(records, gathered, outcome) if env.rank == 0 else None


def ranked(records: list[StepRecord], gathered: list, outcome: RunOutcome) -> RankedRun:
    """Rank 0's records with each step's time the slowest rank's, beside every rank's times, losses and node."""
    times = [[t for t, _ in rank] for _, rank in gathered]
    losses = [[loss for _, loss in rank] for _, rank in gathered]
    slowest = [max(step) for step in zip(*times)]
    return RankedRun([replace(r, step_time_s=t) for r, t in zip(records, slowest)], times, losses, outcome,
                     [host for host, _ in gathered], rendezvous_used())


def rank_summary(run: RankedRun) -> dict:
    """Per-rank median over measured steps, the slowest rank, the spread (slowest / fastest - 1), and how far
    the ranks' reported losses are apart (0 when every rank saw the same global loss)."""
    measured = [i for i, r in enumerate(run.steps) if not r.warmup]
    medians = [statistics.median(times[i] for i in measured) for times in run.rank_step_times]
    slowest = max(range(len(medians)), key=medians.__getitem__)
    loss_gap = max((max(step) - min(step) for step in zip(*run.rank_losses)), default=0.0)
    hosts = run.hosts or [None] * len(medians)
    per_node: dict = {}
    for host, median in zip(hosts, medians):
        per_node.setdefault(host or "not stated", []).append(median)
    return {"world_size": len(run.rank_step_times),
            "per_rank": [{"rank": r, "host": h, "step_time_s_median": m} for r, (h, m) in enumerate(zip(hosts, medians))],
            "per_node": {h: {"ranks": len(v), "step_time_s_median": statistics.median(v)} for h, v in per_node.items()},
            "rendezvous": run.rendezvous or None,
            "slowest_rank": slowest, "spread": max(medians) / min(medians) - 1, "loss_max_abs_diff": loss_gap}
