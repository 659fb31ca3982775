"""A submitted job's end, as tprimat records it: rank 0's return awaited (not every task's: a node cut off may never
report), a job whose rank 0 stopped recording steps mid-run cancelled, which node was lost (srun's own lines, and
the nodes Slurm itself holds lost), what the scheduler did, and a job left waiting on a task it cannot reach
cancelled."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import time
from pathlib import Path
from typing import Optional

from tprimat.execute.rank import hostnames
from tprimat.results.result import RESULT_FILE, SCHEDULER, read_result, with_scheduler_reason, write_result, write_unsuccessful
from tprimat.results.steplog import STEPS_FILE, rebuild

log = logging.getLogger("tprimat")


LOST = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (.+)")  # srun's line for a task that ended badly
NOT_LAUNCHED = re.compile(r"srun: error: Task launch for \S+ failed on node (\S+): (.+)")  # a node that never started


def lost_tasks(job) -> list[str]:
    """Where srun said a task ended badly ("srun: error: node2: task 1: Killed"), from the job's own logs: the
    node lost, named as Slurm names it."""
    try:
        folder = Path(str(job.paths.folder))
    except Exception:  # noqa: BLE001 - a job without submitit's paths
        return []
    found = []
    for log_file in sorted(folder.glob(f"{job.job_id}_*_log.*")) if folder.is_dir() else []:
        try:
            text = log_file.read_text(errors="replace")
        except OSError:
            continue
        found += [f"{m.group(1)} (task {m.group(2)}: {m.group(3).strip()[:80]})" for m in LOST.finditer(text)]
        found += [f"{m.group(1)} (task launch failed: {m.group(2).strip()[:80]})" for m in NOT_LAUNCHED.finditer(text)]
    return list(dict.fromkeys(found))


def job_nodes(job) -> list[str]:
    """The job's nodes in Slurm's order (task 0 on the first), from Slurm's own sacct; [] off Slurm."""
    if "slurm" not in type(job).__module__:
        return []
    try:
        nodes = subprocess.run(["sacct", "-j", str(job.job_id), "-X", "-n", "-P", "-o", "NodeList"], capture_output=True,
                               text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [] if not nodes or nodes[0] in ("None", "(null)", "None assigned") else hostnames(nodes[0])


def slurm_lost_nodes(job) -> list[str]:
    """The job's nodes that Slurm itself holds lost (not responding, down, draining, failing) with its reason, from
    Slurm's own ``sacct`` and ``sinfo``: "node2 (down*: Not responding)"; [] for a job not on Slurm."""
    nodes = job_nodes(job)
    if not nodes:
        return []
    try:
        lines = subprocess.run(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%t|%E"], capture_output=True,
                               text=True, timeout=30).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return []
    lost = []
    for name, state, reason in (line.split("|", 2) for line in dict.fromkeys(lines) if line.count("|") == 2):
        if state.endswith("*") or state.startswith(("down", "drain", "fail")):
            lost.append(f"{name} ({state}: {reason})" if reason.strip() not in ("", "none") else f"{name} ({state})")
    return lost


def lost_nodes(job) -> list[str]:
    """What srun said of the job's tasks that ended badly, then the job's nodes Slurm holds lost."""
    return lost_tasks(job) + slurm_lost_nodes(job)


def record_job_failure(point, job, exc: Exception) -> str:
    """A job that was cancelled, timed out or died: a ``failed`` result (unless it finished ok), the reason, led by
    the node(s) whose task ended badly where srun said so."""
    lost = lost_nodes(job)
    reason = (f"job {job.job_id} ended {_state(job)}" + (f", lost {', '.join(lost)}" if lost else "")
              + f": {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}")
    existing = point.run_dir / RESULT_FILE
    try:
        own = read_result(existing) if existing.exists() else rebuild(point.run_dir)
    except ValueError:
        own = None
    if own is None:
        write_unsuccessful(point.run_dir, "failed", reason, overrides=point.overrides, warnings=[SCHEDULER + reason])
    elif own.get("status") != "ok":  # the job's own failed result (a caught SIGTERM) or its steps: keep them
        write_result(with_scheduler_reason(own, reason), point.run_dir)
    log.error("#%d %s", point.idx, reason)
    return reason


ENDED_BY_SCHEDULER = ("CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "DEADLINE")
NOT_YET_FINAL = ("RUNNING", "COMPLETING", "PENDING")  # and, from Slurm, UNKNOWN: sacct not readable yet


GRACE_S = 10.0  # rank 0 returned its failed result: the job's other tasks end within this, or the job is cancelled


def record_scheduler_end(point, job, settle_s: float = 60.0, grace_s: float = GRACE_S) -> None:
    """A job whose rank 0 wrote its own failed result and returned (a caught SIGTERM, a rank lost): say what the
    scheduler did (cancelled, out of time, preempted) and which nodes srun or Slurm said were lost in that result
    too. A job still running ``grace_s`` after
    (srun waiting on a task on a node it cannot reach) is cancelled, and the result says tprimat cancelled it.
    The scheduler's final state can lag the job's return by a few seconds (still RUNNING while it completes, or
    not yet readable: UNKNOWN on a loaded machine): it is polled until it is final, for ``settle_s`` at most."""
    existing = point.run_dir / RESULT_FILE
    try:
        own = read_result(existing)
    except (OSError, ValueError):
        return
    if own.get("status") == "ok":
        return
    state, by_tprimat = _settled(job, grace_s), ""
    if state.startswith("RUNNING"):
        job.cancel(check=False)
        state = _settled(job, settle_s)
        if state.startswith("CANCELLED"):  # (it may have completed meanwhile: then nothing is said)
            by_tprimat = f" (cancelled by tprimat: still running {grace_s:g} s after rank 0 returned its failed result)"
    lost = lost_nodes(job)
    if by_tprimat or lost or state.startswith(ENDED_BY_SCHEDULER):
        reason = f"job {job.job_id} ended {state}{by_tprimat}" + (f", lost {', '.join(lost)}" if lost else "")
        write_result(with_scheduler_reason(own, reason), point.run_dir)


def _settled(job, wait_s: float) -> str:
    """The job's state once final, or after ``wait_s``."""
    deadline, state = time.monotonic() + wait_s, _state(job)
    slurm = "slurm" in type(job).__module__
    while (state.startswith(NOT_YET_FINAL) or (slurm and state.startswith("UNKNOWN"))) and time.monotonic() < deadline:
        time.sleep(1)
        state = _state(job)
    return state


def _state(job) -> str:
    """The job's state asked of the scheduler now (submitit's own ``state`` is a cache it refreshes every few
    minutes on a long job)."""
    try:
        return str(job.watcher.get_state(job.job_id, mode="force") if "slurm" in type(job).__module__ else job.state)
    except Exception:  # noqa: BLE001 - the scheduler may not know the job any more
        return "UNKNOWN"


STATE_EVERY_S = 15.0  # while waiting on rank 0, the scheduler is asked this often whether the job has ended


class Stalled(RuntimeError):
    """Rank 0 recorded no step for too long in the middle of a run: the job was cancelled."""


class StepWatch:
    """Rank 0's progress as its steps.jsonl shows it (on the disk the launcher shares with the job). Armed between a
    run's first recorded step and its next-to-last (``training.max_steps``; a new repeat re-arms it; a file written
    before the watch began is an earlier run's): a run that records
    no step for ``limit_s`` there, nor for ten times its slowest step, is stalled. Its collectives cannot wait
    longer than ``benchmark.collective_timeout_s``, so a longer silence is rank 0 itself gone (frozen, or its node
    cut off from the disk), not a slow collective."""

    def __init__(self, run_dir: Path, max_steps: int, limit_s: float) -> None:
        self.path, self.max_steps, self.limit_s = Path(run_dir) / STEPS_FILE, max_steps, limit_s
        self.size, self.changed_at, self.armed, self.slowest_s = -1, time.monotonic(), False, 0.0
        self.since = time.time()  # a steps.jsonl last written before this is an earlier run's

    def silent_s(self) -> float:
        """Seconds without a new step while armed (0 when not armed)."""
        try:
            stat = self.path.stat()
        except OSError:
            return 0.0
        if stat.st_mtime < self.since:
            return 0.0
        if stat.st_size != self.size:
            self.size, self.changed_at = stat.st_size, time.monotonic()
            last = last_step(self.path)
            # disarmed from the next-to-last step on: backends that count steps from 0 end at max_steps - 1
            self.armed = last is not None and last.get("step", self.max_steps) < self.max_steps - 1
            self.slowest_s = max(self.slowest_s, float((last or {}).get("step_time_s") or 0.0))
        silent = time.monotonic() - self.changed_at
        return silent if self.armed and silent > max(self.limit_s, 10 * self.slowest_s) else 0.0


def last_step(path: Path) -> Optional[dict]:
    """The last whole step line of a steps.jsonl (read from its end)."""
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - 8192))
        for line in reversed(f.read().splitlines()):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            return data if isinstance(data, dict) and "step" in data else None
    return None


