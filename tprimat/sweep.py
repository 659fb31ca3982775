"""Sweeps without running them: expand Hydra sweep syntax, then validate and plan every point.

Fast enough for thousands of points: the config is composed once per distinct choice of config groups
(model=..., platform=...); plain ``key=value`` overrides are applied to a copy of that composition, which the
typed schema still checks. ``tprimat plan`` and the sweep launchers use this.
"""

from __future__ import annotations

import copy
import csv
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

from tprimat import backends
from tprimat.config.spec import SpecError, build_spec_from_plain
from tprimat.detect import DetectedHardware, detect
from tprimat.plan import make_plan
from tprimat.validate import validate

GROUPS = {"platform", "model", "framework", "methodology", "parallelism", "training", "benchmark", "logging"}


@dataclass
class Point:
    overrides: list[str]
    valid: bool
    reason: str = ""
    world_size: Optional[int] = None
    dp: Optional[int] = None
    memory_estimate_gib: Optional[float] = None
    device_memory_gib: Optional[float] = None
    flops_per_token: Optional[float] = None
    tokens_per_step: Optional[int] = None
    spec_hash: Optional[str] = None

    def row(self) -> dict:
        return {"point": " ".join(self.overrides), "valid": self.valid, "reason": self.reason,
                "world_size": self.world_size, "dp": self.dp, "memory_estimate_gib": self.memory_estimate_gib,
                "device_memory_gib": self.device_memory_gib, "flops_per_token": self.flops_per_token,
                "tokens_per_step": self.tokens_per_step, "spec_hash": self.spec_hash}


def expand(overrides: list[str]) -> list[list[str]]:
    """Every point of a sweep (cartesian product), in Hydra's BasicSweeper order."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [point for batch in BasicSweeper.split_arguments(parsed, None) for point in batch]


INTERPOLATION = re.compile(r"^\$\{([\w.]+)\}$")


class Composer:
    """compose() once per group choice (cached, unresolved); value overrides set on a plain copy, then
    ``${a.b}`` interpolations resolved. Hydra-only syntax (+key, ~key) takes the full compose path."""

    def __init__(self, config_dir: str):
        self.config_dir = config_dir
        self.cache: dict[tuple, dict] = {}
        self.parser = OverridesParser.create()
        self.parsed: dict = {}  # override text -> parsed Override: the ANTLR parse is the slow part

    def _parse(self, overrides: list[str]) -> list:
        missing = [o for o in overrides if o not in self.parsed]
        if missing:
            self.parsed.update(zip(missing, self.parser.parse_overrides(missing)))
        return [self.parsed[o] for o in overrides]

    def compose(self, overrides: list[str]) -> dict:
        parsed = self._parse(overrides)
        if any(o.is_add() or o.is_delete() or o.is_force_add() for o in parsed):
            return OmegaConf.to_container(self._hydra_compose(overrides), resolve=True)
        groups = tuple(o.input_line for o in parsed if o.key_or_group in GROUPS or o.key_or_group.startswith("hydra"))
        if groups not in self.cache:
            self.cache[groups] = OmegaConf.to_container(self._hydra_compose(list(groups)), resolve=False)
        data = copy.deepcopy(self.cache[groups])
        for o in parsed:
            if o.input_line not in groups:
                set_dotted(data, o.key_or_group, o.value())
        return resolve(data, data)

    def _hydra_compose(self, overrides: list[str]) -> DictConfig:
        from hydra import compose, initialize_config_dir

        with initialize_config_dir(config_dir=self.config_dir, version_base="1.3"):
            cfg = compose("config", overrides=overrides)
        with open_dict(cfg):
            cfg.pop("hydra", None)
        return cfg


def set_dotted(data: dict, key: str, value) -> None:
    node = data
    *parents, leaf = key.split(".")
    for part in parents:
        if not isinstance(node.get(part), dict):
            raise KeyError(f"{key}: unknown key (not in the tprimat schema; check its spelling)")
        node = node[part]
    if leaf not in node:
        raise KeyError(f"{key}: unknown key (not in the tprimat schema; check its spelling)")
    node[leaf] = value


def resolve(node, root):
    if isinstance(node, dict):
        return {k: resolve(v, root) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve(v, root) for v in node]
    if isinstance(node, str) and (match := INTERPOLATION.match(node)):
        target = root
        for part in match.group(1).split("."):
            target = target[part]
        return resolve(target, root)
    return node


def spec_hash(spec_dict: dict) -> str:
    import hashlib
    import json

    blob = {k: v for k, v in spec_dict.items() if k not in ("logging", "run_name", "resume_from")}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def plan_point(composer: Composer, overrides: list[str], hw: DetectedHardware) -> Point:
    from tprimat.config.spec import spec_to_dict

    try:
        spec = build_spec_from_plain(composer.compose(overrides), hw)
    except SpecError as exc:
        return Point(overrides, False, exc.problems[0])
    except KeyError as exc:
        return Point(overrides, False, str(exc.args[0]))
    except Exception as exc:  # noqa: BLE001 - a composition error in one point is that point's reason
        return Point(overrides, False, f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    problems = validate(spec, hw, dry_run=True)
    digest = spec_hash(spec_to_dict(spec))
    if problems:
        return Point(overrides, False, problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
                     spec_hash=digest)
    plan = make_plan(spec, hw)
    backend_problem = None
    info = backends.REGISTRY.get(spec.framework.name)
    if info and info.built:
        try:
            backend_problem = next(iter(backends.load(spec.framework.name).check(spec, plan)), None)
        except backends.BackendUnavailable as exc:
            backend_problem = str(exc)
    return Point(overrides, backend_problem is None, backend_problem or "", plan.world_size, plan.dp,
                 plan.memory.total_gib, plan.device_memory_gib, plan.flops_per_token, plan.tokens_per_step, digest)


def plan_sweep(overrides: list[str], config_dir: str, hw: Optional[DetectedHardware] = None) -> list[Point]:
    hw = hw or detect()
    composer = Composer(config_dir)
    return [plan_point(composer, point, hw) for point in expand(overrides)]


def write_csv(points: list[Point], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(Point([], True).row()))
        writer.writeheader()
        for p in points:
            writer.writerow(p.row())
    return path


def print_points(points: list[Point], limit: int = 60) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"tprimat plan: {len(points)} points, {sum(p.valid for p in points)} valid")
    for header in ("point", "valid", "world", "dp", "memory GiB (est.)", "device GiB", "GFLOP/token", "reason"):
        table.add_column(header, overflow="fold")
    for p in points[:limit]:
        table.add_row(" ".join(p.overrides) or "(defaults)", "yes" if p.valid else "NO", str(p.world_size or ""),
                      str(p.dp or ""), f"{p.memory_estimate_gib:.1f}" if p.memory_estimate_gib is not None else "",
                      f"{p.device_memory_gib:.1f}" if p.device_memory_gib else "",
                      f"{p.flops_per_token / 1e9:.2f}" if p.flops_per_token else "", p.reason)
    console = Console(width=220)
    console.print(table)
    if len(points) > limit:
        console.print(f"... {len(points) - limit} more points (see the CSV)")
