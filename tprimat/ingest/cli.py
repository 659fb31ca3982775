"""``tprimat ingest LOG_OR_DIR... [--format ...] [--out DIR] [metadata overrides]``"""

from __future__ import annotations

import argparse
from pathlib import Path

from tprimat.ingest.build import Meta, find_runs, ingest_file, read_system
from tprimat.results.result import write_result

FLAG_KEYS = {"tp": "parallelism.tp", "pp": "parallelism.pp", "cp": "parallelism.cp", "dp": "parallelism.dp",
             "seq-length": "training.seq_length", "global-batch-size": "training.global_batch_size",
             "micro-batch-size": "training.micro_batch_size", "precision": "training.precision",
             "methodology": "methodology"}
FORMATS = ("auto", "megatron", "primus", "nemo", "torchtitan", "deepspeed", "hf", "mlperf", "tensorboard", "wandb")


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
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any other config key, e.g. --set model.num_layers=4 (repeatable)")


def meta_from(args: argparse.Namespace, compose) -> Meta:
    overrides = []
    if args.model:
        overrides.append(f"model={args.model}")
    if args.platform:
        overrides.append(f"platform={args.platform}")
    if args.gpu:
        overrides.append(f"platform.gpu={args.gpu}")
    if args.devices:
        overrides.append(f"world_size={args.devices}")
    for flag, key in FLAG_KEYS.items():
        value = getattr(args, flag.replace("-", "_"))
        if value is not None:
            overrides.append(f"{key}={value}")
    return Meta(compose, overrides + list(args.set), args.warmup_steps, read_system(args.system))


def run(args: argparse.Namespace, compose) -> int:
    """``compose``: overrides -> plain config, from the entry point (tprimat.compose.compose)."""
    paths = args.paths
    runs = find_runs(paths)
    if not runs:
        print(f"no logs found under {' '.join(paths)}")
        return 1
    meta, out = meta_from(args, compose), Path(args.out)
    for path in runs:
        result = ingest_file(path, meta, args.format)
        target = write_result(result, out / f"{path.stem}-{result['run_id']}")
        steps = len(result["steps"])
        print(f"{path}: {result['source']['format']}, {steps} steps, status {result['status']} -> {target}")
        if result["error"]:
            print("  " + result["error"].splitlines()[0][:200])
    return 0
