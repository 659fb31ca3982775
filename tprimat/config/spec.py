"""The typed boundary: a composed DictConfig becomes one frozen run spec, here and nowhere else.

Nothing downstream of ``build_spec`` reads a DictConfig. ``platform.name=auto`` and a null
``platform.gpu`` are resolved against the detected hardware so the spec states what actually ran.
"""

from __future__ import annotations

import dataclasses
from dataclasses import fields, is_dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tprimat.config.schema import TprimatConf, freeze
from tprimat.detect import DetectedHardware


class SpecError(ValueError):
    """The config cannot become a run spec; ``problems`` holds one line per violation."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def build_spec(cfg: DictConfig, hw: DetectedHardware) -> TprimatConf:
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    unknown = unknown_keys(plain, TprimatConf)
    if unknown:
        raise SpecError([f"{k}: unknown key (not in the tprimat schema; check its spelling)" for k in unknown])
    spec = spec_from_dict(plain)
    resolve_platform(spec, hw)
    return freeze(spec)


def spec_from_dict(data: dict) -> TprimatConf:
    """Rebuild a (mutable) spec from its dict form, e.g. the ``spec`` section of a result file."""
    typed = OmegaConf.merge(OmegaConf.structured(TprimatConf), data)
    return OmegaConf.to_object(typed)


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
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
    return type(default) if is_dataclass(default) else None


def resolve_platform(spec: TprimatConf, hw: DetectedHardware) -> None:
    """Replace ``auto`` by the detected kind and fill ``gpu`` from the device name when it matches."""
    if spec.platform.name == "auto":
        spec.platform.name = hw.kind
    if spec.platform.gpu is None and spec.platform.name == hw.kind and hw.gpu_key:
        spec.platform.gpu = hw.gpu_key
    if spec.platform.gpu is not None:
        spec.platform.gpu = spec.platform.gpu.lower()
