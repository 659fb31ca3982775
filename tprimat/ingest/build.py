"""Parsed steps + what the user says about the run -> a tprimat result (same schema, same metrics code)."""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from tprimat.logs.clean import clean_lines
from tprimat.logs.parsers import PARSERS, detect, failure_excerpt, hf_final_summary
from tprimat.results.metrics import summarize
from tprimat.results.records import StepRecord
from tprimat.results.result import make_result, new_run_id
from tprimat.spec import flops
from tprimat.spec.build import build_spec, spec_to_dict
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.plan import make_plan
from tprimat.spec.schema import TprimatConf

FRAMEWORK_OF = {"megatron": "megatron", "primus": "primus", "nemo": "nemo", "torchtitan": "torchtitan",
                "deepspeed": "deepspeed", "hf": "transformers"}
# What each framework's printed TFLOP/s counts (FACTS.md section 1); inferred per run when the numbers allow.
REPORTED_CONVENTIONS = {"megatron": (flops.MEGATRON, flops.MEGATRON_LEGACY), "primus": (flops.MEGATRON, flops.MEGATRON_LEGACY),
                        "nemo": (flops.MEGATRON, flops.MEGATRON_LEGACY), "torchtitan": (flops.TORCHTITAN,)}
NO_HARDWARE = DetectedHardware("none", "ingested log: no live hardware", 0, 0.0, None)


@dataclass
class Meta:
    """What a log does not say, from the command line, and how the entry point composes a config."""

    compose: Callable[[list[str]], dict]  # overrides -> plain config (tprimat.compose.compose)
    overrides: list[str] = field(default_factory=list)  # Hydra-style: model=llama platform=amd ...
    warmup_steps: Optional[int] = None


@dataclass
class Parsed:
    format: str
    steps: list[dict]
    error: Optional[str]
    final: Optional[dict] = None


def parse_text(raw: str, fmt: str = "auto") -> Parsed:
    lines = clean_lines(raw)
    chosen = detect(raw) if fmt == "auto" else fmt
    steps = PARSERS[chosen](lines) if chosen in PARSERS else []
    excerpt = failure_excerpt(lines)
    error = None
    if not steps:
        error = excerpt or ("no training step found" + ("" if chosen else " (format not recognised)"))
    elif excerpt:
        error = excerpt
    final = hf_final_summary(lines) if chosen == "hf" else None
    return Parsed(chosen or "unknown", steps, error, final)


def base_spec(meta: Meta, framework: str) -> TprimatConf:
    config = meta.compose([f"framework.name={framework}", "logging.wandb.mode=disabled", "platform=cpu",
                           *meta.overrides])
    if meta.warmup_steps is not None:
        config["benchmark"]["warmup_steps"] = meta.warmup_steps
    return build_spec(config)


def to_records(steps: list[dict], spec: TprimatConf, warnings: list[str]) -> list[StepRecord]:
    warmup = min(spec.benchmark.warmup_steps, max(len(steps) - 1, 0))
    if warmup < spec.benchmark.warmup_steps:
        warnings.append(f"only {len(steps)} steps: {warmup} of benchmark.warmup_steps="
                        f"{spec.benchmark.warmup_steps} excluded as warm-up")
    records = []
    for i, s in enumerate(steps):
        reported = dict(s.get("reported") or {})
        time_s = s.get("step_time_s")
        if time_s is not None and time_s <= 0:  # timer artefacts happen (NeMo around async checkpoints)
            reported["step_time_s_printed"] = time_s
            warnings.append(f"step {s['step']}: printed step time {time_s} s is not positive; ignored")
            time_s = None
        gbs = reported.get("global_batch_size") or spec.training.global_batch_size
        records.append(StepRecord(step=int(s["step"]), step_time_s=time_s, tokens=int(gbs * spec.training.seq_length),
                                  loss=s.get("loss"), lr=s.get("lr"), grad_norm=s.get("grad_norm"),
                                  memory_gib=s.get("memory_gib"), peak_memory_gib=s.get("peak_memory_gib"),
                                  warmup=i < warmup, reported=reported))
    return records


