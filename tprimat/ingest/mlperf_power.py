"""MLPerf Power: a run's energy to train from the readings in its ``power/<run>/`` folder, in joules, by the arithmetic
of MLCommons' ``mlperf-logging`` result_summarizer (``_compute_total_power`` and the two it calls):

- each node file (``node_*.txt``): the records sorted by time; from ``power_measurement_start`` on, every
  ``power_reading`` (watts) times the milliseconds since the previous reading, summed until
  ``power_measurement_stop`` (or the last reading where none is logged); times ``conversion_eff`` (1 where none is
  logged), times the run's time to train over the measured window (start to stop), over 1000;
- each switch file (``sw_*.txt``): its first ``interconnect_power_est`` (watts) times its ``conversion_eff`` times the
  run's time to train in seconds;
- the run's energy: the sum over its files. A system's energy score is then the olympic mean of its runs' energies,
  ordered by their times to train, times the folder's scaling factor (``tprimat.compare.time_to_train``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

MARK = ":::MLLOG"


class PowerLogError(ValueError):
    """A power file that cannot give an energy (no start record, an empty window): the message names the file."""


def records(path: Path) -> list[dict]:
    """The file's MLLOG records with a numeric ``time_ms``, in file order."""
    found = []
    for line in path.read_text(errors="replace").splitlines():
        at = line.rfind(MARK)  # a line holding two records: the last, as mlperf-logging's parser reads it
        if at < 0:
            continue
        try:
            record = json.loads(line[at + len(MARK):])
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("time_ms"), (int, float)):
            found.append(record)
    return found


def reading(record: dict) -> float:
    value = record.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PowerLogError(f"{record.get('key')} at time_ms {record.get('time_ms')}: value {value!r} is not a number")
    return float(value)


def node_energy_j(rows: list[dict], time_to_train_ms: float, name: str = "node file") -> float:
    """One node's energy over the run: the measured window's watt-milliseconds scaled to the time to train."""
    start = stop = None
    previous = last = 0.0
    watt_ms, efficiency = 0.0, 1.0
    for row in sorted(rows, key=lambda r: r["time_ms"]):
        key, at = row.get("key"), float(row["time_ms"])
        if key == "power_measurement_start":
            start = previous = at
        elif key == "power_reading" and stop is None and start is not None:
            watt_ms += reading(row) * (at - previous)
            previous, last = at, max(last, at)
        elif key == "power_measurement_stop":
            stop = at
        elif key == "conversion_eff":
            efficiency = reading(row)
    if start is None:
        raise PowerLogError(f"{name}: no power_measurement_start")
    window_ms = (stop if stop is not None else last) - start
    if window_ms <= 0:
        raise PowerLogError(f"{name}: the measured window is {window_ms:g} ms")
    return efficiency * watt_ms * time_to_train_ms / window_ms / 1000


def switch_energy_j(rows: list[dict], time_to_train_ms: float) -> float:
    """One switch's energy: its stated interconnect power for the whole time to train."""
    watts, efficiency = 0.0, 1.0
    for row in rows:
        if row.get("key") == "conversion_eff":
            efficiency = reading(row)
        elif row.get("key") == "interconnect_power_est":
            watts = reading(row)
            break
    return efficiency * watts * time_to_train_ms / 1000


def run_energy(nodes: list[Path], switches: list[Path], time_to_train_ms: Optional[float]) -> dict:
    """``{"energy_j": J, "node_files": n, "switch_files": m, "measurement": "AC"|"DC"|None}`` for one run, or
    ``{"energy_j": None, "why": ...}`` where its files give none."""
    counts = {"node_files": len(nodes), "switch_files": len(switches)}
    if not nodes:
        return {"energy_j": None, "why": "power folder without node_*.txt readings", **counts}
    if time_to_train_ms is None:
        return {"energy_j": None, "why": "the run log states no run_start and run_stop", **counts}
    try:
        node_rows = [(f, records(f)) for f in nodes]
        joules = sum(node_energy_j(rows, time_to_train_ms, f.name) for f, rows in node_rows)
        joules += sum(switch_energy_j(records(f), time_to_train_ms) for f in switches)
    except (OSError, PowerLogError) as exc:
        return {"energy_j": None, "why": f"power readings unreadable: {exc}", **counts}
    kinds = {r.get("metadata", {}).get("measurement_type") for _, rows in node_rows for r in rows
             if r.get("key") == "conversion_eff" and isinstance(r.get("metadata"), dict)}
    kinds.discard(None)
    return {"energy_j": joules, **counts, "measurement": kinds.pop() if len(kinds) == 1 else None}
