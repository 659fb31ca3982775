"""Non-text sources: TensorBoard event files and W&B offline runs, read without their services."""

from __future__ import annotations

import struct
from pathlib import Path

from tprimat.logs.parsers import Parsed
from tprimat.logs.tprimat import state_spec

TPRIMAT_SPEC = ("platform", "model", "framework", "training", "parallelism")  # a W&B config that is a tprimat spec

# Scalar tags frameworks write, mapped to step-record fields (first match wins).
TAGS = {
    "loss": ("lm loss", "train/loss", "loss", "reduced_train_loss", "train/lm_loss", "train_loss"),
    "lr": ("learning-rate", "learning_rate", "train/lr", "lr", "train/learning_rate"),
    "grad_norm": ("grad-norm", "grad_norm", "train/grad_norm"),
    "step_time_s": ("iteration-time", "train_step_timing in s", "train/step_time_s", "step_time_s"),
    "memory_gib": ("train/memory_gib", "memory_gib"),
    "tflops_per_gpu": ("throughput", "TFLOPS_per_GPU", "train/tflops_per_device"),
}


def tfrecords(path: Path):
    """Payloads of a TFRecord file: uint64 length, uint32 length CRC, data, uint32 data CRC."""
    data = Path(path).read_bytes()
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos: pos + 8])
        start = pos + 12
        if start + length + 4 > len(data):
            break  # truncated tail (a run that died mid-write)
        yield data[start: start + length]
        pos = start + length + 4


def tensorboard_scalars(path: Path) -> dict[str, dict[int, float]]:
    from tensorboard.compat.proto import event_pb2

    scalars: dict[str, dict[int, float]] = {}
    for payload in tfrecords(path):
        event = event_pb2.Event()
        try:
            event.ParseFromString(payload)
        except Exception:  # noqa: BLE001 - a corrupt record is skipped, never fatal
            continue
        for value in event.summary.value:
            if value.HasField("simple_value"):
                number = value.simple_value
            elif value.HasField("tensor") and value.tensor.float_val:
                number = value.tensor.float_val[0]
            else:
                continue
            scalars.setdefault(value.tag, {})[int(event.step)] = float(number)
    return scalars


def steps_from_scalars(scalars: dict[str, dict[int, float]]) -> list[dict]:
    columns = {}
    for field, tags in TAGS.items():
        tag = next((t for t in tags if t in scalars), None)
        if tag:
            columns[field] = scalars[tag]
    keys = sorted({step for col in columns.values() for step in col})
    steps = []
    for step in keys:
        entry = {"step": step, "reported": {}}
        for field, col in columns.items():
            if field == "tflops_per_gpu":
                entry["reported"]["tflops_per_gpu"] = col.get(step)
            else:
                entry[field] = col.get(step)
        steps.append(entry)
    return steps


def wandb_run(path: Path) -> Parsed:
    """A W&B offline run: its history's training scalars as steps; where it is a tprimat run (its config is the
    run's spec), the spec as facts and the warm-up and repeat of each step as the run marked them."""
    from tprimat.results.wandb_offline import read_offline_run

    run = read_offline_run(path)
    scalars: dict[str, dict[int, float]] = {}
    marks: dict[int, tuple] = {}
    for row in run.history:
        step = row.get("_step")
        if step is None:
            continue
        for key, value in row.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                scalars.setdefault(key, {})[int(step)] = float(value)
        if isinstance(row.get("train/warmup"), bool) and isinstance(row.get("train/repeat"), int):
            marks[int(step)] = (row["train/repeat"], row["train/warmup"])
    steps = steps_from_scalars(scalars)
    facts: dict = {}
    spec = {k: v for k, v in run.config.items() if k != "_wandb"}
    if all(isinstance(spec.get(group), dict) for group in TPRIMAT_SPEC):
        platform = spec["platform"]
        world = (platform.get("devices_per_node") or 0) * (platform.get("nodes") or 0)
        state_spec(facts, spec, world, "log: W&B run config (a tprimat run's spec)")
    marked = bool(steps) and all(s["step"] in marks for s in steps)
    for s in steps if marked else ():
        s["repeat"], s["warmup"] = marks[s["step"]]
    error = None if steps else f"no training scalars found in {path.name}"
    return Parsed("wandb", steps, error, facts, {"warmup_marked": True} if marked else {})
