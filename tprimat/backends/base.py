"""The one contract every backend implements, and the typed outcome of a run.

The runner (``tprimat.execute``) calls only what is declared here: no probing of optional methods.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from tprimat.results.records import StepRecord
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf

StepSink = Callable[[StepRecord], None]


@dataclass
class RunOutcome:
    """What a backend hands back after training (its step records went to ``on_step`` as they were measured)."""

    effective: dict  # what actually ran, read back: live optimizer/model/autocast state, or the external command
    audit: Optional[dict] = None  # requested vs effective settings read from the framework's own output
    audit_failures: list[str] = field(default_factory=list)  # one line per audited key that did not match
    sections: dict = field(default_factory=dict)  # further result sections, e.g. {"ranks": ...}


class Backend(ABC):
    """A framework adapter: small, stateless, heavy imports inside its methods or its own modules."""

    name: str = ""
    launches_own_ranks: bool = False  # True: the framework starts its ranks (torchrun inside), tprimat does not

    @abstractmethod
    def version(self) -> str:
        """The framework's version, recorded in the result."""

    @abstractmethod
    def describe(self, spec: TprimatConf, plan: Plan) -> str:
        """One line: what this backend would run for the spec (shown in dry runs and results)."""

    @abstractmethod
    def check(self, spec: TprimatConf, plan: Plan) -> list[str]:
        """What this backend cannot run of a valid spec, one line per problem naming the key: rules of the spec
        alone, so a plan, a dry run and a launch refuse alike wherever they run."""

    def check_install(self, spec: TprimatConf, plan: Plan) -> list[str]:
        """What this machine lacks to launch the spec (a framework checkout, a profiler on PATH, an optional
        package): checked at launch only, never in a plan or a dry run, which are for the target machine."""
        return []

    def generated_config(self, spec: TprimatConf, plan: Plan) -> Optional[dict]:
        """The framework config or command tprimat generates for the spec (``plan.backend_config``), or None."""
        return None

    def materialize(self, spec: TprimatConf, plan: Plan, run_dir: Path) -> Optional[dict]:
        """Dry run: write the generated command and files into ``run_dir`` and describe them, or None."""
        return None

    @abstractmethod
    def run(self, spec: TprimatConf, plan: Plan, on_step: StepSink, run_dir: Path) -> RunOutcome:
        """Train ``spec.training.max_steps`` steps per repeat, calling ``on_step`` after every step."""
