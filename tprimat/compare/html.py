"""report.html: the comparison as one self-contained page (Plotly's JavaScript and every style inline, no network
when viewed): interactive charts of throughput with intervals, speedups, MFU, memory, cost and energy, the time
and memory breakdowns, loss curves and the published rows, and a sortable table whose flags sit in their rows.

Colours follow the platform and marker symbols (bar patterns) the precision, the same in every chart and in the
PNGs (``tprimat.compare.plots``: COLOURS, MARKERS, HATCHES). A chart the data cannot give is left
out with a line saying why; the rest are drawn. Open ``report.html#sort=<column>`` to open it sorted.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Optional

from tprimat.compare.breakdown import CATEGORIES, MEMORY, group_breakdown, group_memory
from tprimat.compare.flags import counted
from tprimat.compare.groups import Group
from tprimat.compare.plots import COLOURS
from tprimat.compare.plots import OTHER_COLOUR as OTHER
from tprimat.compare.speedups import Speedup
from tprimat.results.sane import number_problem

PLATFORM_COLOURS, OTHER_COLOUR = COLOURS, OTHER  # one palette for the PNGs and the page
PRECISION_SYMBOLS = {"bf16": "circle", "fp32": "square", "fp8": "diamond"}  # the PNGs' MARKERS, in Plotly's names
PRECISION_PATTERNS = {"bf16": "", "fp32": "/", "fp8": "x"}  # the PNGs' HATCHES
COLUMNS = [("group", "label"), ("device", "device"), ("framework", "framework"), ("precision", "numerics"),
           ("tokens/s/device", "tokens_per_s_per_device"), ("TFLOP/s/device", "tflops_per_device"), ("MFU", "mfu"),
           ("peak GiB", "peak_memory_gib"), ("US$ / 1T tokens", "usd_per_1t_tokens"),
           ("kWh / 1M tokens", "energy_kwh_per_1m_tokens"), ("flags", "flags")]


def colour(group: Group) -> str:
    return PLATFORM_COLOURS.get(group.platform, OTHER_COLOUR)


def number(value) -> Optional[float]:
    """A finite float in range, else None (a foreign result's absurd number is not drawn; ``sane``'s rule)."""
    return None if value is None or number_problem("value", value) else float(value)


def bars(groups: list[Group], key: str, title: str, axis: str, scale: float = 1.0, errors: bool = False):
    import plotly.graph_objects as go

    fig = go.Figure()
    for group in groups:
        value = number(group.metrics.get(key))
        if value is None:
            continue
        error = None
        interval = group.metrics.get(f"{key}_ci") if errors else None
        if interval and number(interval[0]) is not None and number(interval[1]) is not None:
            error = dict(type="data", symmetric=False, array=[(interval[1] - value) * scale],
                         arrayminus=[(value - interval[0]) * scale])
        fig.add_bar(x=[group.label], y=[value * scale], name=group.label, error_y=error,
                    marker=dict(color=colour(group), pattern_shape=PRECISION_PATTERNS.get(group.precision, ".")))
    if not fig.data:
        raise ValueError(f"no group has {key}")
    fig.update_layout(title=title, yaxis_title=axis, showlegend=False, xaxis_tickangle=-20)
    return fig


def speedup_chart(found: list[Speedup]):
    import plotly.graph_objects as go

    shown = [s for s in found if not s.refused and number(s.point) is not None]
    if not shown:
        raise ValueError("no speedup was computed")
    fig = go.Figure()
    for s in shown:
        lo, hi = number(s.lo), number(s.hi)
        error = dict(type="data", symmetric=False, array=[hi - s.point], arrayminus=[s.point - lo]) \
            if lo is not None and hi is not None else None
        fig.add_bar(y=[f"{s.kind}: {s.other.label} vs {s.baseline.label}"], x=[s.point], orientation="h",
                    error_x=error, marker_color=colour(s.other), name=s.kind)
    fig.add_vline(x=1.0, line_dash="dot")
    fig.update_layout(title="Speedups (other / baseline, with their intervals)", showlegend=False,
                      height=200 + 60 * len(shown))
    return fig


def loss_chart(groups: list[Group]):
    import plotly.graph_objects as go

    fig = go.Figure()
    for group in groups:
        steps = [s for s in group.first.get("steps") or [] if isinstance(s, dict)]
        points = [(s.get("step"), number(s.get("loss"))) for s in steps if number(s.get("loss")) is not None]
        if points:
            fig.add_scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers", name=group.label,
                            line_color=colour(group), marker_symbol=PRECISION_SYMBOLS.get(group.precision, "x"))
    if not fig.data:
        raise ValueError("no group has a loss")
    fig.update_layout(title="Loss (first run of each group)", xaxis_title="step", yaxis_title="loss")
    return fig


def stacked(groups: list[Group], parts, keys: tuple, title: str, axis: str, scale: float):
    import plotly.graph_objects as go

    rows = [(g, parts(g)) for g in groups]
    rows = [(g, p) for g, p in rows if p]
    if not rows:
        raise ValueError("no group was profiled")
    fig = go.Figure()
    for key in keys:
        fig.add_bar(name=key, x=[g.label for g, _ in rows], y=[(number(p.get(key)) or 0.0) * scale for _, p in rows])
    fig.update_layout(barmode="stack", title=title, yaxis_title=axis)
    return fig


def anchors_chart(groups: list[Group], near: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    for group in groups:
        rows = near.get(group.identity) or []
        rate = number(group.metrics.get("tokens_per_s_per_device"))
        if not rows or rate is None:
            continue
        fig.add_bar(x=[f"this run: {group.label}"], y=[rate], marker_color=colour(group), name="this run")
        for row in rows:
            fig.add_bar(x=[f"published: {row['id']}"], y=[row["tokens_per_s_per_device"]], name="published",
                        marker=dict(color="#ffffff", line=dict(color=colour(group), width=2), pattern_shape="/"))
    if not fig.data:
        raise ValueError("no group has a published row of its model and device")
    fig.update_layout(title="Beside the published numbers (tokens/s per device; hatched: published)",
                      showlegend=False, xaxis_tickangle=-20)
    return fig


def charts(groups: list[Group], found: list[Speedup], near: Optional[dict]) -> list[tuple[str, object]]:
    """(name, drawer) for every chart; a drawer raises ValueError when the data cannot give its chart."""
    drawers = [
        ("throughput", lambda: bars(groups, "tokens_per_s_per_device", "Throughput per device (with its interval)",
                                    "tokens/s/device", errors=True)),
        ("speedups", lambda: speedup_chart(found)),
        ("mfu", lambda: bars(groups, "mfu", "MFU vs the dense spec peak", "MFU (%)", scale=100)),
        ("memory", lambda: bars(groups, "peak_memory_gib", "Peak memory per device", "GiB")),
        ("cost", lambda: bars(groups, "usd_per_1t_tokens", "Cost per 1T training tokens", "US$")),
        ("energy", lambda: bars(groups, "energy_kwh_per_1m_tokens", "Energy per 1M tokens", "kWh")),
        ("time breakdown", lambda: stacked(groups, lambda g: (group_breakdown(g) or {}).get("seconds_per_step"),
                                           CATEGORIES, "Where the time goes (profiled steps)", "ms per step", 1e3)),
        ("memory breakdown", lambda: stacked(groups, lambda g: (group_memory(g) or {}).get("by_category"), MEMORY,
                                             "Where the memory goes (profiled step's peak)", "GiB", 1.0)),
        ("loss", lambda: loss_chart(groups)),
    ]
    if near is not None:
        drawers.append(("published", lambda: anchors_chart(groups, near)))
    return drawers


def table(groups: list[Group]) -> str:
    head = "".join(f'<th data-col="{i}">{html.escape(name)}</th>' for i, (name, _) in enumerate(COLUMNS))
    body = []
    for group in groups:
        cells = []
        for _, key in COLUMNS:
            if key == "flags":
                text = "<br>".join(html.escape(f) for f in counted(group.flags)) or "-"
                cells.append(f"<td>{text}</td>")
                continue
            value = getattr(group, key) if key in ("label", "device", "framework", "numerics") else group.metrics.get(key)
            shown = number(value)
            if shown is None:
                cells.append(f'<td data-sort="">{html.escape(str(value)) if value is not None else "n/a"}</td>')
            else:
                text = f"{shown * 100:.1f}%" if key == "mfu" else f"{shown:,.3g}" if abs(shown) < 100 else f"{shown:,.0f}"
                cells.append(f'<td data-sort="{shown}">{text}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table id="groups"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


SCRIPT = """
window.tprimatErrors = [];
window.addEventListener('error', function (e) {
  window.tprimatErrors.push(String(e.message));
  var box = document.getElementById('script-errors');
  if (box) { box.textContent = window.tprimatErrors.join('\\n'); box.hidden = false; }
});
function sortTable(col, descending) {
  var body = document.querySelector('#groups tbody');
  var rows = Array.prototype.slice.call(body.rows);
  rows.sort(function (a, b) {
    var x = a.cells[col], y = b.cells[col];
    var nx = parseFloat(x.getAttribute('data-sort')), ny = parseFloat(y.getAttribute('data-sort'));
    var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.textContent.localeCompare(y.textContent);
    return descending ? -c : c;
  });
  rows.forEach(function (r) { body.appendChild(r); });
  document.getElementById('groups').setAttribute('data-sorted', col + (descending ? ' desc' : ' asc'));
}
document.addEventListener('DOMContentLoaded', function () {
  document.querySelectorAll('#groups th').forEach(function (th) {
    th.addEventListener('click', function () {
      var col = +th.getAttribute('data-col');
      var now = document.getElementById('groups').getAttribute('data-sorted') || '';
      sortTable(col, now === col + ' asc');
    });
  });
  var m = /sort=([^&]+)/.exec(location.hash);
  if (m) {
    var wanted = decodeURIComponent(m[1]);
    document.querySelectorAll('#groups th').forEach(function (th) {
      if (th.textContent === wanted) { sortTable(+th.getAttribute('data-col'), true); }
    });
  }
});
"""
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; vertical-align: top; }
th { cursor: pointer; background: #f3f3f3; }
td:first-child, th:first-child { text-align: left; }
.chart { margin: 1.5em 0; }
#script-errors { color: #b00; white-space: pre; }
.note { color: #555; font-size: 0.9em; }
"""


