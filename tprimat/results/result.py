"""The result file: versioned, validated against the shipped JSON Schema, written atomically.

Schema changelog:
- 1.0: first version (status, spec, plan, environment, steps, summary, warnings).
- 1.1: summary.provenance and summary.reported; null allowed for plan and summary figures that the evidence
  of an ingested log does not support (never a default in their place).
- 2.0: steps stored as columns (``tprimat.results.columns``): one array per step field and per printed figure,
  ``count`` steps. ``read_result`` reads 1.x results (steps as a list of objects) as before.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import uuid
from datetime import datetime, timezone
from functools import lru_cache, partial
from importlib import resources
from pathlib import Path
from typing import Optional

import orjson

from tprimat.logs.stepcolumns import StepColumns
from tprimat.results import columns, consistent, sane, shapes

SCHEMA_VERSION = "2.0"
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


OPTIONAL_SECTIONS = ("audit", "telemetry", "source", "projection", "profile", "contention")


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
    """Schema violations, one line each with the JSON path; empty when the result conforms. ``steps`` as stored
    (columns), held as columns (``StepColumns``) or as rows. Steps are validated by shape
    (``tprimat.results.shapes``: one step of each shape, every step of a shape with errors), grouped from the
    columns where the steps are columns."""
    import jsonschema

    full = schema()
    validator = jsonschema.Draft202012Validator(full)
    steps, defs = result.get("steps") if isinstance(result, dict) else None, full.get("$defs", {})
    if isinstance(steps, dict):  # as stored
        unreadable = columns.problems(steps)
        if unreadable:
            return unreadable
        fields = [steps[name] for name in columns.FIELDS] + [[steps["reported"] is not None] * steps["count"]]
        count, row = steps["count"], partial(columns.row_at, steps)
    elif isinstance(steps, StepColumns):  # held as columns in memory
        fields = [steps.own[name] for name in columns.FIELDS]
        count, row = len(steps), steps.__getitem__
    elif isinstance(steps, list):
        fields, count, row = None, len(steps), steps.__getitem__
    else:
        return [f"steps: must be an object of columns (or, in memory, a list of step objects), not "
                f"{type(steps).__name__}"]
    # the file's own layout (columns) is checked without its values; each step, as a row, by shape
    errors = [(list(e.absolute_path), e.message) for e in validator.iter_errors({**result, "steps": columns.columns_of([])})]
    one_step = jsonschema.Draft202012Validator({"$defs": defs, **STEP_ROW})
    groups = None
    if shapes.exact_for({"type": "array", "items": STEP_ROW}, defs):
        groups = shapes.by_columns(fields) if fields is not None else None
        if groups is None:
            groups = shapes.by_shape(steps if isinstance(steps, list) else [row(i) for i in range(count)])
        groups = [group for group in groups if next(one_step.iter_errors(row(group[0])), None)]
    errors += [(["steps", i, *e.absolute_path], e.message) for group in (groups if groups is not None else [range(count)])
               for i in group for e in one_step.iter_errors(row(i))]
    return [f"{'/'.join(str(p) for p in path) or '<root>'}: {message}"
            for path, message in sorted(errors, key=lambda e: e[0])]


def check_result(result) -> list[str]:
    """What ``tprimat check`` says of a result, and what every reader admits by: an object, the schema
    (``validate_result``), and for a result with status ok values a reader can use (``sane.problem``: texts
    where labels are read, finite numbers in the float range) and its agreement with itself
    (``consistent.problems``)."""
    if not isinstance(result, dict):
        return [f"<root>: the top level is {type(result).__name__}, not a result object"]
    found = validate_result(result)
    if found or result.get("status") != "ok":  # a failed or invalid result holds what it could (spec may be null)
        return found
    try:
        rows = from_json(result)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        return [f"steps: cannot be read as rows: {type(exc).__name__}: {exc}"]
    why = sane.problem(rows)
    return [why] if why else consistent.problems(result)


STEP_ROW = {"$ref": "#/$defs/step"}  # one step as a row: the i-th value of every column


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
    """Write ``result.json`` atomically, its steps (rows in memory) as columns."""
    steps = result.get("steps")
    stored = result if isinstance(steps, dict) or steps is None else {**result, "steps": columns.columns_of(steps)}
    return atomic_write_json(stored, Path(directory) / RESULT_FILE)


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
    """``data`` as ``json.dump(finite(data), f, indent=2)`` writes it, except that an array of plain values (a
    step column) is written on one line (by orjson, or json's C encoder: ``compact``) and an array of objects has
    one object per line (by the C encoder, in chunks, straight to ``f``): a 300k-step result neither waits on the
    pure-Python indenting encoder nor is copied whole by ``finite``."""
    for text in _encoded(data, "\n"):
        f.write(text)
    f.write("\n")


PLAIN = frozenset((int, float, str, bool, type(None)))
NUMERIC = frozenset((int, float, bool, type(None)))  # what orjson writes as json does (non-finite: null)


def _encoded(value, pad: str):
    """The JSON text of ``value`` in pieces, nested lines starting with ``pad`` (a line end and indentation)."""
    inner = pad + "  "
    if isinstance(value, dict) and value:
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield ("," if i else "") + inner + _key(key) + ": "
            yield from _encoded(item, inner)
        yield pad + "}"
    elif isinstance(value, (list, tuple)) and value and (line := numeric_line(value)) is not None:
        yield line  # a step column, without a look at each value's type first
    elif isinstance(value, (list, tuple)) and value and (kinds := set(map(type, value))) <= PLAIN:
        yield compact(list(value), kinds)
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, dict) for v in value):
        yield "["
        for start in range(0, len(value), ROWS_PER_WRITE):
            yield ("," if start else "") + inner + ("," + inner).join(compact_rows(value[start:start + ROWS_PER_WRITE]))
        yield pad + "]"
    elif isinstance(value, (list, tuple)) and value:
        yield "["
        for i, item in enumerate(value):
            yield ("," if i else "") + inner
            yield from _encoded(item, inner)
        yield pad + "]"
    else:
        yield PRETTY.encode(finite(value))


def _key(key) -> str:
    """An object key as JSON writes it (a number, bool or null key as its text, as ``json.dumps`` does)."""
    return PRETTY.encode(key) if isinstance(key, str) else COMPACT.encode({key: None})[1:-len(": null}")]


def compact(values: list, kinds: Optional[set] = None) -> str:
    """Plain values as one line of JSON (non-finite numbers null, as ``finite``). A step column of numbers,
    booleans and nulls is encoded by orjson (a 300k-step column in milliseconds, each float as its shortest
    round-trip text; non-finite ones null); strings, and ints beyond 64 bits, by json's C encoder. ``kinds``: the
    values' types, when known."""
    kinds = set(map(type, values)) if kinds is None else kinds
    if kinds <= NUMERIC and (line := numeric_line(values)) is not None:
        return line
    try:
        return COMPACT.encode(values)
    except ValueError:
        return COMPACT.encode(finite(values))


def numeric_line(values) -> Optional[str]:
    """An array of numbers, booleans and nulls as one line of JSON by orjson (non-finite numbers null); None for
    any other array (strings, nested arrays or objects, an int beyond 64 bits)."""
    try:
        data = orjson.dumps(values)
    except orjson.JSONEncodeError:
        return None
    return None if data.find(b"[", 1) >= 0 or b"{" in data or b'"' in data else data.decode()


def compact_rows(rows: list[dict]) -> list[str]:
    """Each row as one line of JSON (non-finite numbers null, as ``finite``)."""
    try:
        return list(map(COMPACT.encode, rows))
    except ValueError:  # a non-finite number: this chunk through ``finite``
        return [COMPACT.encode(finite(row)) for row in rows]


def read_result(path: Path) -> dict:
    """A result file (or run directory) with its steps as rows, whatever its schema version (ValueError: not
    JSON, or its step columns are malformed, named)."""
    path = Path(path)
    return from_json(json.loads((path / RESULT_FILE if path.is_dir() else path).read_text()))


def from_json(data):
    """A result as read from JSON, its stored step columns (schema 2.0) as rows; anything else as it is."""
    if isinstance(data, dict) and isinstance(data.get("steps"), dict):
        return {**data, "steps": columns.rows_of(data["steps"])}
    return data
