"""Find and read result files (live runs and ingested logs alike); nothing here runs a benchmark."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tprimat.compare.sane import problem
from tprimat.results.result import check_result, from_json


@dataclass(frozen=True)
class Loaded:
    path: Path
    result: dict


@dataclass
class LoadReport:
    results: list[Loaded]
    skipped: list[tuple[Path, str]]  # (path, why)
    preflights: list[dict]
    notes: list[str] = field(default_factory=list)  # what was read once though found twice


def candidate_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.json") if "wandb" not in p.parts)
        elif path.exists():
            files.append(path)
    return files


def measured_problem(result: dict) -> str | None:
    """A result whose figures stand on no measured step is not compared."""
    steps = result.get("steps") or []
    summary = result.get("summary") or {}
    if summary.get("measured_steps") == 0 or (steps and all(s.get("warmup") for s in steps)):
        return "no measured steps (every step is warm-up, or summary.measured_steps is 0)"
    return None


def load(paths: list[str]) -> LoadReport:
    """The results under ``paths`` that ``tprimat check`` accepts and compare can read, each run once (by its
    ``run_id``); every other result file is in ``skipped`` with why."""
    report = LoadReport([], [], [])
    seen: dict[str, Path] = {}
    for path in candidate_files(paths):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            report.skipped.append((path, f"not JSON: {exc}"))
            continue
        if isinstance(data, dict) and data.get("kind") == "tprimat_preflight":
            report.preflights.append(data)
            continue
        if not isinstance(data, dict) or "schema_version" not in data or "status" not in data:
            continue  # some other JSON file (a DeepSpeed config, a Hydra dump)
        if data.get("status") != "ok":
            error = str(data.get("error") or "").strip().splitlines()
            report.skipped.append((path, f"status {data['status']}" + (f": {error[0][:200]}" if error else "")))
            continue
        problems = check_result(data)  # what tprimat check says of it
        if problems:
            report.skipped.append((path, f"refused by tprimat check: {problems[0]}"))
            continue
        try:
            data = from_json(data)  # stored step columns (schema 2.0) as rows
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            report.skipped.append((path, f"does not match the result schema: {type(exc).__name__}: {exc}"))
            continue
        if why := problem(data) or measured_problem(data):
            report.skipped.append((path, f"cannot be compared: {why}"))
            continue
        run_id = data.get("run_id")
        if run_id and run_id in seen:
            report.notes.append(f"{path}: run_id {run_id} already read from {seen[run_id]}: counted once")
            continue
        if run_id:
            seen[run_id] = path
        report.results.append(Loaded(path, data))
    return report
