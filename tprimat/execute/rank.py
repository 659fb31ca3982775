"""This process's rank as the environment states it (torchrun, Slurm's srun, or tprimat's own local launch), the
node Slurm placed each rank on, and the exit codes of a run: all read before torch is imported, so that an entry point
that never trains here (a sweep submitting to Slurm, a refused command line) does not pay for importing it."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Optional

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2  # a run ok; failed (or cannot write); refused before it ran


@dataclass(frozen=True)
class RankEnv:
    rank: int
    local_rank: int
    world_size: int
    source: str  # torchrun | slurm | tprimat


def rank_env() -> Optional[RankEnv]:
    """This process's rank when something already started one process per rank, else None."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        source = env.get("TPRIMAT_LAUNCHER", "torchrun")
        return RankEnv(int(env["RANK"]), int(env.get("LOCAL_RANK", 0)), int(env["WORLD_SIZE"]), source)
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
        return RankEnv(int(env["SLURM_PROCID"]), int(env.get("SLURM_LOCALID", 0)), int(env["SLURM_NTASKS"]), "slurm")
    return None


def hostnames(nodelist: str) -> list[str]:
    """A Slurm node list (``node[1-2],gpu07``) as its hosts, in order, expanded by Slurm's own ``scontrol show
    hostnames``; [] where scontrol cannot be run."""
    try:
        return subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                              timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return []


def slurm_placement(environ=os.environ) -> list[str]:
    """The node Slurm placed each rank of this step on (srun's block distribution: ``SLURM_STEP_TASKS_PER_NODE``
    over the step's node list, expanded by Slurm's own ``scontrol show hostnames``); [] outside Slurm."""
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
    per_node = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
    if not nodelist or not per_node:
        return []
    hosts = hostnames(nodelist)
    counts = []
    for part in per_node.split(","):  # "2(x3),1": two tasks on each of three nodes, then one
        tasks, _, repeat = part.partition("(x")
        counts += [int(tasks)] * int(repeat.rstrip(")") or 1)
    return [host for host, n in zip(hosts, counts) for _ in range(n)]
