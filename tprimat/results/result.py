"""The result file: versioned, validated against the shipped JSON Schema, written atomically.

Schema changelog:
- 1.0: first version (status, spec, plan, environment, steps, summary, warnings).
- 1.1: summary.provenance and summary.reported; null allowed for plan and summary figures that the evidence
  of an ingested log does not support (never a default in their place).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import uuid
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Optional

from tprimat.results import shapes

SCHEMA_VERSION = "1.1"
STATUSES = ("ok", "failed", "invalid", "dry_run")
RESULT_FILE = "result.json"


def new_run_id() -> str:
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def make_result(*, run_id: str, status: str, spec: Optional[dict], plan: Optional[dict] = None,
                environment: Optional[dict] = None, steps: Optional[list] = None, summary: Optional[dict] = None,
                error: Optional[str] = None, warnings: Optional[list] = None, framework: Optional[dict] = None,
                overrides: Optional[list] = None, wandb: Optional[dict] = None,
                spec_hash: Optional[str] = None, ranks: Optional[dict] = None, **sections) -> dict:
    """Every section of a result, in one place. ``sections``: the optional ones (audit, telemetry, source)."""
    from tprimat import __version__

    if status not in STATUSES:
        raise ValueError(f"status={status!r}: must be one of {', '.join(STATUSES)}")
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tprimat_version": __version__,
        "status": status,
        "error": error,
        "spec": spec,
        "spec_hash": spec_hash,
        "overrides": overrides or [],
        "framework": framework,
        "plan": plan,
        "environment": environment,
        "steps": steps or [],
        "summary": summary,
        "warnings": warnings or [],
        "wandb": wandb,
        "ranks": ranks,
        **_optional(sections),
    }


OPTIONAL_SECTIONS = ("audit", "telemetry", "source", "projection", "profile")


def _optional(sections: dict) -> dict:
    unknown = sorted(set(sections) - set(OPTIONAL_SECTIONS))
    if unknown:
        raise ValueError(f"result sections {unknown}: not in the result schema ({', '.join(OPTIONAL_SECTIONS)})")
    return sections


def write_unsuccessful(directory: Path, status: str, error: str, spec: Optional[dict] = None,
                       **fields) -> tuple[Path, dict]:
    """The one writer of ``invalid`` and ``failed`` results that have no measured steps to carry."""
    fields.setdefault("run_id", new_run_id())
    result = make_result(status=status, error=error, spec=spec, **fields)
    return write_result(result, directory), result


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(resources.files("tprimat").joinpath("results/schema/result.schema.json").read_text())


def validate_result(result: dict) -> list[str]:
    """Schema violations, one line each with the JSON path; empty when the result conforms. Steps are validated
    by shape (``tprimat.results.shapes``: one step of each shape, every step of a shape with errors)."""
    import jsonschema

    full = schema()
    validator = jsonschema.Draft202012Validator(full)
    steps, defs = result.get("steps") if isinstance(result, dict) else None, full.get("$defs", {})
    if not isinstance(steps, list) or not steps or not shapes.exact_for(full["properties"]["steps"], defs):
        errors = [(list(e.absolute_path), e.message) for e in validator.iter_errors(result)]
    else:
        errors = [(list(e.absolute_path), e.message) for e in validator.iter_errors({**result, "steps": []})]
        one_step = jsonschema.Draft202012Validator({"$defs": defs, **full["properties"]["steps"]["items"]})
        for group in shapes.by_shape(steps):
            if next(one_step.iter_errors(steps[group[0]]), None) is not None:
                errors += [(["steps", i, *e.absolute_path], e.message) for i in group for e in one_step.iter_errors(steps[i])]
    return [f"{'/'.join(str(p) for p in path) or '<root>'}: {message}"
            for path, message in sorted(errors, key=lambda e: e[0])]


def finite(value):
    """JSON has no NaN or infinity: non-finite numbers (a diverged loss) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


SCHEDULER = "scheduler: "  # the warning a sweep launcher adds when the scheduler ended the job (cancel, time limit)


def with_scheduler_reason(result: dict, reason: str) -> dict:
    """A job's own failed result with why the scheduler ended it in front (once)."""
    if any(w.startswith(SCHEDULER) for w in result.get("warnings") or []):
        return result
    error = f"{reason}; {result['error']}" if result.get("error") else reason
    return {**result, "error": error, "warnings": [SCHEDULER + reason, *(result.get("warnings") or [])]}


def scheduler_reason(directory: Path) -> Optional[str]:
    """The scheduler's reason a launcher already recorded in this run directory, if any."""
    try:
        written = json.loads((Path(directory) / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return next((w[len(SCHEDULER):] for w in written.get("warnings") or [] if w.startswith(SCHEDULER)), None)


def write_result(result: dict, directory: Path) -> Path:
    """Write ``result.json`` atomically."""
    return atomic_write_json(result, Path(directory) / RESULT_FILE)


def atomic_write_json(data, target: Path) -> Path:
    """Temp file in the same directory, fsync, rename: readers never see a partial file."""
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            write_json(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


PRETTY = json.JSONEncoder(indent=2, allow_nan=False)
COMPACT = json.JSONEncoder(allow_nan=False, separators=(", ", ": "))  # the C encoder: no indent
ROWS_PER_WRITE = 4096


def write_json(data, f) -> None:
    """``data`` as ``json.dump(finite(data), f, indent=2)`` writes it, except that a top-level list of objects
    (a result's steps) has one object per line: each encoded by the C encoder, in chunks, straight to ``f``.
    A 300k-step result neither waits on the pure-Python indenting encoder nor is copied whole by ``finite``."""
    if not isinstance(data, dict):
        f.write(PRETTY.encode(finite(data)) + "\n")
        return
    f.write("{")
    for i, (key, value) in enumerate(data.items()):
        f.write(("," if i else "") + "\n  " + PRETTY.encode(key) + ": ")
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            f.write("[")
            for start in range(0, len(value), ROWS_PER_WRITE):
                f.write(("," if start else "") + "\n    " + ",\n    ".join(compact_rows(value[start:start + ROWS_PER_WRITE])))
            f.write("\n  ]")
        else:
            f.write(PRETTY.encode(finite(value)).replace("\n", "\n  "))  # a JSON text holds no raw line end
    f.write("\n}\n" if data else "}\n")


def compact_rows(rows: list[dict]) -> list[str]:
    """Each row as one line of JSON (non-finite numbers null, as ``finite``)."""
    try:
        return list(map(COMPACT.encode, rows))
    except ValueError:  # a non-finite number: this chunk through ``finite``
        return [COMPACT.encode(finite(row)) for row in rows]


def read_result(path: Path) -> dict:
    path = Path(path)
    return json.loads((path / RESULT_FILE if path.is_dir() else path).read_text())
