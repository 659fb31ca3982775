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
    """Schema violations, one line each with the JSON path; empty when the result conforms."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(result), key=lambda e: list(e.absolute_path))]


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
    result = finite(data)
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(result, f, indent=2, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_result(path: Path) -> dict:
    path = Path(path)
    return json.loads((path / RESULT_FILE if path.is_dir() else path).read_text())