PLOTLY_JS = "plotly.min.js"  # beside report.html: one copy for every chart


def write_html(groups: list[Group], found: list[Speedup], out: Path, near: Optional[dict] = None,
               sections: str = "") -> Path:
    """report.html: ``sections`` first where given (HTML: MLPerf's time to train, the answer), then the summary, the
    groups' table and the charts. plotly.js is written once beside it (``plotly.min.js``, every chart's one copy),
    so the page opens offline and stays small."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    parts, missing = [], []
    for name, draw in charts(groups, found, near):
        try:
            fig = draw()
        except (ValueError, OverflowError, TypeError) as exc:
            missing.append(f"{name}: {exc}")
            continue
        fig.update_layout(template="plotly_white", margin=dict(t=60, b=120))
        div = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=f"chart-{len(parts)}",
                          config={"displaylogo": False})
        parts.append(f'<section class="chart" data-chart="{html.escape(name)}">{div}</section>')
    legend = ", ".join(f'<span style="color:{c}">&#9632; {p}</span>' for p, c in PLATFORM_COLOURS.items())
    symbols = ", ".join(f"{p}: {s}" for p, s in PRECISION_SYMBOLS.items())
    summary = "".join(f"<li>{html.escape(s.kind)}: <b>{html.escape(s.other.label)}</b> vs "
                      f"<b>{html.escape(s.baseline.label)}</b>: {html.escape(s.wording())}</li>"
                      for s in found if not s.refused)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tprimat comparison report</title>
<style>{STYLE}</style><script>{SCRIPT}</script><script src="{PLOTLY_JS}"></script></head>
<body><h1>tprimat comparison report</h1>
<pre id="script-errors" hidden></pre>
{sections}
<p class="note">{len(groups)} groups. Colours: platform ({legend}); markers: precision ({symbols}); bars of fp32 are
hatched /, fp8 x. Published rows are never measurements of yours. Click a column to sort.</p>
<h2>Summary</h2><ul>{summary or "<li>no speedup computed</li>"}</ul>
<h2>Groups</h2>{table(groups)}
<h2>Charts</h2>{"".join(parts)}
{"<p class='note'>Not drawn: " + html.escape("; ".join(missing)) + "</p>" if missing else ""}
<script>window.tprimatCharts = {json.dumps(len(parts))};</script>
</body></html>
"""
    script = out / PLOTLY_JS
    if not script.exists() or script.stat().st_size != len(get_plotlyjs().encode()):
        script.write_text(get_plotlyjs())
    path = out / "report.html"
    path.write_text(page)
    return path
