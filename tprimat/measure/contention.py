"""Whether a run shared its machine: the CPU time processes outside the run used over its measured window, and on
NVIDIA GPUs the other processes on its devices. On a 2-core CPU a tiny run's step went from 0.41 s to 2.4 s beside
two niced processes (OpenMP threads wait on a preempted peer), and nothing in its result said so; pyperf warns of
an untuned system for the same reason. ``compare`` and ``gate`` flag a run measured beside other work.

Outside CPU time = the machine's busy CPU time (psutil.cpu_times: everything but idle and iowait) less the run's
own process tree's (this process, or the torchrun agent's tree when this rank was started by one, with every
descendant: ranks, data-loader workers, compile workers, and the children they waited for)."""

from __future__ import annotations

import os
import time
from typing import Optional

import psutil

SHARED_FLAG = 0.10  # other processes took more than 10% of the machine's CPU time over the window


BUSY = ("user", "nice", "system", "irq", "softirq", "steal")  # Linux's guest time is inside user and nice already


def busy_cpu_s() -> float:
    times = psutil.cpu_times()
    return sum(getattr(times, name, 0.0) for name in BUSY)


def run_root() -> psutil.Process:
    """The run's own tree: this process, or its launcher's where torchrun or srun started this rank (the node's
    other ranks are its siblings: torchrun's agent, or the step's slurmstepd, is their common parent)."""
    me = psutil.Process()
    launched = "TORCHELASTIC_RUN_ID" in os.environ or "SLURM_LOCALID" in os.environ
    return me.parent() if launched and me.parent() is not None else me


def tree_cpu_s(root: psutil.Process) -> float:
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:  # ended between the listing and the read: its time is in its parent's children_*
            continue
    return total


def snapshot(root: psutil.Process) -> tuple[float, float, float]:
    return time.monotonic(), busy_cpu_s(), tree_cpu_s(root)


class Contention:
    """Snapshots at the end of the warm-up (the measured window's start; before measuring, so its cost is never
    timed) and when the run stops (its end)."""

    def __init__(self):
        self.root = run_root()
        self.start: Optional[tuple[float, float, float]] = None
        self.end: Optional[tuple[float, float, float]] = None
        self._measuring = False

    def mark(self, measured: bool) -> None:
        if not measured and not self._measuring:
            self.start = snapshot(self.root)
        self._measuring = self._measuring or measured

    def whole(self) -> None:
        """A run whose ranks this process spawned (its steps are the ranks'): the window is the whole spawned run."""
        self.start, self._measuring = snapshot(self.root), True

    def stop(self) -> None:
        if self.start is not None and self._measuring:
            self.end = snapshot(self.root)

    def summary(self, gpu_indices: tuple[int, ...] = ()) -> dict:
        cores = psutil.cpu_count() or 1
        if self.start is None or self.end is None:
            return {"window_s": None, "cores": cores, "own_cpu_s": None, "outside_cpu_s": None,
                    "outside_cpu_share": None, "gpu_other_processes": other_gpu_processes(gpu_indices, self.root),
                    "note": "no measured window (no warm-up step ended before a measured one)"}
        window = self.end[0] - self.start[0]
        own = self.end[2] - self.start[2]
        outside = max(0.0, (self.end[1] - self.start[1]) - own)
        share = outside / (window * cores) if window > 0 else None
        return {"window_s": window, "cores": cores, "own_cpu_s": own, "outside_cpu_s": outside,
                "outside_cpu_share": share, "gpu_other_processes": other_gpu_processes(gpu_indices, self.root),
                "note": None}


def other_gpu_processes(indices: tuple[int, ...], root: psutil.Process) -> Optional[int]:
    """Compute processes on the run's GPUs that are not the run's (NVML); None where NVML cannot say."""
    if not indices:
        return None
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVIDIA driver or no nvidia-ml-py: not known
        return None
    try:
        ours = {root.pid, *(p.pid for p in root.children(recursive=True))}
        others = set()
        for index in indices:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            others |= {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)} - ours
        return len(others)
    except Exception:  # noqa: BLE001
        return None
    finally:
        pynvml.nvmlShutdown()


def shared(contention: Optional[dict]) -> Optional[str]:
    """Why a run's figures were measured beside other work, or None."""
    if not isinstance(contention, dict):
        return None
    share, gpu = contention.get("outside_cpu_share"), contention.get("gpu_other_processes")
    said = []
    if isinstance(share, (int, float)) and share > SHARED_FLAG:
        said.append(f"{share:.0%} of the machine's CPU time went to other processes")
    if isinstance(gpu, int) and gpu > 0:
        said.append(f"{gpu} other process(es) on its GPUs")
    return "; ".join(said) or None
