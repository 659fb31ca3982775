"""Find and read result files (live runs and ingested logs alike); nothing here runs a benchmark."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tprimat.results.readfile import UnreadableFile, read_json
from tprimat.results.result import RESULT_FILE, check_result, from_json
from tprimat.results.sane import problem


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


RESULT_MARK = "schema_version"  # what every tprimat result holds, and no file of another kind that it writes


def candidate_files(paths: list[str]) -> list[Path]:
    """Every JSON file under the paths (W&B's own files left out), and every path named, whatever it is: the
    reader refuses what is not a regular file, by name."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            # W&B's files and the run's own hidden folders (.ranks: a spawned run's launch and rank records) left out
            files += sorted(p for p in path.rglob("*.json") if "wandb" not in p.parts
                            and not any(part.startswith(".") for part in p.relative_to(path).parts[:-1]))
        elif path.exists() or path.is_symlink():
            files.append(path)
    return files


def measured_problem(result: dict) -> str | None:
    """A result whose figures stand on no measured step is not compared."""
    steps = result.get("steps") or []
    summary = result.get("summary") or {}
    if summary.get("measured_steps") == 0 or (steps and all(s.get("warmup") for s in steps)):
        return "no measured steps (every step is warm-up, or summary.measured_steps is 0)"
    return None


def cut(text: str, chars: int = 300) -> str:
    """A reason on one line, at most ``chars`` long (jsonschema quotes whole objects)."""
    line = " ".join(text.split())
    return line if len(line) <= chars else line[:chars] + " ..."


def looks_like_a_result(path: Path, data) -> bool:
    """A file named result.json, or an object with a ``schema_version``: refused by name where it is broken. Any
    other JSON (a DeepSpeed config, a Hydra dump) is noted and left."""
    return path.name == RESULT_FILE or (isinstance(data, dict) and RESULT_MARK in data)


def read_one(path: Path, report: LoadReport) -> dict | None:
    """The file's result as compare reads it (its steps as rows), or None with why in ``report``."""
    try:
        data = read_json(path)
    except UnreadableFile as exc:
        report.skipped.append((path, str(exc)))
        return None
    if isinstance(data, dict) and data.get("kind") == "tprimat_preflight":
        report.preflights.append(data)
        return None
    if not looks_like_a_result(path, data):
        report.notes.append(f"{path}: not a tprimat result (JSON of another kind): not read")
        return None
    if isinstance(data, dict) and data.get("status") not in ("ok", None):
        error = str(data.get("error") or "").strip().splitlines()
        report.skipped.append((path, f"status {data['status']}" + (f": {error[0][:200]}" if error else "")))
        return None
    problems = check_result(data)  # what tprimat check says of it
    if problems:
        report.skipped.append((path, f"refused by tprimat check: {cut(problems[0])}"))
        return None
    try:
        result = from_json(data)  # stored step columns (schema 2.0) as rows
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        report.skipped.append((path, f"does not match the result schema: {type(exc).__name__}: {exc}"))
        return None
    if why := problem(result) or measured_problem(result):
        report.skipped.append((path, f"cannot be compared: {why}"))
        return None
    return result


def load(paths: list[str]) -> LoadReport:
    """The results under ``paths`` that ``tprimat check`` accepts and compare can read, each run once (by its
    ``run_id``); every other result file is in ``skipped`` with why (a run_id read twice with different contents
    is a conflict: neither is read), every other JSON file in ``notes``."""
    report = LoadReport([], [], [])
    seen: dict[str, Loaded] = {}
    conflicted: set = set()
    for path in candidate_files(paths):
        result = read_one(path, report)
        if result is None:
            continue
        run_id = result.get("run_id")
        first = seen.get(run_id) if run_id else None
        if run_id in conflicted:
            report.skipped.append((path, f"conflict: run_id {run_id} is in files with other contents: not read"))
        elif first is None:
            seen[run_id] = Loaded(path, result)
            report.results.append(seen[run_id])
        elif first.result == result:
            report.notes.append(f"{path}: run_id {run_id} already read from {first.path}: counted once")
        else:  # which one is the run cannot be told: neither is read
            said = "(a copy edited after the run?): neither is read"
            conflicted.add(run_id)
            report.results = [r for r in report.results if r.path != first.path]
            report.skipped += [(first.path, f"conflict: run_id {run_id} is also in {path} with other contents {said}"),
                               (path, f"conflict: run_id {run_id} is also in {first.path} with other contents {said}")]
    return report
