"""What tprimat's Hydra launchers (hydra_plugins/tprimat_launchers) do around each point of a sweep:
validate before launching, resume, per-rank set-up inside Slurm tasks, outcome collection, the summary."""

from __future__ import annotations

import csv
import functools
import json
import logging
import os
from pathlib import Path
from typing import Optional

from tprimat.execute.prepare import prepare
from tprimat.measure.devices import detect
from tprimat.results.result import RESULT_FILE, write_unsuccessful
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


def not_requeued(additional: dict) -> dict:
    """sbatch --no-requeue unless the sweep asks otherwise: a point's outcome is recorded once, when its job ends
    (a failed point runs again on resume); a job Slurm requeued after a node failure would run again unobserved and
    overwrite that record."""
    return additional if {"requeue", "no_requeue"} & set(additional) else {**additional, "no_requeue": True}


def make_executor(kind: str, params: dict):
    import submitit

    extra = {"slurm_max_num_timeout": params["max_num_timeout"]} if kind == "slurm" and "max_num_timeout" in params else {}
    executor = submitit.AutoExecutor(folder=params["submitit_folder"], cluster=kind, **extra)
    update = {k: params[k] for k in GENERIC if params.get(k) is not None}
    if kind == "slurm":
        update.update({f"slurm_{k}": params[k] for k in SLURM_ONLY if params.get(k) not in (None, {}, [])})
        update["slurm_additional_parameters"] = not_requeued(params.get("additional_parameters") or {})
    executor.update_parameters(**update)
    return executor


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
