"""``tprimat compare [RESULT_FILES_OR_DIRS...] [--platform ...] [--frameworks a,b] [--models a,b]
[--methodology ...] [--aggregate median|olympic|mean] [--by AXIS] [--preflight FILE...] [--baseline DIR --fail-below 0.95]
[--anchors] [--out DIR]``"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tprimat.compare import anchors as published
from tprimat.compare import plots as plotting
from tprimat.compare import ttt_report
from tprimat.compare.admit import admit
from tprimat.compare.breakdown import group_breakdown, group_memory
from tprimat.compare.gate import gate
from tprimat.compare.groups import build_groups, ceilings_from, group_summary
from tprimat.compare.html import write_html
from tprimat.compare.load import load
from tprimat.compare.report import write_report
from tprimat.compare.speedups import AXES, BY_ALIASES, bounded, speedups
from tprimat.compare.stats import AGGREGATES
from tprimat.compare.table import print_console, write_tables

EXIT_REGRESSION = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", default=["outputs"], help="result files or directories (default: outputs)")
    parser.add_argument("--platform", choices=["nvidia", "amd", "cpu"], action="append",
                        help="keep only these platforms (repeatable)")
    parser.add_argument("--frameworks", help="comma-separated frameworks to keep")
    parser.add_argument("--models", help="comma-separated models to keep")
    parser.add_argument("--methodology", choices=["maximum_performance", "identical_config"])
    parser.add_argument("--aggregate", choices=AGGREGATES, default="median",
                        help="across repeats: median (default), olympic (MLPerf), mean")
    parser.add_argument("--by", choices=[*AXES, *BY_ALIASES], help="speedups along this axis only (default: every "
                        "pair of groups that differ in exactly one axis); platform.gpu is device: accelerators side by "
                        "side at equal device counts, time to train included")
    parser.add_argument("--price", action="append", type=price, metavar="GPU=USD",
                        help="price per device-hour of a GPU (platform.gpu key), for the cost to train of MLPerf "
                        "results ingested without one (repeatable; no price is built in)")
    parser.add_argument("--preflight", nargs="*", default=[], help="tprimat preflight files (measured ceilings)")
    parser.add_argument("--baseline", help="directory of baseline results for the regression gate")
    parser.add_argument("--fail-below", type=float, default=0.95,
                        help="gate threshold: current / baseline tokens/s/device (default 0.95)")
    parser.add_argument("--out", help="write report.md, report.html, plots/*.png, table.csv (+ .parquet) here")
    parser.add_argument("--anchors", action="store_true",
                        help="set the published per-GPU rows of each group's model (and GPU) beside it "
                             "(tprimat/compare/anchors.json, each row with its source)")


def keep(result: dict, args: argparse.Namespace) -> bool:
    spec = result["spec"]
    if args.platform and spec["platform"].get("name") not in args.platform:
        return False
    if args.frameworks and spec["framework"]["name"] not in args.frameworks.split(","):
        return False
    if args.models and spec["model"]["name"] not in args.models.split(","):
        return False
    return not (args.methodology and spec["methodology"].get("name") != args.methodology)


def kept_safely(result: dict, args: argparse.Namespace) -> bool:
    """``keep`` for any JSON object ``tprimat ingest`` may have written (a failed run's spec may be partial)."""
    try:
        return keep(result, args)
    except (KeyError, TypeError, AttributeError):
        return not (args.platform or args.frameworks or args.models or args.methodology)


def price(text: str) -> tuple[str, float]:
    """``--price h100=2.99``: a GPU key and a positive price per device-hour in USD."""
    gpu, _, usd = text.partition("=")
    try:
        value = float(usd)
    except ValueError:
        value = float("nan")
    if not gpu or not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"--price {text!r}: must be GPU=USD, a platform.gpu key and a positive price "
                                         "per device-hour")
    return gpu.lower(), value


