"""The typed boundary: a plain config dict becomes one frozen run spec, here and nowhere else; and the spec's
identity (``spec_identity``), the one key of resume, ``spec_hash`` and compare's grouping.

The entry points turn Hydra's DictConfig into a plain dict; nothing downstream reads a DictConfig.
``platform.name=auto`` and a null ``platform.gpu`` are resolved against the detected hardware so the spec
states what actually ran.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import typing
from dataclasses import fields, is_dataclass
from typing import Any, Optional

from tprimat.spec.detect import DetectedHardware, cpu_precision
from tprimat.spec.schema import TprimatConf, freeze


class SpecError(ValueError):
    """The config cannot become a run spec; ``problems`` holds one line per violation."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def build_spec(plain: dict, hw: Optional[DetectedHardware] = None) -> TprimatConf:
    """The one way to make a run spec: a plain dict (a composed config, a rank's launch file, a result's
    ``spec`` section) -> frozen spec. Unknown keys and wrong types raise SpecError, one line each. With
    ``hw``, ``platform.name=auto`` and a null ``platform.gpu`` are resolved against the detected hardware."""
    unknown = unknown_keys(plain, TprimatConf)
    if unknown:
        raise SpecError([f"{k}: unknown key (not in the tprimat schema; check its spelling)" for k in unknown])
    problems: list[str] = []
    spec = construct(TprimatConf, plain, problems)
    if problems:
        raise SpecError(problems)
    if hw is not None:
        resolve_platform(spec, hw)
    return freeze(spec)


INT64 = 2**63  # the typed boundary's integers are what torch, numpy and JSON readers hold


def construct(cls: type, data: dict, problems: list[str], prefix: str = ""):
    """Schema dataclasses from a plain dict (fast: no OmegaConf re-merge); wrong types go to ``problems``."""
    hints = type_hints(cls)
    kwargs = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value, kind, key = data[f.name], hints[f.name], f"{prefix}{f.name}"
        if is_dataclass(kind) and isinstance(value, dict):
            kwargs[f.name] = construct(kind, value, problems, key + ".")
            continue
        if not _type_ok(kind, value):
            problems.append(f"{key}={value!r}: must be of type {getattr(kind, '__name__', kind)}")
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{key}={value}: must be a finite number")
        elif isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
            problems.append(f"{key}={value}: beyond the 64-bit integer range (|value| < 2**63)")
        kwargs[f.name] = float(value) if kind is float and isinstance(value, int) and not isinstance(value, bool) \
            else value
    return cls(**kwargs)


@functools.cache
def type_hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _type_ok(kind, value) -> bool:
    if typing.get_origin(kind) is typing.Union:
        return any(_type_ok(k, value) for k in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if typing.get_origin(kind) in (list, tuple):
        return isinstance(value, (list, tuple))
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in (str, bool):
        return isinstance(value, kind)
    return True


def spec_to_dict(spec: Any) -> dict:
    return {f.name: _plain(getattr(spec, f.name)) for f in fields(spec)}


def _plain(value: Any) -> Any:
    if is_dataclass(value):
        return spec_to_dict(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def unknown_keys(data: Any, schema: type, prefix: str = "") -> list[str]:
    if not isinstance(data, dict):
        return []
    known = {f.name: f for f in fields(schema)}
    found = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in known:
            found.append(path)
            continue
        sub = _dataclass_type(known[key])
        if sub is not None:
            found += unknown_keys(value, sub, path + ".")
    return found


def _dataclass_type(f: dataclasses.Field) -> type | None:
    return _nested_types(f.default_factory) if f.default_factory is not dataclasses.MISSING else None


@functools.cache
def _nested_types(factory) -> type | None:
    default = factory()
    return type(default) if is_dataclass(default) else None


def resolve_platform(spec: TprimatConf, hw: DetectedHardware) -> None:
    """Replace ``auto`` by the detected kind and fill ``gpu`` from the device name when it matches; a precision
    of ``auto`` (the CPU and auto platforms' tuned choice) becomes the device's best: bf16 on GPUs, on a CPU
    bf16 only where it multiplies bf16 natively (``detect.precision_for``)."""
    if spec.platform.name == "auto":
        spec.platform.name = hw.kind
    if spec.platform.gpu is None and spec.platform.name == hw.kind and hw.gpu_key:
        spec.platform.gpu = hw.gpu_key
    if spec.platform.gpu is not None:
        spec.platform.gpu = spec.platform.gpu.lower()
    if spec.training.precision == "auto":
        spec.training.precision = cpu_precision() if spec.platform.name == "cpu" else "bf16"


# Bookkeeping that never changes what is trained: the run's label, where it
# logs, whether it only planned, where a sweep looks for finished points. ``benchmark`` (warm-up, repeats,
# telemetry) is excluded too: results that differ only in how many steps were measured are repeats of one spec.
IDENTITY_EXCLUDES = ("run_name", "dry_run", "resume_from", "logging", "benchmark", "overwrite")
# Keys added after results existed: at these defaults a spec is the one it was before they existed, and keeps its
# identity (resume and compare's repeats match old results)
LATER_DEFAULTS = {("parallelism", "vp"): 1, ("training", "grad_reduce_in_fp32"): True, ("training", "peft"): "none",
                  ("training", "recompute_num_layers"): None,
                  ("parallelism", "account_for_embedding_in_pipeline_split"): False,
                  ("parallelism", "account_for_loss_in_pipeline_split"): False,
                  ("framework", "pretrained_checkpoint"): None,
                  ("training", "lora"): {"rank": 16, "alpha": 32.0, "dropout": 0.1,
                                         "targets": ["linear_qkv", "linear_proj"]}}


def spec_identity(spec: dict) -> str:
    """Content hash of what was run (the spec minus ``IDENTITY_EXCLUDES``, and minus keys added later while they
    hold their defaults): equal for repeats of one benchmark."""
    blob = {k: v for k, v in spec.items() if k not in IDENTITY_EXCLUDES}
    for (section, key), default in LATER_DEFAULTS.items():
        if isinstance(blob.get(section), dict) and blob[section].get(key, default) == default and key in blob[section]:
            blob[section] = {k: v for k, v in blob[section].items() if k != key}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def set_dotted(data: dict, key: str, value) -> None:
    """``a.b.c=value`` on a plain dict; a key the composed config does not have is refused (KeyError)."""
    node = data
    *parents, leaf = key.split(".")
    for part in parents:
        if not isinstance(node.get(part), dict):
            raise KeyError(f"{key}: unknown key (not in the tprimat schema; check its spelling)")
        node = node[part]
    if leaf not in node:
        raise KeyError(f"{key}: unknown key (not in the tprimat schema; check its spelling)")
    node[leaf] = value
