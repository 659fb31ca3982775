"""Sweeps without running them: validate and plan every point through ``prepare``, as a run would.

The entry point expands Hydra's sweep syntax and hands a ``compose(overrides) -> dict`` function
(``tprimat.compose.Composer``: one Hydra composition per choice of config groups); nothing here reads a
DictConfig. ``tprimat plan`` and its CSV use this.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from tprimat.execute.prepare import prepare
from tprimat.measure.devices import detect
from tprimat.results.progress import progress
from tprimat.spec.build import SpecError, build_spec, spec_identity, spec_to_dict
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.plan import Plan


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
    states_estimate_gib: Optional[float] = None  # weights + grads + optimizer per device, analytical
    states_measured_gib: Optional[float] = None  # the same from the real sharded modules (--deep), heaviest stage
    activations_measured_gib: Optional[float] = None  # --deep: one micro batch, traced over fake tensors
    deep_roles: Optional[list] = None  # --deep: one measurement per pipeline stage

    def row(self) -> dict:
        return {"point": " ".join(self.overrides), "valid": self.valid, "reason": self.reason,
                "world_size": self.world_size, "dp": self.dp, "memory_estimate_gib": self.memory_estimate_gib,
                "device_memory_gib": self.device_memory_gib, "flops_per_token": self.flops_per_token,
                "tokens_per_step": self.tokens_per_step, "spec_hash": self.spec_hash,
                "states_estimate_gib": self.states_estimate_gib, "states_measured_gib": self.states_measured_gib,
                "activations_measured_gib": self.activations_measured_gib}


def plan_point(compose: Callable[[list[str]], dict], overrides: list[str], hw: DetectedHardware,
               deep: bool = False, suggest: bool = False) -> Point:
    """Compose, build, validate (no check against this host's devices) and plan one point; never raises."""
    try:
        spec = build_spec(compose(overrides), hw)
    except SpecError as exc:
        return Point(overrides, False, exc.problems[0])
    except KeyError as exc:
        return Point(overrides, False, str(exc.args[0]))
    except Exception as exc:  # noqa: BLE001 - a composition error in one point is that point's reason
        return Point(overrides, False, f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    prepared = prepare(spec, hw, dry_run=True, suggest=suggest)
    digest = spec_identity(spec_to_dict(spec))
    problems = prepared.all_problems
    if problems:
        reason = problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 and prepared.problems else "")
        point = Point(overrides, False, reason, spec_hash=digest, **_sizes(prepared.plan))
    else:
        point = Point(overrides, True, "", spec_hash=digest, **_sizes(prepared.plan))
    if deep and prepared.plan is not None and not prepared.problems:
        point = deepen(point, spec, prepared.plan)
    return point


def _sizes(plan: Optional[Plan]) -> dict:
    if plan is None:
        return {}
    m = plan.memory
    return {"world_size": plan.world_size, "dp": plan.dp, "memory_estimate_gib": m.total_gib,
            "device_memory_gib": plan.device_memory_gib, "flops_per_token": plan.flops_per_token,
            "tokens_per_step": plan.tokens_per_step, "states_estimate_gib": m.weights_gib + m.grads_gib + m.optimizer_gib}


def deepen(point: Point, spec, plan: Plan) -> Point:
    """``--deep``: build one rank of every pipeline stage of the real native layout in a fake world; a layout
    that cannot build makes the point invalid with the framework's reason."""
    from tprimat.backends.native.deep import deep_check, measured_memory

    if spec.framework.name != "native":
        return point
    roles, error = deep_check(spec_to_dict(spec), plan.pp, plan.dp, plan.tp)
    point.deep_roles = roles
    if error:
        point.valid, point.reason = False, error
        return point
    measured = measured_memory(roles, plan.memory.overhead_gib)["memory_measured"]
    point.states_measured_gib, point.activations_measured_gib = measured["states_gib"], measured["activations_gib"]
    return point


def plan_sweep(points: list[list[str]], compose: Callable[[list[str]], dict],
               hw: Optional[DetectedHardware] = None, deep: bool = False) -> list[Point]:
    """Validate and plan every point (each a list of overrides) without running anything; ``deep``: build
    each native layout for real in a fake world too."""
    hw = hw or detect()  # one point: a memory refusal names what fits (a search of seconds, not for every point)
    planned = []
    with progress(len(points), "planning") as advance:
        for point in points:
            planned.append(plan_point(compose, point, hw, deep, suggest=len(points) == 1))
            advance(" ".join(point)[:60])
    return planned


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
    for header in ("point", "valid", "world", "dp", "memory GiB (est.)", "states GiB est. / traced", "device GiB",
                   "GFLOP/token", "reason"):
        table.add_column(header, overflow="fold")
    for p in points[:limit]:
        states = "" if p.states_estimate_gib is None else f"{p.states_estimate_gib:.2f}" + (
            f" / {p.states_measured_gib:.2f}" if p.states_measured_gib is not None else "")
        table.add_row(" ".join(p.overrides) or "(defaults)", "yes" if p.valid else "NO", str(p.world_size or ""),
                      str(p.dp or ""), f"{p.memory_estimate_gib:.1f}" if p.memory_estimate_gib is not None else "",
                      states, f"{p.device_memory_gib:.1f}" if p.device_memory_gib else "",
                      f"{p.flops_per_token / 1e9:.2f}" if p.flops_per_token else "", p.reason)
    console = Console(width=220)
    console.print(table)
    unchecked = [p for p in points if p.valid and p.device_memory_gib is None]
    if unchecked:
        console.print(f"memory was not checked for {len(unchecked)} points: platform.gpu is null and no such GPU is "
                      "visible here; name the device (platform.gpu=h100, mi300x, ...)")
    if len(points) > limit:
        console.print(f"... {len(points) - limit} more points (see the CSV)")
