"""Find and read result files (live runs and ingested logs alike); nothing here runs a benchmark."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tprimat.compare.sane import problem
from tprimat.results.result import from_json, validate_result

KNOWN_VERSIONS = ("1.0", "1.1", "2.0")  # validated; a newer file is read as far as it goes


@dataclass(frozen=True)
class Loaded:
    path: Path
    result: dict


@dataclass
class LoadReport:
    results: list[Loaded]
    skipped: list[tuple[Path, str]]  # (path, why)
    preflights: list[dict]


def candidate_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.json") if "wandb" not in p.parts)
        elif path.exists():
            files.append(path)
    return files


def load(paths: list[str]) -> LoadReport:
    report = LoadReport([], [], [])
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
            report.skipped.append((path, f"status {data['status']}"))
            continue
        problems = validate_result(data) if data["schema_version"] in KNOWN_VERSIONS else []
        if problems:
            report.skipped.append((path, f"does not match the result schema: {problems[0]}"))
            continue
        try:
            data = from_json(data)  # stored step columns (schema 2.0) as rows
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            report.skipped.append((path, f"does not match the result schema: {type(exc).__name__}: {exc}"))
            continue
        if why := problem(data):
            report.skipped.append((path, f"cannot be compared: {why}"))
            continue
        report.results.append(Loaded(path, data))
    return report
