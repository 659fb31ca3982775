"""Record the steps of a user's own training loop as a tprimat result.

The same step records as tprimat's own runs (device-synchronised step time, allocator or resident memory, tokens,
loss), the same summary code and the same versioned ``result.json`` (and W&B run). The spec holds only what
the user states (``overrides``, tprimat's config keys and groups: ``model=llama``, ``training.seq_length=4096``),
as an ingested log's does: nothing is filled in from defaults, and every figure is computed only from stated
facts. The world size is read from torch.distributed when the loop runs under it.

    from tprimat.callbacks import Recorder

    with Recorder("outputs/mine", ["model=llama_tiny", "training.seq_length=256"]) as rec:
        for batch in loader:
            with rec.step(tokens=batch.numel()) as step:
                loss = model(batch).loss
                loss.backward()
                optimizer.step()
                step.loss = loss.item()
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, Optional

import torch

from tprimat.compose import compose
from tprimat.ingest.derive import plan_of, resolve, world_size
from tprimat.ingest.stated import Stated
from tprimat.measure import environment
from tprimat.measure.devices import detect
from tprimat.measure.step import MemoryProbe, StepClock
from tprimat.results.metrics import summarize
from tprimat.results.records import StepRecord
from tprimat.results.result import make_result, new_run_id, write_result
from tprimat.spec.schema import WandbConf


class Step:
    """What the loop says about the step in progress (set its fields inside ``Recorder.step``)."""

    def __init__(self, tokens: Optional[int]) -> None:
        self.tokens, self.loss, self.lr, self.grad_norm = tokens, None, None, None


class Recorder:
    """A context manager around a user's training loop; ``finish`` (or leaving the ``with``) writes the result:
    ``ok``, or ``failed`` with the exception when the loop raised (the steps measured so far are kept)."""

    def __init__(self, out_dir, overrides: Optional[list[str]] = None, framework: str = "pytorch",
                 framework_version: Optional[str] = None, warmup_steps: int = 1, wandb: str = "disabled",
                 device: Optional[torch.device] = None) -> None:
        self.out_dir, self.overrides = Path(out_dir), list(overrides or [])
        self.framework = {"name": framework, "version": framework_version or f"torch {torch.__version__}"}
        self.warmup_steps = warmup_steps
        self.device = device or (torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available()
                                 else torch.device("cpu"))
        self.clock, self.probe = StepClock(self.device), MemoryProbe(self.device)
        self.records: list[StepRecord] = []
        self.run_id = new_run_id()
        self.stated = self._stated()
        self.sink = self._wandb(wandb)
        self.result: Optional[dict] = None

    def _stated(self) -> Stated:
        st = Stated(compose(self.overrides), compose)
        st.set("framework.name", self.framework["name"], "tprimat.callbacks")
        world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        st.set("world_size", world, "torch.distributed world size" if world > 1 else "one process, no torch.distributed")
        st.overrides(self.overrides)
        resolve(st)
        return st

    def _wandb(self, mode: str):
        if mode == "disabled" or not self._rank_zero():
            return None
        from tprimat.results.wandb_sink import WandbSink

        self.out_dir.mkdir(parents=True, exist_ok=True)
        return WandbSink(WandbConf(mode=mode), self.out_dir, self.run_id, self.run_id, self.stated.spec, 0)

    @staticmethod
    def _rank_zero() -> bool:
        return not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0

    @contextlib.contextmanager
    def step(self, tokens: Optional[int] = None) -> Iterator[Step]:
        """One optimizer step: timed from entry to exit, after the device finished the work queued in between.
        ``tokens``: the tokens this step processed over all data-parallel ranks."""
        current = Step(tokens)
        self.clock.start()
        yield current
        seconds = self.clock.stop()
        self.record(current, seconds)

    def record(self, step: Step, seconds: float) -> StepRecord:
        number = len(self.records) + 1
        record = StepRecord(step=number, step_time_s=seconds, tokens=step.tokens, loss=step.loss, lr=step.lr,
                            grad_norm=step.grad_norm, memory_gib=self.probe.current_gib(),
                            peak_memory_gib=self.probe.peak_gib(), warmup=number <= self.warmup_steps)
        self.records.append(record)
        if self.sink is not None:
            self.sink.on_step(record)
        return record

    def finish(self, error: Optional[str] = None) -> dict:
        """The result (written by rank 0 to ``out_dir/result.json``)."""
        st = self.stated
        plan = plan_of(st, self.framework["name"], "a user's own training loop, recorded by tprimat.callbacks")
        world = world_size(st)
        summary = summarize(self.records, world, plan["flops_per_token"], plan["peak_tflops"])
        status = "failed" if error else "ok"
        if status == "ok" and not self.records:
            status, error = "failed", "no step was recorded"
        wandb = self.sink.finish(status, summary) if self.sink is not None else None
        self.result = make_result(
            run_id=self.run_id, status=status, error=error, spec=st.spec, plan=plan,
            environment=environment.collect(detect()), steps=[r.as_dict() for r in self.records], summary=summary,
            warnings=st.warnings, framework=self.framework, overrides=self.overrides, wandb=wandb,
            source={"kind": "callback", "format": f"tprimat.callbacks ({self.framework['name']})",
                    "stated": dict(sorted(st.where.items()))})
        if self._rank_zero():
            write_result(self.result, self.out_dir)
        return self.result

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        self.finish(f"{kind.__name__}: {exc}" if kind is not None else None)
        return False
