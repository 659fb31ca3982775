"""Where each group's step time and memory go, from its profiled runs (``profile.breakdown`` and
``profile.memory`` in the results): the tables and the stacked bars that answer "why is B faster than A" and
"why does B fit where A does not". Reads results only."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Optional

from tprimat.compare.groups import Group

CATEGORIES = ("matmul", "attention", "communication", "optimizer", "data_loading", "other_compute", "idle")
COLOURS = {"matmul": "#1f77b4", "attention": "#ff7f0e", "communication": "#d62728", "optimizer": "#9467bd",
           "data_loading": "#8c564b", "other_compute": "#7f7f7f", "idle": "#e0e0e0"}


def group_breakdown(group: Group) -> Optional[dict]:
    """Seconds per profiled step by category: the median over the group's profiled runs; None if none is."""
    found = [((run.result.get("profile") or {}).get("breakdown")) for run in group.runs]
    found = [b for b in found if b]
    if not found:
        return None
    per_step = {c: statistics.median(b["seconds_per_step"].get(c) or 0.0 for b in found) for c in CATEGORIES}
    overlapped = [b["communication_overlapped_s_per_step"] for b in found
                  if b.get("communication_overlapped_s_per_step") is not None]
    return {"seconds_per_step": per_step, "basis": found[0]["basis"], "runs": len(found),
            "communication_overlapped_s_per_step": statistics.median(overlapped) if overlapped else None}


def table(groups: list[Group]) -> list[list[str]]:
    """Rows: group, each category as milliseconds per step and share, overlapped communication, basis."""
    rows = []
    for g in groups:
        b = group_breakdown(g)
        if b is None:
            continue
        total = sum(b["seconds_per_step"].values()) or 1.0
        cells = [f"{1e3 * b['seconds_per_step'][c]:.1f} ({b['seconds_per_step'][c] / total:.0%})" for c in CATEGORIES]
        overlapped = b["communication_overlapped_s_per_step"]
        rows.append([g.label, *cells, "n/a" if overlapped is None else f"{1e3 * overlapped:.1f}", b["basis"]])
    return rows


HEADERS = ["group", *[f"{c} ms (share)" for c in CATEGORIES], "comm. overlapped ms", "basis"]
MEMORY = ("parameters_gib", "gradients_gib", "optimizer_gib", "activations_gib", "temporaries_gib", "buffers_gib",
          "other_gib", "total_gib")
MEMORY_HEADERS = ["group", *[m.removesuffix("_gib") + " GiB" for m in MEMORY], "allocator peak GiB",
                  "allocator reserved GiB"]


def group_memory(group: Group) -> Optional[dict]:
    """GiB by category at the profiled step's peak, and the allocator's peaks: medians over the group's runs
    that tracked them; None if none did."""
    found = [((run.result.get("profile") or {}).get("memory")) for run in group.runs]
    tracked = [m["by_category"] for m in found if m and (m.get("by_category") or {}).get("tracked")]
    allocator = [m["allocator"] for m in found if m and m.get("allocator")]
    if not tracked and not allocator:
        return None
    median = lambda rows, key: statistics.median(r[key] for r in rows) if rows else None  # noqa: E731
    return {"by_category": {k: median(tracked, k) for k in MEMORY} if tracked else None,
            "allocated_peak_gib": median(allocator, "allocated_peak_gib"),
            "reserved_peak_gib": median(allocator, "reserved_peak_gib"), "runs": max(len(tracked), len(allocator))}


def memory_table(groups: list[Group]) -> list[list[str]]:
    rows = []
    for g in groups:
        m = group_memory(g)
        if m is None:
            continue
        by = m["by_category"] or {}
        shown = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        rows.append([g.label, *[shown(by.get(k)) for k in MEMORY], shown(m["allocated_peak_gib"]),
                     shown(m["reserved_peak_gib"])])
    return rows


def plot(groups: list[Group], out: Path) -> Optional[Path]:
    """Stacked bars of seconds per profiled step by category, one bar per profiled group."""
    from tprimat.compare.plots import _pyplot, _short

    profiled = [(g, b) for g in groups if (b := group_breakdown(g)) is not None]
    if not profiled:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(profiled)), 4.5))
    bottoms = [0.0] * len(profiled)
    for c in CATEGORIES:
        heights = [1e3 * b["seconds_per_step"][c] for _, b in profiled]
        ax.bar(range(len(profiled)), heights, bottom=bottoms, color=COLOURS[c], label=c.replace("_", " "))
        bottoms = [x + h for x, h in zip(bottoms, heights)]
    ax.set_xticks(range(len(profiled)), [_short(g) for g, _ in profiled], fontsize=8)
    ax.set_ylabel("milliseconds per profiled step")
    ax.set_title("Where the step time goes (PyTorch profiler)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "breakdown.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