def infer_convention(fmt: str, records: list[StepRecord], spec: TprimatConf, world: int) -> dict:
    """Which FLOPs convention the framework's own TFLOP/s used: the candidate that reproduces it within 2%."""
    pairs = [(r.reported.get("tflops_per_gpu"), r.step_time_s, r.tokens) for r in records if not r.warmup]
    pairs = [(t, s, n) for t, s, n in pairs if t and s and n]
    if not pairs:
        return {"reported_tflops_per_device": None, "reported_flops_convention": None}
    reported = statistics.median(t for t, _, _ in pairs)
    convention = "unknown (does not match a known convention with the given model and batch)"
    for candidate in REPORTED_CONVENTIONS.get(fmt, ()):
        per_token = flops.flops_per_token(spec.model, spec.training.seq_length, candidate)
        predicted = statistics.median(per_token * n / (s * 1e12 * world) for _, s, n in pairs)
        if abs(predicted / reported - 1) < 0.02:
            convention = candidate
            break
    return {"reported_tflops_per_device": reported, "reported_flops_convention": convention}


def ingest_text(raw: str, name: str, meta: Meta, fmt: str = "auto") -> dict:
    return _result(parse_text(raw, fmt), name, meta, hashlib.sha256(raw.encode("utf-8", "replace")).hexdigest())


def _result(parsed: Parsed, name: str, meta: Meta, sha256: str) -> dict:
    framework = FRAMEWORK_OF.get(parsed.format, "unknown")
    spec = base_spec(meta, framework if framework != "unknown" else "native")
    if framework == "unknown" and not any(o.startswith("framework.name=") for o in meta.overrides):
        spec = build_spec({**spec_to_dict(spec), "framework": {**spec_to_dict(spec.framework), "name": "unknown"}})
    warnings: list[str] = []
    records = to_records(parsed.steps, spec, warnings)
    plan = replace(make_plan(spec, NO_HARDWARE), backend=framework,
                   backend_description=f"ingested {parsed.format} log {name}")
    summary = summarize(records, plan.world_size, plan.flops_per_token, plan.peak_tflops)
    if summary is not None:
        summary.update(infer_convention(parsed.format, records, spec, plan.world_size))
    status = "failed" if parsed.error else "ok"
    if status == "ok" and summary is None:
        warnings.append("no step has both a step time and a token count: throughput not computed "
                        "(pass training.seq_length / training.global_batch_size, or the log has no step times)")
    result = make_result(run_id=new_run_id(), status=status, error=parsed.error, spec=spec_to_dict(spec),
                         plan=plan.as_dict(), environment=None, steps=[r.as_dict() for r in records],
                         summary=summary, warnings=warnings, framework={"name": framework, "version": None},
                         overrides=meta.overrides,
                         source={"kind": "ingested", "format": parsed.format, "file": name, "sha256": sha256,
                                 "final_summary": parsed.final})
    return result


def ingest_file(path: Path, meta: Meta, fmt: str = "auto") -> dict:
    path = Path(path)
    if fmt == "tensorboard" or (fmt == "auto" and path.name.startswith("events.out.tfevents")):
        from tprimat.ingest.sources import steps_from_scalars, tensorboard_scalars

        return ingest_steps(steps_from_scalars(tensorboard_scalars(path)), "tensorboard", path, meta)
    if fmt == "wandb" or (fmt == "auto" and path.suffix == ".wandb"):
        from tprimat.ingest.sources import wandb_steps

        return ingest_steps(wandb_steps(path), "wandb", path, meta)
    return ingest_text(path.read_text(errors="replace"), path.name, meta, fmt)


def ingest_steps(steps: list[dict], fmt: str, path: Path, meta: Meta) -> dict:
    error = None if steps else f"no training scalars found in {path.name}"
    parsed = Parsed(fmt, steps, error)
    return _result(parsed, path.name, meta, hashlib.sha256(Path(path).read_bytes()).hexdigest())


def find_runs(paths: list[str]) -> list[Path]:
    """One entry per run: each log file, each TensorBoard event file, each W&B offline run file."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and (
                p.suffix in (".log", ".txt", ".out", ".err", ".wandb") or p.name.startswith("events.out.tfevents")))
        elif path.exists():
            found.append(path)
    return found
