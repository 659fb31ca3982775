"""report.md: what a hardware buyer reads. Every estimate is labelled; every refusal says why."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from tprimat.compare import anchors, breakdown
from tprimat.compare.flags import counted
from tprimat.compare.groups import Group, group_summary, layout_of
from tprimat.compare.speedups import REASONS, REFUSED_EXAMPLES, Speedup, refused_by_reason
from tprimat.compare.table import cell, columns, fmt


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    escape = lambda text: str(text).replace("|", "\\|")  # noqa: E731  (group labels contain pipes)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(escape(c) for c in r) + " |" for r in rows]


def _audit(group: Group) -> str:
    audits = [run.result.get("audit") for run in group.runs]
    if not any(audits):
        return "no audit (native run: the spec is what ran)"
    return "passed" if all(a and a.get("passed") for a in audits) else "FAILED"


def sections(groups: list[Group], found: list[Speedup], skipped: list, plots: list[Path], aggregate: str,
             near: Optional[dict] = None, lead: Optional[list[str]] = None) -> list[str]:
    """The report: ``lead`` first where given (MLPerf's time to train: the answer), then the summary, the tables,
    the methodology, and last what was refused and skipped."""
    lines = ["# tprimat comparison report", ""] + (lead or []) + summary_section(groups, found)
    lines += ["", "## Hardware and software", ""] + hardware_table(groups)
    lines += ["", "## Configuration", ""] + configuration_table(groups)
    lines += ["", "## Performance", ""]
    shown = columns(groups)
    lines += _md_table([h for h, _ in shown], [[cell(g, k) for _, k in shown] for g in groups])
    lines += ["", "## Memory and efficiency", ""] + efficiency_table(groups)
    lines += ["", "## Cost, energy and time to train", ""] + cost_table(groups)
    if near is not None:
        lines += [""] + anchors.section(groups, near)
    rows = breakdown.table(groups)
    if rows:
        lines += ["", "## Where the time goes (profiled steps)", ""] + _md_table(breakdown.HEADERS, rows)
        lines += ["", "Milliseconds per profiled step by category (GPU: kernel time on the device, idle = no kernel "
                  "running; CPU: operators' self time on the training thread); `profile.overhead` in each result "
                  "compares profiled and unprofiled steps."]
    memory_rows = breakdown.memory_table(groups)
    if memory_rows:
        lines += ["", "## Where the memory goes (profiled step's peak)", ""]
        lines += _md_table(breakdown.MEMORY_HEADERS, memory_rows)
        lines += ["", "What was alive when the first profiled step's memory peaked, by category (MemTracker), and "
                  "the CUDA caching allocator's own peaks (GPUs)."]
    lines += ["", "Prices: " + "; ".join(sorted({g.metrics['price_source'] for g in groups})) + ".", ""]
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.parent.name}/{p.name})" for p in plots] + [""]
    lines += methodology_notes(groups, aggregate) + refused_section(found)
    if skipped:
        lines += ["", "## Skipped inputs", ""] + [f"- {p}: {why}" for p, why in skipped]
    return lines


def summary_section(groups: list[Group], found: list[Speedup]) -> list[str]:
    lines = ["## Summary", ""]
    lines += [f"- {s.kind}: **{s.other.label}** vs **{s.baseline.label}**: {s.wording()}"
              for s in found if not s.refused]
    if not found:
        lines.append("- no two groups differ in exactly one axis (platform, device, framework, precision, layout, "
                     "model, methodology, compile, recompute): nothing to compare head to head")
    by_reason = refused_by_reason(found)
    if by_reason:
        lines.append(f"- refused: {sum(map(len, by_reason.values()))} pairs that differ in one axis (Refused pairs, "
                     "at the end): " + "; ".join(f"{len(pairs)}: {REASONS[key]}" for key, pairs in by_reason.items()))
    return lines + [f"- FLAG {g.label}: {flag}" for g in groups for flag in counted(g.flags)]


def refused_section(found: list[Speedup]) -> list[str]:
    """The refused pairs counted under each reason, with the first few as examples of what a ratio would have needed
    to mean something (the report grows with the groups, not with their pairs)."""
    lines = []
    for key, pairs in refused_by_reason(found).items():
        lines += ["", f"### {REASONS[key][0].upper()}{REASONS[key][1:]} ({len(pairs)})", ""]
        lines += [f"- {s.kind}: **{s.other.label}** vs **{s.baseline.label}**: {s.wording()}"
                  for s in pairs[:REFUSED_EXAMPLES]]
        if len(pairs) > REFUSED_EXAMPLES:
            lines.append(f"- ... and {len(pairs) - REFUSED_EXAMPLES} more pairs refused for the same reason")
    return ["", "## Refused pairs"] + lines if lines else []


NOT_STATED = "not stated"  # what no result states: never None, never a guessed default


def hardware_table(groups: list[Group]) -> list[str]:
    rows = []
    for g in groups:
        env = g.first.get("environment") or {}
        gpu, cpu = env.get("gpu") or {}, env.get("cpu") or {}
        version = (g.first.get("framework") or {}).get("version")
        rows.append([g.label, str(gpu.get("name") or cpu.get("model") or NOT_STATED),
                     str(gpu.get("count") if gpu.get("count") is not None else NOT_STATED),
                     str(gpu.get("driver") or NOT_STATED), str((env.get("packages") or {}).get("torch") or NOT_STATED),
                     f"{g.framework} {version or '(version not stated)'}"])
    return _md_table(["group", "device", "GPUs", "driver", "torch", "framework"], rows)


def configuration_table(groups: list[Group]) -> list[str]:
    rows = []
    for g in groups:
        tr = g.spec["training"]
        rows.append([g.label, g.methodology, layout_of(g.first)] + [
            fmt(v) for v in (tr.get("precision"), tr.get("global_batch_size"), tr.get("micro_batch_size"),
                             tr.get("seq_length"), (tr.get("optimizer") or {}).get("lr"),
                             tr.get("activation_checkpointing"))] + [_audit(g)])
    return _md_table(["group", "methodology", "layout", "precision", "GBS", "MBS", "seq", "lr", "recompute",
                      "audit"], rows)


def efficiency_table(groups: list[Group]) -> list[str]:
    rows = [[g.label, fmt(s["peak_memory_gib"]), fmt(s["memory_utilisation"], "memory_utilisation"),
             fmt(s["tflops_per_device"]), fmt(s["mfu"], "mfu"), fmt(s["peak_tflops"]),
             fmt(s["mfu_vs_measured"], "mfu_vs_measured"), fmt(s["measured_ceiling_tflops"])]
            for g, s in ((g, group_summary(g)) for g in groups)]
    return _md_table(["group", "peak mem GiB", "mem utilisation", "TFLOP/s/device", "MFU (spec peak)",
                      "spec peak TFLOP/s", "MFU (measured ceiling)", "measured ceiling TFLOP/s"], rows)


def cost_table(groups: list[Group]) -> list[str]:
    rows = [[g.label, fmt(s["price_per_device_hour_usd"]), fmt(s["usd_per_1t_tokens"]), fmt(s["tokens_per_usd"]),
             fmt(s["energy_kwh_per_1m_tokens"]) + (" (ESTIMATE)" if s["energy_is_estimate"] else ""),
             s["energy_source"], fmt(s["days_to_train_1t"]), fmt(s["days_to_train_15t"])]
            for g, s in ((g, group_summary(g)) for g in groups)]
    return _md_table(["group", "$/device-hour", "$ per 1T tokens", "tokens per $", "kWh per 1M tokens",
                      "energy source", "days to 1T tokens", "days to 15T tokens"], rows)


def methodology_notes(groups: list[Group], aggregate: str) -> list[str]:
    conventions = sorted({str(g.metrics.get("flops_convention") or NOT_STATED) for g in groups})
    warmups = sorted({g.spec["benchmark"]["warmup_steps"] for g in groups})
    return ["## Methodology", "",
            f"- Warm-up: the first {', '.join(map(str, warmups))} step(s) of every repeat are recorded but never "
            "enter any average.",
            f"- Repeats: {sum(g.metrics['repeats'] for g in groups)} repeat(s) over {len(groups)} group(s). The "
            "repeat is the unit of replication: each repeat's rate is total tokens / total time of its own measured "
            f"steps, and a group's throughput is the {aggregate} of its repeat rates"
            + (" (some repeats share one process: benchmark.repeats > 1 in one run)"
               if any(g.metrics.get("repeats_share_process") for g in groups) else "") + ".",
            "- Intervals: with two or more repeats, 95% over repeats (order statistics for the median, with the "
            "achieved coverage where fewer repeats allow less; bootstrap over repeats otherwise). A speedup "
            "between groups of repeats: the ratio of geometric means with Welch's t interval on log rates (95%, "
            "valid at any repeat count); one whose interval contains 1 is not significant, and the table states "
            "the smallest speedup those repeats could show at the observed noise and the repeats a side that 3% "
            "would need. With one repeat the interval is within-run (moving-block bootstrap over steps) and no "
            "significance verdict is drawn. Figures marked (reported) were printed by the framework and carry no "
            "interval.",
            f"- FLOPs convention(s): {', '.join(conventions)} (Megatron-LM model FLOPs, causal attention halved, "
            "recompute not counted).",
            "- MFU: against the dense spec-sheet peak for the training precision (none under fp8 or for unknown "
            "devices); a second MFU against a measured matmul ceiling when `tprimat preflight` results are given.",
            "- Energy: measured from telemetry when the result carries it, else TDP x devices x time, labelled "
            "ESTIMATE.",
            "- Flags: IMPOSSIBLE (TFLOP/s per device above the device's dense peak, or on CPU / unknown devices "
            "above the measured ceiling or the fastest device in the table), INCONSISTENT (a summary that "
            "disagrees with its own steps), inconsistent repeats (rates further apart than their within-run "
            "spread explains), not steady (step time drifting across the window)."]


def write_report(groups, found, skipped, plots, out: Path, aggregate: str, near: Optional[dict] = None,
                 lead: Optional[list[str]] = None) -> Path:
    """``near``: each group's published rows (``--anchors``), else None (no section); ``lead``: what opens it."""
    path = out / "report.md"
    path.write_text("\n".join(sections(groups, found, skipped, plots, aggregate, near, lead)) + "\n")
    return path
