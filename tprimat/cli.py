"""The ``tprimat`` console script: ``tprimat launch [hydra overrides]``, ``tprimat check RESULT...``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def check(paths: list[str]) -> int:
    from tprimat.result import read_result, validate_result

    bad = 0
    for path in paths:
        try:
            problems = validate_result(read_result(Path(path)))
        except (OSError, ValueError) as exc:
            problems = [f"cannot read: {exc}"]
        bad += bool(problems)
        print(f"{path}: {'ok' if not problems else 'INVALID'}")
        for line in problems:
            print(f"  {line}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "launch":
        from tprimat.launch import main as launch_main

        sys.argv = [sys.argv[0], *argv[1:]]
        launch_main()
        return
    parser = argparse.ArgumentParser(prog="tprimat", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("launch", help="run a benchmark: tprimat launch [group=option ...] [key=value ...]")
    check_parser = sub.add_parser("check", help="validate result files against the JSON Schema")
    check_parser.add_argument("results", nargs="+")
    args = parser.parse_args(argv)
    sys.exit(check(args.results))
