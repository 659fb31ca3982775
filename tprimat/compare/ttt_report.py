"""Time to train as compare shows it: the table per system and benchmark, accelerators side by side at equal device
counts, the cost to train at a price the user states, and a chart of score against devices."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from tprimat.compare.report import NOT_STATED
from tprimat.compare.time_to_train import RULE, Score, from_results, read_all


def cell(value, spec: str = "") -> str:
    return NOT_STATED if value is None else (format(value, spec) if spec and not isinstance(value, str) else str(value))


def priced(scores: list[Score], prices: dict[str, float]) -> None:
    """The price per device-hour of each system: ``--price GPU=USD`` at compare time, else what its results state
    (``platform.price_per_device_hour_usd`` at ingest); none is built in."""
    for s in scores:
        gpu, stated = s.stated.get("gpu"), s.stated.get("price_per_device_hour_usd")
        if isinstance(gpu, str) and gpu in prices:
            s.price_per_device_hour_usd, s.price_source = prices[gpu], f"compare --price {gpu}={prices[gpu]:g}"
        elif stated:
            s.price_per_device_hour_usd, s.price_source = stated, "platform.price_per_device_hour_usd (the results')"


def hardware_row(s: Score) -> str:
    """The accelerator as its hardware-table row names it, the submitted name kept beside where it differs; the
    submitted name alone where no row matches."""
    submitted, name = s.accelerator or NOT_STATED, s.accelerator_row
    if name is None:
        return submitted
    return name if name == submitted else f"{name} (as submitted: {submitted})"


def accelerator_key(s: Score) -> str:
    """One accelerator, one key: its hardware-table row where its name maps (MI325X spelt two ways is one)."""
    return s.accelerator_row or s.accelerator or NOT_STATED


def layout(s: Score) -> str:
    """Nodes x accelerators per node (``2 x 4``), as the systems JSON states them."""
    if s.nodes and s.per_node:
        return f"{s.nodes} x {s.per_node}"
    return f"{cell(s.nodes)} nodes, {cell(s.devices)} devices"


def ordered(scores: list[Score]) -> list[Score]:
    """Per round and benchmark, the scored systems fastest first, then the ones without a score."""
    return sorted(scores, key=lambda s: (s.round or "", s.benchmark, s.minutes is None, s.minutes or 0.0,
                                         s.submitter, s.system))


def table_lines(scores: list[Score]) -> list[str]:
    """One row per system and benchmark, fastest first within a round and benchmark; flags beside; "not stated"
    for what no log or systems JSON states."""
    lines = ["| round | benchmark | submitter | system | accelerator | nodes x per node | score (min) | energy (kWh) | "
             "kWh per accelerator | kWh per 1M tokens | converged / runs | framework | precision | global batch | "
             "olympic mean (min) | scaling | samples to target | tokens/s/device | GPU-hours | cost to train (USD) | flags |",
             "|" + "---|" * 21]
    for s in ordered(scores):
        st = s.stated
        lines.append(
            f"| {cell(s.round)} | {s.benchmark} | {s.submitter} | {s.system} | {hardware_row(s)} | {layout(s)} | "
            f"{cell(s.minutes, '.2f') if s.minutes is not None else 'no score'} | {cell(s.energy_kwh, ',.1f')} | "
            f"{cell(s.energy_kwh_per_device, '.2f')} | {cell(s.energy_kwh_per_1m_tokens, '.3f')} | "
            f"{sum(r.converged for r in s.runs)} / {len(s.runs)} | "
            f"{cell(st.get('framework'))} | {cell(st.get('precision'))} | {cell(st.get('global_batch_size'))} | "
            f"{cell(s.unscaled_minutes, '.2f')} | {cell(s.scaling_factor, '.4f') if s.scaling_factor else '-'} | "
            f"{cell(s.samples_to_target, ',.0f')} | {cell(st.get('tokens_per_s_per_device'), ',.0f')} | "
            f"{cell(s.gpu_hours, '.1f')} | {cell(s.cost_usd, ',.0f')} | {'; '.join(s.flags) or '-'} |")
    return lines


def side_by_side_lines(scores: list[Score]) -> list[str]:
    """Per round, benchmark and device count, each accelerator's fastest scored system, fastest first: the
    accelerators at equal device counts (``--by platform.gpu``); one accelerator is one row of the hardware table
    where it maps."""
    best: dict[tuple, Score] = {}
    for s in scores:
        if s.minutes is None or s.devices is None:
            continue
        key = (s.round or "", s.benchmark, s.devices, accelerator_key(s))
        if key not in best or s.minutes < best[key].minutes:
            best[key] = s
    lines = ["| round | benchmark | devices | accelerator | fastest system | nodes x per node | score (min) | "
             "x the fastest | energy (kWh) | GPU-hours | cost to train (USD) |", "|" + "---|" * 11]
    for (round_, benchmark, devices) in sorted({k[:3] for k in best}):
        row = sorted((s for k, s in best.items() if k[:3] == (round_, benchmark, devices)), key=lambda s: s.minutes)
        for s in row:
            lines.append(f"| {round_ or NOT_STATED} | {benchmark} | {devices} | {accelerator_key(s)} | "
                         f"{s.submitter} {s.system} | {layout(s)} | {s.minutes:.2f} | {s.minutes / row[0].minutes:.2f} | "
                         f"{cell(s.energy_kwh, ',.1f')} | {cell(s.gpu_hours, '.1f')} | {cell(s.cost_usd, ',.0f')} |")
    return lines


CONSOLE_COLUMNS = 120


def console_lines(scores: list[Score]) -> list[str]:
    """The time-to-train table as the console shows it: one fixed-width row per system within 120 columns, the
    full table (every column, every flag) in report.md and comparison.json."""
    head = f"{'round':<5} {'benchmark':<15} {'system':<44} {'accelerator':<16} {'layout':<7} {'min':>8} {'kWh':>8} flags"
    lines = [head]
    for s in ordered(scores):
        name = f"{s.submitter} {s.system}"
        name = name if len(name) <= 44 else name[:43] + "~"
        accel = accelerator_key(s)
        accel = accel if len(accel) <= 16 else accel[:15] + "~"
        shape = f"{s.nodes}x{s.per_node}" if s.nodes and s.per_node else "?"
        minutes = f"{s.minutes:.2f}" if s.minutes is not None else "none"
        kwh = f"{s.energy_kwh:,.0f}" if s.energy_kwh is not None else "-"
        row = (f"{cell(s.round):<5} {s.benchmark[:15]:<15} {name:<44} {accel:<16} {shape[:7]:<7} {minutes:>8} {kwh:>8} "
               f"{len(s.flags)}")
        lines.append(row[:CONSOLE_COLUMNS])
    return lines


def by_accelerator(scores: list[Score]) -> list[tuple[str, str, list[Score]]]:
    """(accelerator, benchmark, its scored systems) for every pair that has one: the chart's series."""
    points = [s for s in scores if s.minutes is not None and s.devices]
    series = []
    for accelerator in sorted({accelerator_key(s) for s in points}):
        for benchmark in sorted({s.benchmark for s in points}):
            mine = [s for s in points if accelerator_key(s) == accelerator and s.benchmark == benchmark]
            series += [(accelerator, benchmark, mine)] if mine else []
    return series


