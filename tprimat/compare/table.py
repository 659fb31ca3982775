"""The comparison table: rich on the console, CSV (and Parquet when pyarrow is installed) on disk."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from typing import Optional

from tprimat.compare.flags import counted
from tprimat.compare.groups import Group, group_summary
from tprimat.compare.speedups import REASONS, Speedup, refused_by_reason

COLUMNS = [  # (header, key in group_summary)
    ("model", "model"), ("framework", "framework"), ("device", "device"), ("devices", "world_size"),
    ("methodology", "methodology"), ("layout", "layout"), ("precision", "numerics"),
    ("optimisations", "optimisations"),
    ("tokens/s/device", "tokens_per_s_per_device"), ("projected tokens/s/device", "projected_tokens_per_s_per_device"),
    ("measured / projected", "measured_vs_projected"), ("step time s (median)", "step_time_s_median"),
    ("step time IQR s", "step_time_s_iqr"), ("TFLOP/s/device", "tflops_per_device"), ("MFU", "mfu"),
    ("peak mem GiB", "peak_memory_gib"), ("$ per 1T tokens", "usd_per_1t_tokens"),
    ("kWh per 1M tokens", "energy_kwh_per_1m_tokens"), ("flags", "flags"),
]
CONSOLE = ("model", "framework", "device", "world_size", "numerics", "tokens_per_s_per_device", "step_time_s_median",
           "mfu", "flags")  # the console's columns (within 120 characters); every column: report.md, table.csv
CONSOLE_WIDTH = 120
LOGS = ("log", "logs")  # a first column where any group is an ingested log
DIFFERS = ("differs in", "distinction")  # where two groups would print one row alike: what tells them apart
MARKS = {"reported": " (reported)", "computed": "", "measured": ""}
REFUSALS_LISTED = 10  # more refused pairs than this are counted by reason on the console (report.md lists them)


def fmt(value, key: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if key in ("mfu", "mfu_vs_measured", "memory_utilisation", "measured_vs_projected"):
            return f"{value:.1%}"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    return str(value)


def cell(group: Group, key: str) -> str:
    s = group_summary(group)
    if key == "flags":
        kinds = Counter(flag.split(":", 1)[0] for flag in group.flags)  # a flag shared by runs: once, counted
        return "; ".join(kind if n == 1 else f"{kind} x{n}" for kind, n in kinds.items()) or "-"
    text = fmt(s[key], key)
    if key == "tokens_per_s_per_device":
        lo, hi = group.metrics["tokens_per_s_per_device_ci"]
        if lo is not None:
            kind = "" if group.metrics["ci_kind"] == "between repeats" else " within-run"
            text += f" [{fmt(lo)}-{fmt(hi)}{kind}]"
        text += "".join(MARKS.get(p, "") for p in group.metrics["provenance"][:1])
    if key == "tflops_per_device" and s[key] is not None:
        text += MARKS.get(group.metrics.get("tflops_provenance") or "", "")
    if key == "energy_kwh_per_1m_tokens" and group.metrics.get("energy_is_estimate") and s[key] is not None:
        text += " (est.)"
    if key == "tflops_per_device" and any(f.startswith("IMPOSSIBLE") for f in group.flags):
        text += " IMPOSSIBLE"
    return text


def columns(groups: list[Group]) -> list[tuple[str, str]]:
    """``COLUMNS``, led by the ingested logs' names when a group has any, and by what tells two groups apart when
    two would otherwise print alike (``tprimat.compare.groups.distinguish``)."""
    return ([LOGS] if any(g.logs for g in groups) else []) + ([DIFFERS] if any(g.distinction for g in groups) else []) \
        + COLUMNS


def print_console(groups: list[Group], found: list[Speedup], skipped: list, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=CONSOLE_WIDTH)
    table = Table(title="tprimat compare: measured steps only (warm-up excluded); [..] = 95% CI over repeats "
                  "(within-run: one repeat, block bootstrap over steps); (reported): printed by the framework; "
                  "every column: --out's report.md and table.csv")
    shown = [(h, k) for h, k in columns(groups) if k in CONSOLE or (h, k) in (LOGS, DIFFERS)]
    for header, _ in shown:
        table.add_column(header, overflow="fold")
    for group in groups:
        table.add_row(*[cell(group, key) for _, key in shown])
    console.print(table)
    for group in groups:
        for flag in counted(group.flags):
            console.print(f"[bold red]flag[/] {group.label}: {flag}")
    refused = sum(1 for s in found if s.refused)
    for s in found:
        if s.refused and refused > REFUSALS_LISTED:
            continue
        console.print(f"{s.kind} speedup, {s.other.label} vs {s.baseline.label}: {s.wording()}")
        for note in s.notes:
            console.print(f"  note: {note}")
    if refused > REFUSALS_LISTED:
        console.print(f"refused {refused} pairs (each with its reason in report.md and comparison.json, --out):")
        for key, pairs in refused_by_reason(found).items():
            console.print(f"  {len(pairs)}: {REASONS[key]}")
    for path, why in skipped:
        console.print(f"skipped {path}: {why}")


def write_tables(groups: list[Group], out: Path) -> list[Path]:
    rows = [group_summary(g) for g in groups]
    keys = list(rows[0]) if rows else []
    paths = [out / "table.csv"]
    with open(paths[0], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("; ".join(map(str, v)) if isinstance(v, list) else v) for k, v in row.items()})
    parquet = write_parquet(rows, out / "table.parquet")
    return paths + ([parquet] if parquet else [])


def write_parquet(rows: list[dict], path: Path) -> Optional[Path]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    flat = [{k: ("; ".join(map(str, v)) if isinstance(v, list) else v) for k, v in r.items()} for r in rows]
    try:
        pq.write_table(pa.Table.from_pylist(flat), path)
    except (pa.ArrowException, OverflowError, ValueError, TypeError) as exc:  # a column Arrow cannot type
        print(f"compare: table.parquet was not written (table.csv holds the same rows): {type(exc).__name__}: "
              f"{str(exc)[:200]}")
        return None
    return path
