"""The one preparation step behind every path that runs or plans a spec: a single run, a spawned or
torchrun/Slurm rank, sweep planning, ``tprimat plan`` and the sweep launchers all call ``prepare``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from tprimat import backends
from tprimat.backends.base import Backend
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.plan import Plan, make_plan
from tprimat.spec.schema import TprimatConf
from tprimat.spec.validate import check_memory, validate


def with_what_fits(spec: TprimatConf, hw: DetectedHardware, problems: list[str]) -> list[str]:
    """A memory refusal, when it is the only rule broken, ends with the nearest layouts that fit (``fit``)."""
    memory = check_memory(spec, hw)
    if len(problems) != 1 or problems != memory or "exceeds" not in memory[0]:
        return problems
    from tprimat.execute.fit import what_fits

    try:
        return [memory[0] + what_fits(spec, hw)]
    except backends.BackendUnavailable:
        return problems


@dataclass(frozen=True)
class Prepared:
    spec: TprimatConf
    plan: Optional[Plan]  # None when the spec broke a rule or its backend cannot be loaded
    backend: Optional[Backend]
    problems: list[str]  # rules broken, or the backend is not installed: nothing can be planned or run
    backend_problems: list[str]  # what the backend cannot run of a valid spec (a dry run records them)

    @property
    def all_problems(self) -> list[str]:
        return self.problems + self.backend_problems


def prepare(spec: TprimatConf, hw: DetectedHardware, dry_run: bool, suggest: bool = False) -> Prepared:
    """Validate (``dry_run``: no check against this host's devices), load the backend, plan, ask the backend.
    ``suggest``: a memory refusal names the nearest layouts that fit (a search of seconds: single runs and
    single-point plans ask for it, sweeps do not)."""
    problems = validate(spec, hw, dry_run=dry_run)
    if problems:
        return Prepared(spec, None, None, with_what_fits(spec, hw, problems) if suggest else problems, [])
    try:
        backend = backends.load(spec.framework.name)
    except backends.BackendUnavailable as exc:  # e.g. an optional framework that is not installed
        return Prepared(spec, None, None, [str(exc)], [])
    plan = make_plan(spec, hw)
    plan = replace(plan, backend=backend.name, backend_description=backend.describe(spec, plan))
    return Prepared(spec, plan, backend, [], backend.check(spec, plan))
