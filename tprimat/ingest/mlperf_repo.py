"""MLPerf Training results repositories, read by their layout (mlcommons/training_results_v*):

    <submitter>/results/<system>/<benchmark>/result_<n>.txt   one :::MLLOG log per run
    <submitter>/results/<system>/<benchmark>/scaling.json     the review's scaling factor, where there is one
    <submitter>/systems/<system>.json                         the system: nodes, accelerators, software

A run log is placed by its own path, from any folder inside the repository: nothing is passed on the command line.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

RUN_LOG = re.compile(r"result_\d+\.txt")


@dataclass(frozen=True)
class MlperfPlace:
    """Where a run log sits in the repository's layout, and the files beside it."""

    submitter: str
    system: str
    benchmark: str
    systems_json: Path  # may be missing: ``read_system()`` says so
    scaling_json: Path

    def read_system(self) -> tuple[Optional[dict], Optional[str]]:
        """(the systems JSON, None) or (None, why it could not be read)."""
        try:
            data = json.loads(self.systems_json.read_text())
        except FileNotFoundError:
            return None, f"systems JSON not found: {self.submitter}/systems/{self.system}.json"
        except (OSError, ValueError) as exc:
            return None, f"systems JSON {self.systems_json.name} unreadable: {exc}"
        return (data, None) if isinstance(data, dict) else (None, f"systems JSON {self.systems_json.name}: not an object")

    def scaling_factor(self) -> tuple[Optional[float], Optional[str]]:
        """(the folder's scaling factor or None where it has no scaling.json, None) or (None, why unreadable)."""
        try:
            data = json.loads(self.scaling_json.read_text())
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError) as exc:
            return None, f"scaling.json unreadable: {exc}"
        factor = data.get("scaling_factor") if isinstance(data, dict) else None
        if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not (math.isfinite(factor) and factor > 0):
            return None, f"scaling.json: scaling_factor {factor!r} is not a positive number"
        return float(factor), None

    def as_source(self) -> dict:
        return {"submitter": self.submitter, "system": self.system, "benchmark": self.benchmark}


def place_of(path: Path) -> Optional[MlperfPlace]:
    """The layout place of a run log (``.../<submitter>/results/<system>/<benchmark>/result_<n>.txt``), or None."""
    parts = path.resolve().parts
    if not RUN_LOG.fullmatch(path.name) or len(parts) < 5 or parts[-4] != "results":
        return None
    root = Path(*parts[:-5])
    submitter, system, benchmark = parts[-5], parts[-3], parts[-2]
    return MlperfPlace(submitter, system, benchmark, root / submitter / "systems" / f"{system}.json",
                       path.resolve().parent / "scaling.json")


def in_results_tree(path: Path) -> bool:
    """A file under some ``<submitter>/results/<system>/<benchmark>/`` folder (a run log or not)."""
    parts = path.resolve().parts
    return len(parts) >= 5 and parts[-4] == "results"
