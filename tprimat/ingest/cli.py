"""``tprimat ingest LOG_OR_DIR... [--format ...] [--out DIR] [metadata overrides]``"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Optional

from tprimat.ingest.build import Meta, find_runs, ingest_file, read_system
from tprimat.ingest.mlperf_power import run_energy
from tprimat.ingest.mlperf_repo import in_results_tree, is_power_file, place_of
from tprimat.ingest.stated import as_int
from tprimat.logs.parsers import PARSERS
from tprimat.results.progress import progress
from tprimat.results.result import make_result, new_run_id, write_result
from tprimat.spec.hardware import device_key_from_name

FLAG_KEYS = {"tp": "parallelism.tp", "pp": "parallelism.pp", "cp": "parallelism.cp", "dp": "parallelism.dp",
             "seq-length": "training.seq_length", "global-batch-size": "training.global_batch_size",
             "micro-batch-size": "training.micro_batch_size", "precision": "training.precision",
             "methodology": "methodology"}
EXIT_INVALID = 2  # as a launch whose config breaks a rule
FORMATS = ("auto", *PARSERS, "tensorboard", "wandb")  # every log format's parser (tprimat's own log included)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", help="log files, TensorBoard event files, W&B offline runs, or directories")
    parser.add_argument("--format", choices=FORMATS, default="auto")
    parser.add_argument("--out", default="outputs/ingested", help="directory for the result files")
    parser.add_argument("--model", help="model config (llama, qwen, mistral, llama70b, ...)")
    parser.add_argument("--platform", choices=["nvidia", "amd", "cpu"])
    parser.add_argument("--gpu", help="device key (h100, mi300x, ...)")
    parser.add_argument("--devices", type=int, help="total devices (world size) of the run")
    parser.add_argument("--system", help="system description JSON (MLPerf systems/<system>.json): nodes, GPUs per node, GPU")
    parser.add_argument("--warmup-steps", type=int, help="steps excluded from statistics (default: the config's)")
    for flag, key in FLAG_KEYS.items():
        parser.add_argument(f"--{flag}", help=f"sets {key}")
    parser.add_argument("--mlperf-round", metavar="X.Y", type=mlperf_round,
                        help="the MLPerf Training round of a results repository whose folder name states none (5.0)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any other config key, e.g. --set model.num_layers=4 (repeatable)")


def mlperf_round(text: str) -> str:
    if not re.fullmatch(r"\d+\.\d+", text):
        raise argparse.ArgumentTypeError(f"--mlperf-round {text!r}: a round is MAJOR.MINOR, such as 5.0")
    return text


def meta_from(args: argparse.Namespace, compose) -> Meta:
    overrides = []
    if args.model:
        overrides.append(f"model={args.model}")
    if args.platform:
        overrides.append(f"platform={args.platform}")
    if args.gpu:
        overrides.append(f"platform.gpu={args.gpu}")
    if args.devices is not None:
        overrides.append(f"world_size={args.devices}")
    for flag, key in FLAG_KEYS.items():
        value = getattr(args, flag.replace("-", "_"))
        if value is not None:
            overrides.append(f"{key}={value}")
    return Meta(compose, overrides + list(args.set), args.warmup_steps, read_system(args.system))


def run(args: argparse.Namespace, compose) -> int:
    """``compose``: overrides -> plain config, from the entry point (tprimat.compose.compose)."""
    paths = args.paths
    found = find_runs(paths)
    # inside an MLPerf results repository, only result_*.txt are run logs; power/ readings belong to their run
    power = [p for p in found if is_power_file(p)]
    runs = [p for p in found if place_of(p) is not None or not in_results_tree(p)]
    not_logs = len(found) - len(runs) - len(power)
    if power:
        print(f"read {len(power)} MLPerf Power files as the energy of their runs, not as runs")
    if not_logs:
        print(f"skipped {not_logs} files of MLPerf results folders that are not run logs (result_*.txt)")
    if not runs:
        print(f"no logs found under {' '.join(paths)}")
        return 1
    meta, out = meta_from(args, compose), Path(args.out)
    problems = meta.problems()
    if problems:  # nothing is ingested from a premise no run could have had
        print("tprimat ingest: nothing ingested; what the command line states breaks the config's rules:")
        for problem in problems:
            print(f"  {problem}")
        return EXIT_INVALID
    unread: list[tuple[Path, str]] = []
    with progress(len(runs), "ingesting") as advance:
        for path in runs:
            ingest_one(path, meta, args.format, out, unread, given_system=bool(args.system),
                       mlperf_round=args.mlperf_round)
            advance(path.name)
    if unread:
        print(f"{len(unread)} of {len(runs)} files could not be ingested:")
        for path, why in unread:
            print(f"  {path}: {why}")
    return 1 if unread else 0


PRECISION_WORDS = re.compile(r"\b(NVFP4|MXFP4|FP4|MXFP8|FP8|BF16|FP16)\b", re.IGNORECASE)


def precision_of(system: Optional[dict]) -> Optional[str]:
    """The precision a systems JSON's notes name ("sw_notes": "FP8 Training" in AMD's v5.1 JSONs), as written, with
    where it was read; None where they name none (MLPerf logs state no precision)."""
    for key in ("sw_notes", "hw_notes"):
        text = (system or {}).get(key)
        found = PRECISION_WORDS.search(text) if isinstance(text, str) else None
        if found:
            return f"{found.group(1).lower()} (systems JSON {key}: {text[:80]!r})"
    return None


def unknown_accelerator(system: Optional[dict]) -> Optional[str]:
    """A flag for an accelerator the hardware table does not hold: it keeps its own name, never another GPU's."""
    name = str((system or {}).get("accelerator_model_name") or "")
    if not name or device_key_from_name(name):
        return None
    return f"accelerator {name[:120]!r} is not in the hardware table: kept as named, no peak, MFU or projection"


