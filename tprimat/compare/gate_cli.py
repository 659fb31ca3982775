"""``tprimat gate RESULTS... --write-golden DIR`` stores golden values; ``tprimat gate RESULTS... --golden DIR
[--time-tolerance 0.05] [--memory-tolerance 0.05] [--min-correlation 0.95]`` holds the results to them
(``tprimat.compare.golden``). Exit 0: every check holds; 1: a regression or what the gate cannot vouch for, one
line per failed check naming it (``throughput``, ``loss``, ``memory``, ``golden``: a workload with none,
``missing``: a golden workload with no current result, ``skipped``: a result file compare could not read, with
why); 2: bad input (golden values missing or unreadable, no results), one line."""

from __future__ import annotations

import argparse
from pathlib import Path

from tprimat.compare.golden import GoldenError, judge, read_golden, write_golden
from tprimat.compare.groups import build_groups
from tprimat.compare.load import load

EXIT_REGRESSION, EXIT_BAD_INPUT = 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", help="result files or directories")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--write-golden", metavar="DIR", help="store the results' golden values in DIR/golden.json")
    where.add_argument("--golden", metavar="DIR", help="check the results against DIR/golden.json")
    parser.add_argument("--time-tolerance", type=float, default=0.05,
                        help="slowdown of the steady step time allowed (default 0.05)")
    parser.add_argument("--memory-tolerance", type=float, default=0.05,
                        help="growth of the peak memory allowed (default 0.05)")
    parser.add_argument("--min-correlation", type=float, default=0.95,
                        help="Pearson correlation of the loss curves required (default 0.95)")
    parser.add_argument("--allow-missing", action="append", default=[], choices=["memory"],
                        help="a figure the golden values or the results lack passes, said (default: fails)")


def run(args: argparse.Namespace) -> int:
    report = load(args.paths)
    if not report.results and not report.skipped:
        print(f"tprimat gate: no results found under {' '.join(args.paths)}")
        return EXIT_BAD_INPUT
    groups = build_groups(report.results)
    if args.write_golden:
        if report.skipped:  # golden values are only written from results that could all be read
            for path, why in report.skipped:
                print(f"FAILED skipped: {path}: {why}")
            return EXIT_REGRESSION
        path = write_golden(groups, Path(args.write_golden))
        print(f"wrote golden values of {len(groups)} group(s) to {path}")
        return 0
    try:
        verdicts = judge(groups, read_golden(Path(args.golden)), args.time_tolerance, args.memory_tolerance,
                         args.min_correlation, tuple(args.allow_missing))
    except GoldenError as exc:
        print(f"tprimat gate: {exc}")
        return EXIT_BAD_INPUT
    for path, why in report.skipped:
        print(f"FAILED skipped: {path}: {why}")
    for note in report.notes:
        print(f"note: {note}")
    for verdict in verdicts:
        for check in verdict.checks:
            print(f"{'ok' if check.ok else 'FAILED'} {check.name}: {verdict.label}: {check.text}")
        for note in verdict.notes:
            print(f"note: {verdict.label}: {note}")
    return 0 if all(v.ok for v in verdicts) and not report.skipped else EXIT_REGRESSION
