"""What tprimat's Hydra launchers (hydra_plugins/tprimat_launchers) do around each point of a sweep:
validate before launching, resume, per-rank set-up inside Slurm tasks, outcome collection, the summary."""

from __future__ import annotations

import csv
import functools
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Optional

from tprimat.execute.prepare import prepare
from tprimat.measure.devices import detect
from tprimat.results.result import RESULT_FILE, SCHEDULER, read_result, with_scheduler_reason, write_result, write_unsuccessful
from tprimat.results.steplog import rebuild
from tprimat.spec.build import SpecError, build_spec, spec_identity, spec_to_dict

log = logging.getLogger("tprimat")
LAST_SUMMARY: list[dict] = []  # rows of the last sweep run in this process (launch.py's exit code)


@functools.cache
def _hardware():
    return detect()


@functools.cache
def ok_results(root: str) -> dict[str, str]:
    """spec_hash -> path of every result under ``root`` that finished ok (the resume index)."""
    found = {}
    for path in Path(root).rglob(RESULT_FILE):
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if result.get("status") == "ok" and result.get("spec_hash"):
            found.setdefault(result["spec_hash"], str(path))
    return found


def prepare_point(point, config: dict) -> None:
    """Validate one point (its composed, plain config) on the submitting host; the check against the devices
    happens where it runs. Sets ``point.status`` to invalid (result written) or skipped (resume)."""
    hw = _hardware()
    try:
        spec = build_spec(config, hw)
    except SpecError as exc:
        return _invalid(point, exc.problems, None)
    prepared = prepare(spec, hw, dry_run=True)
    spec_dict = spec_to_dict(spec)
    problems = prepared.problems if spec.dry_run else prepared.all_problems  # a dry run records the backend's
    if problems:
        return _invalid(point, problems, spec_dict)
    point.spec_hash = spec_identity(spec_dict)
    if spec.resume_from and not spec.dry_run:
        done = ok_results(str(Path(spec.resume_from).resolve())).get(point.spec_hash)
        if done:
            point.status, point.reason = "skipped", f"identical spec already finished ok: {done}"


def _invalid(point, problems: list[str], spec: Optional[dict]) -> None:
    point.status, point.reason = "invalid", problems[0]
    write_unsuccessful(point.run_dir, "invalid", "\n".join(problems), spec=spec, overrides=point.overrides)


def init_task_rank() -> int:
    """Inside a submitit task (one per rank): export torch.distributed's variables from the Slurm / submitit
    environment so the run initialises from it; single-node jobs rendezvous through a file on loopback."""
    import submitit

    env = submitit.JobEnvironment()
    if env.num_tasks <= 1:
        return 0
    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    if env.num_nodes == 1:
        folder = Path(str(env.paths.folder))
        os.environ.setdefault("TPRIMAT_INIT_METHOD", f"file://{folder / f'rendezvous-{env.job_id}'}")
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env.global_rank


GENERIC = ("timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb", "nodes", "name",
           "stderr_to_stdout")
SLURM_ONLY = ("partition", "qos", "account", "constraint", "signal_delay_s", "array_parallelism",
              "additional_parameters", "setup", "srun_args", "comment", "exclude", "gres", "cpus_per_gpu",
              "gpus_per_task", "mem_per_gpu", "mem_per_cpu")


def make_executor(kind: str, params: dict):
    import submitit

    extra = {"slurm_max_num_timeout": params["max_num_timeout"]} if kind == "slurm" and "max_num_timeout" in params else {}
    executor = submitit.AutoExecutor(folder=params["submitit_folder"], cluster=kind, **extra)
    update = {k: params[k] for k in GENERIC if params.get(k) is not None}
    if kind == "slurm":
        update.update({f"slurm_{k}": params[k] for k in SLURM_ONLY if params.get(k) not in (None, {}, [])})
    executor.update_parameters(**update)
    return executor


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


def record_job_failure(point, job, exc: Exception) -> str:
    """A job that was cancelled, timed out or died: a ``failed`` result (unless it finished ok), the reason, led by
    the node(s) whose task ended badly where srun said so."""
    lost = lost_tasks(job)
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


def record_scheduler_end(point, job, settle_s: float = 60.0) -> None:
    """A job that caught the scheduler's SIGTERM wrote its own failed result and returned: say what the
    scheduler did (cancelled, out of time, preempted) in that result too. The scheduler's final state can
    lag the job's return by a few seconds (still RUNNING while it completes, or not yet readable: UNKNOWN on a
    loaded machine): it is polled until it is final, for that long at most."""
    existing = point.run_dir / RESULT_FILE
    try:
        own = read_result(existing)
    except (OSError, ValueError):
        return
    if own.get("status") == "ok":
        return
    deadline, state = time.monotonic() + settle_s, _state(job)
    slurm = "slurm" in type(job).__module__

    def settling(state: str) -> bool:
        return state.startswith(NOT_YET_FINAL) or (slurm and state.startswith("UNKNOWN"))

    while settling(state) and time.monotonic() < deadline:
        time.sleep(1)
        state = _state(job)
    if state.startswith(ENDED_BY_SCHEDULER):
        write_result(with_scheduler_reason(own, f"job {job.job_id} ended {state}"), point.run_dir)


def _state(job) -> str:
    try:
        return str(job.state)
    except Exception:  # noqa: BLE001 - the scheduler may not know the job any more
        return "UNKNOWN"


def summary_rows(points) -> list[dict]:
    rows = []
    for p in points:
        result = {}
        path = p.run_dir / RESULT_FILE
        if path.exists():
            try:
                result = json.loads(path.read_text())
            except ValueError:
                result = {}
        status = "skipped" if p.status == "skipped" else result.get("status", "missing")
        summary = result.get("summary") or {}
        reason = p.reason or (result.get("error") or "").strip().splitlines()[0:1]
        rows.append({"point": p.idx, "overrides": " ".join(p.overrides), "status": status,
                     "tokens_per_s_per_device": summary.get("tokens_per_s_per_device"),
                     "step_time_s_median": (summary.get("step_time_s") or {}).get("median"),
                     "mfu": summary.get("mfu"), "peak_memory_gib": summary.get("peak_memory_gib"),
                     "reason": reason if isinstance(reason, str) else " ".join(reason),
                     "run_dir": str(p.run_dir)})
    return rows


def write_summary(points, sweep_dir: Path) -> list[dict]:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    rows = summary_rows(points)
    LAST_SUMMARY[:] = rows
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(sweep_dir / "sweep_summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["point"])
        writer.writeheader()
        writer.writerows(rows)
    table = Table(title=f"sweep {sweep_dir}: {len(rows)} points")
    for header in ("#", "point", "status", "tokens/s/device", "median step s", "MFU", "peak GiB", "reason"):
        table.add_column(header, overflow="fold")
    fmt = lambda v, f: "" if v is None else format(v, f)  # noqa: E731
    lines = ["| # | point | status | tokens/s/device | median step s | MFU | peak GiB | reason |", "|---" * 8 + "|"]
    for r in rows:
        cells = [str(r["point"]), r["overrides"] or "(defaults)", r["status"], fmt(r["tokens_per_s_per_device"], ",.0f"),
                 fmt(r["step_time_s_median"], ".3f"), fmt(r["mfu"], ".1%"), fmt(r["peak_memory_gib"], ".2f"), r["reason"]]
        table.add_row(*map(escape, cells))  # a reason may hold "[...]" (gloo's source lines): text, not markup
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    (sweep_dir / "sweep_summary.md").write_text("\n".join(lines) + "\n")
    Console(width=200).print(table)
    return rows