def run(args: argparse.Namespace) -> int:
    report = load(args.paths)
    preflights = report.preflights + [json.loads(Path(p).read_text()) for p in args.preflight]
    results, unreadable = admit([r for r in report.results if keep(r.result, args)])
    report.skipped.extend(unreadable)
    ttt = ttt_report.printed(args.paths, dict(args.price or []), BY_ALIASES.get(args.by, args.by) == "device",
                             lambda result: kept_safely(result, args))
    if not results:
        return no_results(args, report.skipped, ttt)
    groups = build_groups(results, args.aggregate, ceilings_from(preflights))
    found = speedups(groups, args.by)
    print_console(groups, found, report.skipped)
    for note in report.notes:
        print(f"note: {note}")
    near = {g.identity: published.beside(g, published.load()["rows"]) for g in groups} if args.anchors else {}
    for group in groups if args.anchors else ():
        print_anchors(group, near[group.identity])
    if args.out:
        write_outputs(Path(args.out), groups, found, report.skipped, near, ttt, args)
    if args.baseline:
        return run_gate(groups, args)
    return 0


def no_results(args: argparse.Namespace, skipped: list, ttt: list) -> int:
    """No ok result to compare: say why; MLPerf runs without throughput blocks still have their time to train."""
    print(f"no ok results under {' '.join(args.paths)} (after filters); skipped: {len(skipped)}", file=sys.stderr)
    for path, why in skipped:
        print(f"  skipped {path}: {why}", file=sys.stderr)
    if ttt and args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "comparison.json").write_text(json.dumps({"time_to_train": [t.as_dict() for t in ttt]}, indent=2))
        lead = ttt_report.lead_section(ttt, ttt_report.chart(ttt, out / "plots" / "time_to_train.png"))
        (out / "report.md").write_text("\n".join(["# tprimat comparison report", "", *lead]) + "\n")
    return 0 if ttt else 1


def write_outputs(out: Path, groups, found, skipped: list, near: dict, ttt: list, args: argparse.Namespace) -> None:
    """comparison.json, report.md, report.html, the plots and the tables under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    pngs = plotting.all_plots(groups, out / "plots")
    tables = write_tables(groups, out)
    comparison = {"groups": [{**group_summary(g), "breakdown": group_breakdown(g), "memory": group_memory(g),
                              **({"anchors": near[g.identity]} if args.anchors else {})} for g in groups],
                  **bounded(found)}
    if args.anchors:
        comparison["anchors"] = published.used_rows(near)
    if ttt:
        comparison["time_to_train"] = [t.as_dict() for t in ttt]
    (out / "comparison.json").write_text(json.dumps(comparison, separators=(",", ":")))  # data, not a page: compact
    lead = ttt_report.lead_section(ttt, ttt_report.chart(ttt, out / "plots" / "time_to_train.png"))
    md = write_report(groups, found, skipped, pngs, out, args.aggregate, near, lead)
    page = write_html(groups, found, out, near if args.anchors else None, ttt_report.html_section(ttt))
    print(f"wrote {md}, {page.name}, {len(pngs)} plots, {', '.join(p.name for p in tables)}")


def print_anchors(group, rows: list[dict]) -> None:
    if not rows:
        print(f"published: no row for {group.model} on {group.device} (tprimat/compare/anchors.json)")
        return
    print(f"published beside {group.label}:")
    for row in rows:
        ratio = f"{row['ratio']:.3f} x" if row["ratio"] is not None else "n/a"
        print(f"  {row['tokens_per_s_per_device']:,} tokens/s/GPU ({row['kind']}, {row['gpus']} x {row['gpu']}, "
              f"{row['source']}): this run {ratio}; differs in: {'; '.join(row['differences']) or 'nothing named'}")


def run_gate(groups, args) -> int:
    base = load([args.baseline])
    baseline_groups = build_groups(base.results, args.aggregate)
    passed, failed, unmatched = gate(groups, baseline_groups, args.fail_below)
    for row in passed:
        print(f"gate ok: {row.label}: {row.ratio:.3f} x baseline")
    for path, why in base.skipped:
        print(f"gate: baseline {path} skipped: {why}")
    for label in unmatched:
        print(f"gate: no baseline result with the spec identity of {label}")
    for row in failed:
        print(f"REGRESSION: {row.label}: {row.current:,.1f} tokens/s/device is {row.ratio:.3f} x baseline "
              f"{row.baseline:,.1f} (threshold {args.fail_below})")
    if not passed and not failed:
        print(f"REGRESSION: nothing to judge: no current group matches any of the {len(baseline_groups)} baseline "
              "group(s) by spec identity")
        return EXIT_REGRESSION
    return EXIT_REGRESSION if failed else 0
