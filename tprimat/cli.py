"""The ``tprimat`` console script: one subcommand per question a user asks (``DESCRIPTION``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional


def check(paths: list[str], rebuild_missing: bool = False) -> int:
    """Validate result files (or run directories); a run directory whose result.json is missing but whose
    steps.jsonl survived is reported, or with ``--rebuild`` given a ``failed`` result rebuilt from it."""
    from tprimat.results.readfile import UnreadableFile, read_json
    from tprimat.results.result import RESULT_FILE, check_result, write_result
    from tprimat.results.steplog import STEPS_FILE, rebuild

    bad = 0
    for path in map(Path, paths):
        if path.is_dir() and not (path / RESULT_FILE).exists() and (path / STEPS_FILE).exists():
            if not rebuild_missing:
                bad += 1
                print(f"{path}: no {RESULT_FILE}; {STEPS_FILE} holds the measured steps "
                      f"(tprimat check --rebuild {path} writes a failed result from them)")
                continue
            try:
                print(f"{path}: rebuilt a failed result from {STEPS_FILE} -> {write_result(rebuild(path), path)}")
            except OSError as exc:
                bad += 1
                print(f"{path}: cannot write the rebuilt result: {exc}")
                continue
        try:  # as stored: step columns are checked as columns, not made into one object per step first
            problems = check_result(read_json(path / RESULT_FILE if path.is_dir() else path))
        except UnreadableFile as exc:
            problems = [str(exc)]
        bad += bool(problems)
        print(f"{path}: {'ok' if not problems else 'INVALID'}")
        for line in said_once(problems):
            print(f"  {line}")
    return 1 if bad else 0


PROBLEM_CHARS = 400  # a printed problem's length at most (jsonschema quotes whole objects)


def said_once(problems: list[str]) -> list[str]:
    """The problems to print: one line for the same problem at many steps (``steps/*/tokens: ... (at 277,171
    steps, the first steps/0)``), each line cut at ``PROBLEM_CHARS``."""
    by_rest: dict[str, list[str]] = {}
    for line in problems:
        head, slash, rest = line.removeprefix("steps/").partition("/")
        key = rest if line.startswith("steps/") and slash and head.isdigit() else line
        by_rest.setdefault(key, []).append(head if key == rest else "")
    out = []
    for key, steps in by_rest.items():
        line = (f"steps/{steps[0]}/{key}" if len(steps) == 1 else
                f"steps/*/{key} (at {len(steps):,} steps, the first steps/{steps[0]})") if steps[0] else key
        out.append(line if len(line) <= PROBLEM_CHARS else line[:PROBLEM_CHARS] + " ...")
    return out


def plan(args) -> int:
    from tprimat.compose import Composer, OverrideError, expand
    from tprimat.sweep.plan import plan_sweep, print_points, write_csv

    if args.best:
        return plan_best(list(args.overrides))
    try:
        expanded = expand(list(args.overrides))
    except OverrideError as exc:
        print(f"invalid: {exc}")
        return 2
    points = plan_sweep(expanded, Composer().compose, deep=args.deep)
    print_points(points)
    if args.out:
        print(f"wrote {write_csv(points, Path(args.out))}")
    return 0 if all(p.valid for p in points) else 2


def plan_best(overrides: list[str]) -> int:
    """Every layout that fits the model on the platform, fastest projected first (NeMo's auto-configurator's
    question, answered from tprimat's own memory estimate and projection)."""
    from tprimat.compose import compose
    from tprimat.execute.fit import fitting
    from tprimat.measure.devices import detect
    from tprimat.spec.build import SpecError, build_spec

    hw = detect()
    try:
        spec = build_spec(compose(overrides), hw)
    except SpecError as exc:  # an OverrideError too
        print(f"invalid: {exc.problems[0]}")
        return 2
    if spec.platform.name != "cpu" and spec.platform.gpu is None:
        print("platform.gpu is null: name the device to plan against (platform.gpu=h100, mi300x, ...)")
        return 2
    fits = fitting(spec, hw)
    print(f"{len(fits)} layouts of framework={spec.framework.name} fit {spec.model.name} on {spec.platform.devices_per_node}"
          f" x {spec.platform.gpu or spec.platform.name} (micro_batch_size={spec.training.micro_batch_size}, "
          f"seq_length={spec.training.seq_length}), fastest projected first:")
    for rank, fit in enumerate(fits, 1):
        print(f"{rank:3d}. {fit.text()}")
    return 0 if fits else 1


def project(args) -> int:
    """Each point's projection on its target device (the same overrides as launch.py, sweep syntax too)."""
    from tprimat.compose import Composer, OverrideError, expand
    from tprimat.execute.project import print_projection, read_preflight
    from tprimat.measure.devices import detect

    if args.verify and not args.measure:
        print("--verify: it checks a measured slice against the spec's own run; it needs --measure")
        return 2
    if args.rounds is not None and (not args.measure or args.rounds < 1):
        print(f"--rounds {args.rounds}: the measured slice's interleaved rounds; it needs --measure and at least 1")
        return 2
    hw = detect()  # resolves platform=auto; a dry-run preparation checks nothing against this host
    try:
        preflight = read_preflight(args.preflight)
    except (OSError, ValueError) as exc:
        print(f"--preflight: {exc}")
        return 2
    try:
        expanded = expand(list(args.overrides))
    except OverrideError as exc:
        print(f"invalid: {exc}")
        return 2
    bad, compose, out = 0, Composer().compose, []
    for overrides in expanded:
        label = " ".join(overrides) or "(defaults)"
        result, problem = project_point(overrides, compose, hw, preflight, args.measure, args.verify, args.rounds)
        if problem:
            print(f"{label}: invalid: {problem}")
        else:
            print_projection(label, result)
            out.append({"overrides": overrides, "projection": result})
        bad += bool(problem) or not result["available"]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 2 if bad else 0


def project_point(overrides: list[str], compose, hw, preflight, measure: bool, verify: bool = False,
                  rounds: Optional[int] = None) -> tuple[Optional[dict], str]:
    """(the point's projection, "") or (None, why it is invalid): the roofline, or with ``measure`` its measured
    slice run here (``tprimat.execute.slice``; ``rounds`` of it where asked), with ``verify`` beside the spec's own
    run."""
    from tprimat.execute.prepare import prepare
    from tprimat.execute.project import projection_of
    from tprimat.spec.build import SpecError, build_spec

    try:
        spec = build_spec(compose(overrides), hw)
    except SpecError as exc:
        return None, exc.problems[0]
    prepared = prepare(spec, hw, dry_run=True)
    if prepared.all_problems:  # the rules a launch and tprimat plan apply, the backend's own included
        return None, prepared.all_problems[0]
    if not measure:
        return projection_of(spec, prepared.plan, preflight), ""
    return measured_point(compose(overrides), spec, prepared.plan, hw, preflight, verify, rounds)


def measured_point(config: dict, spec, plan, hw, preflight, verify: bool = False,
                   rounds: Optional[int] = None) -> tuple[Optional[dict], str]:
    """The measured slice run here, or for a target bigger than this machine, on one of its devices."""
    from tprimat.execute.run import execute
    from tprimat.execute.scaleout import bigger_than_here
    from tprimat.execute.slice import project_measured

    if bigger_than_here(spec, hw):
        if verify:
            return None, "--verify: the target is bigger than this machine, which cannot run it to check against"
        return project_scaled_out(config, spec, plan, hw, preflight, rounds)
    return project_measured(config, spec, plan, execute, verify, rounds=rounds), ""


def project_scaled_out(config: dict, spec, plan, hw, preflight, rounds: Optional[int] = None) -> tuple[Optional[dict], str]:
    """A target bigger than this machine: its slice measured on one device here, its links modelled."""
    from tprimat.execute.prepare import prepare
    from tprimat.execute.run import execute
    from tprimat.execute.scaleout import compose_target, one_device_batch
    from tprimat.execute.slice import project_measured, with_settings
    from tprimat.spec.build import SpecError, build_spec

    local_config = with_settings(config, one_device_batch(spec))
    try:
        local = build_spec(local_config, hw)
    except SpecError as exc:
        return None, f"the one-device slice: {exc.problems[0]}"
    prepared = prepare(local, hw, dry_run=True)
    if prepared.problems:
        return None, f"the one-device slice: {prepared.problems[0]}"
    measured = project_measured(local_config, local, prepared.plan, execute, near=False, rounds=rounds)
    return (compose_target(spec, plan, measured, preflight) if measured["available"] else measured), ""


DESCRIPTION = """\
tprimat benchmarks LLM training across GPUs (NVIDIA, AMD, a CPU for development) and training frameworks, so that
you can answer which hardware and which stack trains a model faster and cheaper, and why.

Before anything runs:
  plan       validate every point of a sweep and check it fits in memory
  project    projected step time, tokens/s and MFU of a spec on its device

Run and measure:
  launch     run one benchmark (the same as python launch.py; Hydra overrides)
  preflight  measure this machine's matmul, memory and all-reduce ceilings

Read what ran:
  ingest     turn other frameworks' logs (and MLPerf results folders) into tprimat results
  compare    tables, speedups, time to train, energy, plots and a report from results
  gate       fail CI when throughput, the loss curve or memory moved from golden values
  check      validate result files against the result schema

Run "tprimat COMMAND --help" for a command's options."""


def build_parser() -> argparse.ArgumentParser:
    from tprimat import __version__

    parser = argparse.ArgumentParser(prog="tprimat", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"tprimat {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("launch", help="run a benchmark: tprimat launch [group=option ...] [key=value ...]")
    check_parser = sub.add_parser("check", help="validate result files against the JSON Schema")
    check_parser.add_argument("results", nargs="+", help="result files or run directories")
    check_parser.add_argument("--rebuild", action="store_true",
                              help="a run directory without result.json: write a failed result from its steps.jsonl")
    from tprimat.compare.cli import add_arguments as compare_arguments
    from tprimat.execute.preflight_args import add_arguments as preflight_arguments
    from tprimat.ingest.cli import add_arguments as ingest_arguments

    compare_arguments(sub.add_parser("compare", help="compare results: tables, speedups, plots, report"))
    from tprimat.compare.gate_cli import add_arguments as gate_arguments

    gate_arguments(sub.add_parser("gate", help="golden-value regression gate for CI: throughput, loss curve, memory"))
    preflight_arguments(sub.add_parser("preflight", help="measure matmul FLOP/s and all-reduce bandwidth here"))
    ingest_arguments(sub.add_parser("ingest", help="turn other frameworks' logs into tprimat results"))
    plan_parser = sub.add_parser("plan", help="validate and plan every point of a sweep without running it")
    plan_parser.add_argument("overrides", nargs="*", help="Hydra overrides with sweep syntax: parallelism.tp=1,2,4,8")
    plan_parser.add_argument("--out", help="CSV of every point (default: print only)")
    plan_parser.add_argument("--best", action="store_true",
                             help="list every layout (tp, pp, cp, sharding, recompute) that fits the one point the "
                                  "overrides name, fastest projected first")
    plan_parser.add_argument("--deep", action="store_true",
                             help="native backend: build one rank of every pipeline stage of each layout for real, "
                                  "full size, in a fake world on this CPU (parameter, gradient and optimizer bytes)")
    project_parser = sub.add_parser("project", help="projected step time, tokens/s and MFU of a spec on its device")
    project_parser.add_argument("overrides", nargs="*", help="the same overrides as launch.py (sweep syntax too)")
    project_parser.add_argument("--preflight", help="a tprimat preflight file: measured ceilings instead of the table")
    project_parser.add_argument("--json", help="write every point's projection to this JSON file")
    project_parser.add_argument("--measure", action="store_true",
                                help="project from a measured slice: four short real runs of the spec here (1-2 "
                                     "layers per stage x 1-2 micro batches), extrapolated to its layers and batch")
    project_parser.add_argument("--verify", action="store_true",
                                help="with --measure: also run the spec itself, in the same interleaved rounds, and "
                                     "print the projection's error against it (a spec this machine runs)")
    project_parser.add_argument("--rounds", type=int, metavar="N",
                                help="with --measure: exactly N interleaved rounds of the slices (default: 3, and up "
                                     "to 5 while their projections spread more than 15%%); fewer is sooner and noisier")
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "launch":
        from tprimat.launch import main as launch_main

        sys.argv = [sys.argv[0], *argv[1:]]
        launch_main()
        return
    args = build_parser().parse_args(argv)
    if args.command == "check":
        sys.exit(check(args.results, args.rebuild))
    if args.command == "gate":
        from tprimat.compare.gate_cli import run as gate

        sys.exit(gate(args))
    if args.command == "compare":
        from tprimat.compare.cli import run as compare

        sys.exit(compare(args))
    if args.command == "plan":
        sys.exit(plan(args))
    if args.command == "project":
        sys.exit(project(args))
    if args.command == "ingest":
        from tprimat.compose import compose
        from tprimat.ingest.cli import run as ingest

        sys.exit(ingest(args, compose))
    from tprimat.execute.preflight import run as preflight

    sys.exit(preflight(args))


if __name__ == "__main__":
    main()
