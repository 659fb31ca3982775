"""PNG plots for the report: readable at a glance, every axis with units, platforms in fixed colours and precisions
in fixed marks (bars hatched, curves marked), the same as report.html's (``tprimat.compare.html``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from tprimat.compare.groups import Group

COLOURS = {"nvidia": "#76b900", "amd": "#ed1c24", "cpu": "#4c78a8"}
OTHER_COLOUR = "#7f7f7f"
HATCHES = {"bf16": "", "fp32": "//", "fp8": "xx"}  # report.html: plain, "/", "x"
MARKERS = {"bf16": "o", "fp32": "s", "fp8": "D"}  # report.html: circle, square, diamond


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _short(group: Group) -> str:
    extra = f"\n{group.optimisations}" if group.optimisations else ""
    return f"{group.framework}\n{group.device} x{group.world_size}\n{group.model} {group.numerics}{extra}"


def _bar(groups: list[Group], values, ylabel: str, title: str, path: Path, errors=None,
         estimate=None) -> Optional[Path]:
    """A bar per group; None (not drawn) where no group has a value: a chart of "n/a" bars says nothing (report.html
    leaves such a chart out too)."""
    if all(v is None for v in values):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups)), 4.5))
    xs = range(len(groups))
    heights = [v if v is not None else 0 for v in values]
    bars = ax.bar(xs, heights, color=[COLOURS.get(g.platform, OTHER_COLOUR) for g in groups],
                  yerr=errors, capsize=6 if errors is not None else 0, edgecolor="white")
    for bar, group in zip(bars, groups):
        bar.set_hatch(HATCHES.get(group.precision, ".."))
    for bar, value in zip(bars, values):
        label = "n/a" if value is None else (f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}")
        ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    fontsize=8)
    ax.set_xticks(list(xs), [_short(g) for g in groups], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title + (f"\n{estimate}" if estimate else ""), fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def throughput(groups: list[Group], out: Path) -> Path:
    values = [g.metrics["tokens_per_s_per_device"] for g in groups]
    lo_hi = [g.metrics["tokens_per_s_per_device_ci"] for g in groups]
    below = [max(v - lo, 0) if v is not None and lo is not None else 0 for v, (lo, _) in zip(values, lo_hi)]
    above = [max(hi - v, 0) if v is not None and hi is not None else 0 for v, (_, hi) in zip(values, lo_hi)]
    return _bar(groups, values, "tokens / s / device", "Throughput per device (95% CI; within-run for single repeats)",
                out / "throughput.png", errors=[below, above])


def step_times(groups: list[Group], out: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups)), 4.5))
    data = [[s["step_time_s"] for s in g.measured()] or [float("nan")] for g in groups]
    box = ax.boxplot(data, patch_artist=True)
    for patch, g in zip(box["boxes"], groups):
        patch.set_facecolor(COLOURS.get(g.platform, OTHER_COLOUR))
        patch.set_hatch(HATCHES.get(g.precision, ".."))
        patch.set_alpha(0.6)
    ax.set_xticks(range(1, len(groups) + 1), [_short(g) for g in groups], fontsize=8)
    ax.set_ylabel("step time (s)")
    ax.set_title("Step-time distribution over measured steps", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "step_time.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def curves(groups: list[Group], out: Path) -> Path:
    """Loss and learning rate over steps, warm-up included: a learning-rate mismatch shows here."""
    plt = _pyplot()
    fig, (ax_loss, ax_lr) = plt.subplots(1, 2, figsize=(12, 4.5))
    styles = ["-", "--", ":", "-."]
    for i, g in enumerate(groups):
        steps = [s for s in g.runs[0].result["steps"] if s["repeat"] == 0]
        xs = [s["step"] for s in steps]
        colour, style = COLOURS.get(g.platform, OTHER_COLOUR), styles[i % len(styles)]
        marker = MARKERS.get(g.precision, "x")
        ax_loss.plot(xs, [s["loss"] for s in steps], style, color=colour, marker=marker, markersize=3, label=g.label)
        ax_lr.plot(xs, [s["lr"] for s in steps], style, color=colour, marker=marker, markersize=3, label=g.label)
    ax_loss.set(xlabel="optimizer step", ylabel="training loss (nats/token)", title="Loss")
    ax_lr.set(xlabel="optimizer step", ylabel="learning rate", title="Learning rate")
    for ax in (ax_loss, ax_lr):
        ax.grid(alpha=0.3)
    ax_lr.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = out / "loss_lr.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def all_plots(groups: list[Group], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    m = lambda key: [g.metrics.get(key) for g in groups]  # noqa: E731
    estimate = "energy from TDP: an ESTIMATE" if any(g.metrics.get("energy_is_estimate") for g in groups) else None
    from tprimat.compare import breakdown

    drawers = {
        "throughput": lambda: throughput(groups, out),
        "step times": lambda: step_times(groups, out),
        "memory": lambda: _bar(groups, m("peak_memory_gib"), "peak memory (GiB)", "Peak memory per device",
                               out / "memory.png"),
        "loss curves": lambda: curves(groups, out),
        "mfu": lambda: _bar(groups, [None if v is None else v * 100 for v in m("mfu")], "MFU (%)",
                            "Model FLOPs utilisation vs dense spec peak (n/a: no peak)", out / "mfu.png"),
        "cost": lambda: _bar(groups, m("usd_per_1t_tokens"), "US$ per 1T tokens", "Cost per 1T training tokens",
                             out / "cost.png"),
        "energy": lambda: _bar(groups, m("energy_kwh_per_1m_tokens"), "kWh per 1M tokens", "Energy per 1M tokens",
                               out / "energy.png", estimate=estimate),
        "breakdown": lambda: breakdown.plot(groups, out),
    }
    drawn = []
    for name, draw in drawers.items():
        try:
            path = draw()
        except (ValueError, OverflowError, TypeError) as exc:  # a figure the data cannot give: say so, draw the rest
            print(f"compare: the {name} plot was not drawn: {type(exc).__name__}: {str(exc)[:200]}")
            _pyplot().close("all")
            continue
        if path is not None:  # None: nothing to draw (no group has the figure)
            drawn.append(path)
    return drawn
