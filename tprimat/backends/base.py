"""The one interface every backend implements."""

from __future__ import annotations

from typing import Callable, Protocol

from tprimat.config.schema import TprimatConf
from tprimat.plan import Plan
from tprimat.records import StepRecord

StepSink = Callable[[StepRecord], None]


class Backend(Protocol):
    name: str

    def version(self) -> str:
        """The framework's version, recorded in the result."""

    def describe(self, spec: TprimatConf, plan: Plan) -> str:
        """One line: what this backend would run for the spec (shown in dry runs and results)."""

    def check(self, spec: TprimatConf, plan: Plan) -> list[str]:
        """What this backend cannot run of a valid spec, one line per problem naming the key."""

    def run(self, spec: TprimatConf, plan: Plan, on_step: StepSink, run_dir=None) -> dict:
        """Train for ``spec.training.max_steps`` (per repeat), calling ``on_step`` after every step.

        Returns the settings the framework actually used, read back from its live objects (optimizer
        class, betas, eps, weight decay, clipping, micro batch, accumulation, schedule, precision)."""
