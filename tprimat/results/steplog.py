"""``steps.jsonl``: every step record on disk as it is measured, so that a crash, a kill or a full disk before
``result.json`` is written loses no measured step; ``rebuild`` turns it into a ``failed`` result.

Line 1 is a header (run_id, spec, plan), then one step record per line, flushed as each step ends. A write error
is logged once and training goes on (the records are still kept in memory for the result)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Optional

from tprimat.results.records import StepRecord
from tprimat.results.result import finite

log = logging.getLogger("tprimat")
STEPS_FILE = "steps.jsonl"


class StepLog:
    def __init__(self, run_dir: Path, header: dict) -> None:
        self.path, self.file, self.error = Path(run_dir) / STEPS_FILE, None, None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(self.path, "w")
        except OSError as exc:
            self._fail(exc)
        self._write({"header": header})

    def append(self, record: StepRecord) -> None:
        self._write(record.as_dict())

    def _write(self, data: dict) -> None:
        if self.file is None:
            return
        try:
            self.file.write(json.dumps(finite(data), allow_nan=False) + "\n")
            self.file.flush()
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        if self.error is None:
            log.warning("cannot write %s: %s; steps are kept in memory only", self.path, exc)
        self.error = f"{type(exc).__name__}: {exc}"
        self.close()

    def close(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
            self.file = None


def read_steps(run_dir: Path) -> tuple[Optional[dict], list[dict]]:
    """(header, step dicts) of a run directory's steps.jsonl; a line cut short by a crash is skipped."""
    header, steps = None, []
    path = Path(run_dir) / STEPS_FILE
    if not path.exists():
        return None, []
    with open(path, errors="replace") as f:
        for line in f:
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and "header" in data:
                header = data["header"]
            elif isinstance(data, dict) and "step" in data:
                steps.append(data)
    return header, steps


def records_of(steps: list[dict]) -> list[StepRecord]:
    names = set(StepRecord.__dataclass_fields__)
    return [StepRecord(**{k: v for k, v in s.items() if k in names}) for s in steps]


def rebuild(run_dir: Path) -> Optional[dict]:
    """A ``failed`` result from a run directory's steps.jsonl (None when there is none)."""
    from tprimat.results.metrics import summarize
    from tprimat.results.result import make_result, new_run_id

    header, steps = read_steps(run_dir)
    if header is None and not steps:
        return None
    header = header or {}
    plan = header.get("plan") or {}
    records = records_of(steps)
    summary = summarize(records, plan.get("world_size"), plan.get("flops_per_token"), plan.get("peak_tflops"))
    error = (f"rebuilt from {STEPS_FILE}: the run ended without writing its result "
             f"({len(records)} measured steps kept)")
    return make_result(run_id=header.get("run_id") or new_run_id(), status="failed", error=error,
                       spec=header.get("spec"), spec_hash=header.get("spec_hash"), plan=plan or None,
                       steps=[r.as_dict() for r in records], summary=summary,
                       warnings=[error], overrides=header.get("overrides"))
