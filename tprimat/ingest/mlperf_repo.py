"""MLPerf Training results repositories, read by their layout (mlcommons/training_results_v*):

    <submitter>/results/<system>/<benchmark>/result_<id>.txt          one :::MLLOG log per run
    <submitter>/results/<system>/<benchmark>/scaling.json              the review's scaling factor, where there is one
    <submitter>/results/<system>/<benchmark>/power/result_<id>/*.txt   MLPerf Power: node_* and sw_* readings of a run
    <submitter>/systems/<system>.json                                  the system: nodes, accelerators, software

A run log is placed by its own path, from any folder inside the repository: nothing is passed on the command line.
The round is the repository folder's own name where it states one (``training_results_v5.0`` -> 5.0), else
``tprimat ingest --mlperf-round``. Run logs are ``result_*.txt`` directly in the benchmark folder, as
``mlperf-logging``'s result_summarizer globs them (v4.0 names them ``result_<job>-<id>_<n>.txt``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

RUN_LOG = re.compile(r"result_.+\.txt")
POWER_FILE = re.compile(r"(node|sw)_.+\.txt")  # mlperf-logging's power/<run>/node_*.txt and sw_*.txt
ROUND_FOLDER = re.compile(r"(?:.*(?:results|mlperf|training)[_-])?v(\d+\.\d+)")  # training_results_v5.0, mlperf_v5.1


@dataclass(frozen=True)
class MlperfPlace:
    """Where a run log sits in the repository's layout, and the files beside it."""

    submitter: str
    system: str
    benchmark: str
    systems_json: Path  # may be missing: ``read_system()`` says so
    scaling_json: Path
    round: Optional[str] = None  # "5.0", from the repository folder's name; None where it states none

    def power_files(self, log: Path) -> tuple[list[Path], list[Path]]:
        """(node files, switch files) of MLPerf Power for this run log, sorted; empty where it has none."""
        folder = self.scaling_json.parent / "power" / log.stem
        files = sorted(folder.glob("*.txt")) if folder.is_dir() else []
        return ([f for f in files if f.name.startswith("node_") and f.is_file()],
                [f for f in files if f.name.startswith("sw_") and f.is_file()])

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
        return {"submitter": self.submitter, "system": self.system, "benchmark": self.benchmark, "round": self.round}


def place_of(path: Path) -> Optional[MlperfPlace]:
    """The layout place of a run log (``.../<submitter>/results/<system>/<benchmark>/result_<n>.txt``), or None."""
    parts = path.resolve().parts
    if not RUN_LOG.fullmatch(path.name) or len(parts) < 5 or parts[-4] != "results":
        return None
    root = Path(*parts[:-5])
    submitter, system, benchmark = parts[-5], parts[-3], parts[-2]
    return MlperfPlace(submitter, system, benchmark, root / submitter / "systems" / f"{system}.json",
                       path.resolve().parent / "scaling.json", round_of(root))


def round_of(root: Path) -> Optional[str]:
    """The round a repository folder's name states (the nearest ancestor named like ``training_results_v5.0``)."""
    for folder in (root, *root.parents):
        found = ROUND_FOLDER.fullmatch(folder.name)
        if found:
            return found.group(1)
    return None


def in_results_tree(path: Path) -> bool:
    """A file in some ``<submitter>/results/<system>/<benchmark>/`` folder or its ``power/<run>/`` (a run log or not)."""
    parts = path.resolve().parts
    return (len(parts) >= 5 and parts[-4] == "results") or is_power_file(path)


def is_power_file(path: Path) -> bool:
    """A file of MLPerf Power's measurements: ``.../results/<system>/<benchmark>/power/<run>/node_*.txt|sw_*.txt``."""
    parts = path.resolve().parts
    return (len(parts) >= 7 and parts[-6] == "results" and parts[-3] == "power"
            and POWER_FILE.fullmatch(path.name) is not None)
