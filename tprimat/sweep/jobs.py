"""A submitted job's end, as tprimat records it: which node was lost (srun's own lines, and the nodes Slurm itself
holds lost), what the scheduler did, and a job left waiting on a task it cannot reach cancelled."""

from __future__ import annotations

import logging
import re
import subprocess
import time
from pathlib import Path

from tprimat.results.result import RESULT_FILE, SCHEDULER, read_result, with_scheduler_reason, write_result, write_unsuccessful
from tprimat.results.steplog import rebuild

log = logging.getLogger("tprimat")


LOST = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (.+)")  # srun's line for a task that ended badly


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
    return list(dict.fromkeys(found))


def slurm_lost_nodes(job) -> list[str]:
    """The job's nodes that Slurm itself holds lost (not responding, down, draining, failing) with its reason, from
    Slurm's own ``sacct`` and ``sinfo``: "node2 (down*: Not responding)"; [] for a job not on Slurm."""
    if "slurm" not in type(job).__module__:
        return []
    try:
        nodes = subprocess.run(["sacct", "-j", str(job.job_id), "-X", "-n", "-P", "-o", "NodeList"], capture_output=True,
                               text=True, timeout=30).stdout.split()
        if not nodes or nodes[0] in ("None", "(null)"):
            return []
        lines = subprocess.run(["sinfo", "-h", "-N", "-n", nodes[0], "-o", "%N|%t|%E"], capture_output=True, text=True,
                               timeout=30).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return []
    lost = []
    for name, state, reason in (line.split("|", 2) for line in dict.fromkeys(lines) if line.count("|") == 2):
        if state.endswith("*") or state.startswith(("down", "drain", "fail")):
            lost.append(f"{name} ({state}: {reason})" if reason.strip() not in ("", "none") else f"{name} ({state})")
    return lost


def record_job_failure(point, job, exc: Exception) -> str:
    """A job that was cancelled, timed out or died: a ``failed`` result (unless it finished ok), the reason, led by
    the node(s) whose task ended badly where srun said so."""
    lost = lost_tasks(job) + slurm_lost_nodes(job)
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
    scheduler did (cancelled, out of time, preempted) in that result too. A job still running ``grace_s`` after
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
    if by_tprimat or state.startswith(ENDED_BY_SCHEDULER):
        lost = slurm_lost_nodes(job)
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
    try:
        return str(job.state)
    except Exception:  # noqa: BLE001 - the scheduler may not know the job any more
        return "UNKNOWN"