def rank0_return(point, job, poll_s: float = 2.0):
    """Task 0's return value (rank 0 writes the result), waited for alone: a task on a node cut off may never
    report. A job whose rank 0 stalls mid-run (StepWatch, three collective timeouts) is cancelled and raises
    ``Stalled``, as a job the scheduler ended raises its own error."""
    config = point.config or {}
    limit_s = 3 * float((config.get("benchmark") or {}).get("collective_timeout_s") or 100.0)
    watch = StepWatch(point.run_dir, int((config.get("training") or {}).get("max_steps") or 0), limit_s)
    task0, asked_at = (job.task(0) if getattr(job, "num_tasks", 1) > 1 else job), time.monotonic()
    while not task0.done():
        silent_s = watch.silent_s()
        if silent_s:
            job.cancel(check=False)
            _settled(job, 30.0)
            where = next(iter(job_nodes(job)), None)
            raise Stalled(f"lost {f'rank 0 on {where}' if where else 'rank 0'}: it recorded no step for {silent_s:.0f} s "
                          f"mid-run (3 x benchmark.collective_timeout_s = {limit_s:g} s): cancelled by tprimat")
        if time.monotonic() - asked_at > STATE_EVERY_S:  # refreshes submitit's cached state: an ended job is seen
            _state(job)
            asked_at = time.monotonic()
        time.sleep(poll_s)
    return task0.result()