def chart(scores: list[Score], path: Path) -> Optional[Path]:
    """Score (minutes) against devices, log-log, one colour per accelerator, one mark per benchmark."""
    series = by_accelerator(scores)
    if not series:
        return None
    from tprimat.compare.plots import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(13, 6))
    colours, accelerators = plt.get_cmap("tab20"), sorted({a for a, _, _ in series})
    marks = {b: m for b, m in zip(sorted({b for _, b, _ in series}), "oDs^v")}
    for accelerator, benchmark, mine in series:
        ax.scatter([s.devices for s in mine], [s.minutes for s in mine], marker=marks[benchmark], alpha=0.85,
                   color=colours(accelerators.index(accelerator) % 20), label=f"{accelerator}, {benchmark}")
    ax.set(xscale="log", yscale="log", xlabel="devices (accelerators)", ylabel="time to train (minutes, MLPerf score)",
           title="MLPerf Training: score against devices")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def printed(paths: list[str], prices: dict[str, float], by_device: bool = False, keep=None) -> list[Score]:
    """The scores of the MLPerf runs under ``paths`` (converged or not) that compare's filters ``keep``, printed as a
    table where there are any, and the accelerators side by side under ``--by platform.gpu``."""
    scores = from_results([(path, r) for path, r in read_all(paths) if keep is None or keep(r)])
    priced(scores, prices)
    if scores:
        print("\ntime to train by MLPerf Training's rules (olympic mean of the runs x scaling; flags: a count, each in "
              "report.md):")
        print("\n".join(console_lines(scores)))
        if by_device:
            print("\naccelerators side by side at equal device counts (each one's fastest system):")
            print("\n".join(side_by_side_console(scores)))
    return scores


