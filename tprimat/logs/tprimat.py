"""tprimat's own console log, written by a native or in-process run and read back by ``tprimat ingest`` (a run
whose result.json was lost, or a Slurm job's stdout):

    spec (world size 8): {"platform": {...}, "model": {...}, "training": {...}, ...}
    repeat 0 step 12/200 | loss 10.2345 | lr 3.000e-04 | grad_norm 1.234 | step_time 0.754312 s | 21722 tokens/s
        | memory 12.300 GiB | peak_memory 55.271 GiB (warm-up)

(one line per step). The spec line states every key of the run's spec; step times are printed to the
microsecond so that the ingested summary equals the run's own; ``(warm-up)`` marks the steps the run kept out
of its statistics. ``n/a`` is a figure the run did not have.
"""

from __future__ import annotations

import json
import re
from typing import Optional

from tprimat.logs import facts as facts_mod
from tprimat.logs.clean import Line, number
from tprimat.logs.stream import Step, StreamParser, new_step

SPEC = re.compile(r"spec \(world size (\d+)\): (\{.*\})\s*$")
STEP = re.compile(r"repeat (\d+) step (\d+)/(\d+) \| loss (\S+) \| lr (\S+) \| grad_norm (\S+) \| step_time (\S+) s"
                  r"(?: \| (\S+) tokens/s)?(?: \| memory (\S+) GiB \| peak_memory (\S+) GiB)?( \(warm-up\))?")
WHERE = "log: tprimat spec line"


def state_spec(facts: facts_mod.Facts, spec: dict, world_size: int, where: str) -> None:
    """A tprimat run's spec (its log's spec line, its W&B run's config) as facts: every key but how tprimat
    reads a run (benchmark, logging), and the world size."""
    facts_mod.state(facts, "world_size", world_size, where)
    for key, value in leaves(spec):
        if not key.startswith(("benchmark.", "logging.")):
            facts_mod.state(facts, key, value, where)


def _shown(value: Optional[float], fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def step_line(record, max_steps: int) -> str:
    """The console line of one step record (``tprimat.results.records.StepRecord``)."""
    rate = record.tokens / record.step_time_s if record.tokens and record.step_time_s else None
    return (f"repeat {record.repeat} step {record.step}/{max_steps} | loss {_shown(record.loss, '.4f')} | "
            f"lr {_shown(record.lr, '.3e')} | grad_norm {_shown(record.grad_norm, '.3f')} | "
            f"step_time {_shown(record.step_time_s, '.6f')} s | {_shown(rate, '.0f')} tokens/s | "
            f"memory {_shown(record.memory_gib, '.3f')} GiB | peak_memory {_shown(record.peak_memory_gib, '.3f')} GiB"
            + (" (warm-up)" if record.warmup else ""))


def spec_line(spec: dict, world_size: int) -> str:
    return f"spec (world size {world_size}): {json.dumps(spec, separators=(',', ':'), default=str)}"


def leaves(node, prefix: str = ""):
    for key, value in node.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{key}.")
        elif not isinstance(value, list):
            yield f"{prefix}{key}", value


class TprimatParser(StreamParser):
    format = "tprimat"
    MEANT = re.compile(r"repeat \S+ step \S+ \|.*\| step_time ")  # tprimat's own step line

    def read(self, line: Line) -> list[Step]:
        text = line.text
        if "step_time" in text:
            if m := STEP.search(text):
                return self.step(m)
            return self.unread_if_meant(text)
        if text.startswith("spec (world size") or "] - spec (world size" in text:
            self.spec(text)
        return []

    def spec(self, text: str) -> None:
        m = SPEC.search(text)
        try:
            spec = json.loads(m.group(2)) if m else None
        except ValueError:
            return
        if not isinstance(spec, dict):
            return
        state_spec(self.facts, spec, int(m.group(1)), WHERE)

    def step(self, m: re.Match) -> list[Step]:
        repeat, key = int(m.group(1)), int(m.group(2))
        if (repeat, key) in self.seen:
            return []
        self.seen.add((repeat, key))
        step = new_step(key, {"total_iterations": int(m.group(3))}, loss=number(m.group(4)), lr=number(m.group(5)),
                        grad_norm=number(m.group(6)), step_time_s=number(m.group(7)),
                        memory_gib=number(m.group(9)) if m.group(9) else None,
                        peak_memory_gib=number(m.group(10)) if m.group(10) else None)
        step["repeat"], step["warmup"] = repeat, bool(m.group(11))
        return [step]