def ingest_one(path: Path, meta, fmt: str, out: Path, unread: list, given_system: bool = False,
               mlperf_round: Optional[str] = None) -> None:
    """One file: its result written (a failed one if it cannot be read), its headline printed. A run log of an
    MLPerf results repository is paired with its systems JSON (unless ``--system`` names one) and scaling.json by
    the layout, and its result carries where it sits (``source.mlperf``) and its MLPerf Power energy."""
    place = place_of(path)
    mlperf = None
    if place is not None:
        meta, mlperf = mlperf_source(place, meta, given_system, mlperf_round)
        fmt = "mlperf" if fmt == "auto" else fmt  # a results repository's run log: its MLLOG records, whatever else
    try:
        result = ingest_file(path, meta, fmt)
    except Exception as exc:  # noqa: BLE001 - one bad file never stops the others; it gets a failed result
        result = unreadable(path, f"could not ingest {path.name}: {type(exc).__name__}: {exc}", meta)
    if mlperf is not None:
        result["source"]["mlperf"] = mlperf
        nodes, switches = place.power_files(path)
        if nodes or switches:
            mlperf["power"] = run_energy(nodes, switches, time_to_train_ms(result["source"]))
    if result["source"].get("unreadable"):
        unread.append((path, (result["error"] or "").splitlines()[0][:200]))
    try:
        folder = out / mlperf["submitter"] / mlperf["system"] / mlperf["benchmark"] if mlperf else out
        target = write_result(result, folder / f"{path.stem}-{result['run_id']}")
    except OSError as exc:
        unread.append((path, f"cannot write its result: {exc}"))
        return
    steps = len(result["steps"])
    print(f"{path}: {result['source']['format']}, {steps} steps, status {result['status']} -> {target}")
    if result["error"]:
        print("  " + result["error"].splitlines()[0][:200])
    for line in headline(result) + warning_lines(result["warnings"]):
        print("  " + line)


def mlperf_source(place, meta, given_system: bool, mlperf_round: Optional[str]) -> tuple:
    """(the metadata with the systems JSON unless ``--system`` named one, ``source.mlperf``) of a run log placed in
    a results repository: where it sits, its round, the review's scaling factor and what the systems JSON states."""
    system, why_system = place.read_system()
    factor, why_scaling = place.scaling_factor()
    if not given_system and system is not None:
        meta = dataclasses.replace(meta, system=system)
    system = meta.system or {}
    nodes, per_node = as_int(system.get("number_of_nodes")), as_int(system.get("accelerators_per_node"))
    return meta, {**place.as_source(), "scaling_factor": factor, "round": mlperf_round or place.round,
                  "accelerator": system.get("accelerator_model_name") or None, "nodes": nodes,
                  "devices": nodes * per_node if nodes and per_node else None,
                  "framework": system.get("framework") or None, "precision": precision_of(system),
                  "flags": [w for w in (why_system if not given_system else None, why_scaling,
                                        unknown_accelerator(system)) if w]}


def time_to_train_ms(source: dict) -> Optional[float]:
    start, stop = source.get("run_start_ms"), source.get("run_stop_ms")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, stop))
    return float(stop - start) if numbers and stop >= start else None


WARNINGS_SHOWN = 10  # per file; result.json keeps them all


def headline(result: dict) -> list[str]:
    """The summary's throughput figures, each with its provenance (measured, computed, reported)."""
    summary = result.get("summary") or {}
    figures = [(f"{summary[key]:,.{digits}f} {unit}", (summary.get("provenance") or {}).get(key, "?"))
               for key, unit, digits in (("tokens_per_s_per_device", "tokens/s/device", 0),
                                         ("tflops_per_device", "TFLOP/s/device", 1))
               if summary.get(key) is not None]
    return ["; ".join(f"{figure} ({source})" for figure, source in figures)] if figures else []


def warning_lines(warnings: list[str]) -> list[str]:
    lines = [f"warning: {w}" for w in warnings[:WARNINGS_SHOWN]]
    if len(warnings) > WARNINGS_SHOWN:
        lines.append(f"... {len(warnings) - WARNINGS_SHOWN} more warnings in result.json")
    return lines


def unreadable(path: Path, error: str, meta: Meta) -> dict:
    """A ``failed`` result for a file that could not be read at all, saying why."""
    return make_result(run_id=new_run_id(), status="failed", error=error, spec=None, warnings=[error],
                       overrides=meta.overrides, source={"kind": "ingested", "format": "unknown", "file": path.name,
                                                         "unreadable": True})