def side_by_side_console(scores: list[Score]) -> list[str]:
    """``side_by_side_lines`` within 120 columns."""
    lines = [f"{'round':<5} {'benchmark':<15} {'devices':>7} {'accelerator':<18} {'fastest system':<44} {'min':>8} {'x':>5}"]
    for line in side_by_side_lines(scores)[2:]:
        c = [x.strip() for x in line.strip("|").split(" | ")]
        row = f"{c[0]:<5} {c[1][:15]:<15} {c[2]:>7} {c[3][:18]:<18} {c[4][:44]:<44} {c[6]:>8} {c[7]:>5}"
        lines.append(row[:CONSOLE_COLUMNS])
    return lines


def lead_section(scores: list[Score], png: Optional[Path]) -> list[str]:
    """What a report with MLPerf results opens with: the time-to-train table, fastest first, and the accelerators
    side by side at equal device counts."""
    if not scores:
        return []
    return (["## Time to train (MLPerf Training rules)", "", RULE, ""] + table_lines(scores)
            + ["", "### Accelerators side by side at equal device counts", ""] + side_by_side_lines(scores)
            + (["", f"![Time to train against devices](plots/{png.name})"] if png else []) + [""])


def html_table(md_lines: list[str]) -> str:
    """A markdown table of ``table_lines`` as an HTML table (cells escaped)."""
    import html

    rows = [[html.escape(c.strip()) for c in line.strip("|").split(" | ")] for line in md_lines if "---|" not in line]
    head = "".join(f"<th>{c}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_section(scores: list[Score]) -> str:
    """report.html's time-to-train section: the rule, both tables and an interactive chart of score against devices."""
    if not scores:
        return ""
    import html

    import plotly.graph_objects as go
    import plotly.io as pio

    fig = go.Figure([go.Scatter(x=[s.devices for s in mine], y=[s.minutes for s in mine], mode="markers",
                                name=f"{accelerator}, {benchmark}", text=[f"{s.submitter}/{s.system}" for s in mine])
                     for accelerator, benchmark, mine in by_accelerator(scores)])
    fig.update_layout(template="plotly_white", title="MLPerf Training: score against devices",
                      xaxis=dict(type="log", title="devices"), yaxis=dict(type="log", title="time to train (minutes)"))
    chart_div = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id="chart-time-to-train")
    return (f"<h2>Time to train (MLPerf Training rules)</h2><p class='note'>{html.escape(RULE)}</p>"
            f"{html_table(table_lines(scores))}<h3>Accelerators side by side at equal device counts</h3>"
            f"{html_table(side_by_side_lines(scores))}<section class='chart'>{chart_div}</section>")
