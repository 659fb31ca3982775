"""Step records: the one per-step event format shared by live runs and ingested logs."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional


@dataclass(frozen=True)
class StepRecord:
    step: int  # optimizer step within its repeat: 1-based in live runs, the framework's own numbering when ingested
    step_time_s: Optional[float]  # wall time of the whole optimizer step, device-synchronised (None: not printed)
    tokens: Optional[int]  # tokens processed by the step over all data-parallel ranks (None: unknown)
    loss: Optional[float]
    lr: Optional[float]
    grad_norm: Optional[float]  # global norm before clipping
    memory_gib: Optional[float] = None  # GPU: allocated at step end; CPU: process resident set
    peak_memory_gib: Optional[float] = None  # GPU: max allocated so far; CPU: peak resident set so far
    repeat: int = 0
    warmup: bool = False  # measured and kept, never averaged
    reported: Optional[dict] = None  # ingested logs: what the framework itself printed for this step

    def as_dict(self) -> dict:
        return asdict(self)
