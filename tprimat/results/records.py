"""Step records: the one per-step event format shared by live runs and ingested logs."""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import itemgetter, methodcaller
from typing import Optional

from tprimat.logs.stepcolumns import StepColumns


@dataclass(slots=True)
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
        """The record as the result's step object (``reported`` is shared, not copied: a log of 300k steps
        holds one copy of what its framework printed)."""
        return {"step": self.step, "step_time_s": self.step_time_s, "tokens": self.tokens, "loss": self.loss,
                "lr": self.lr, "grad_norm": self.grad_norm, "memory_gib": self.memory_gib,
                "peak_memory_gib": self.peak_memory_gib, "repeat": self.repeat, "warmup": self.warmup,
                "reported": self.reported}


FIELD_NAMES = tuple(f.name for f in fields(StepRecord))  # as_dict's keys, in this order (a test holds them equal)
FIELD_VALUES = itemgetter(*FIELD_NAMES)
DEFAULTS = {"repeat": 0, "warmup": False}


def tokens_of(step: dict, gbs: Optional[int], seq: Optional[int], previous: Optional[dict]) -> Optional[int]:
    """Tokens of one parsed step: the printed (else stated) batch size x the printed (else stated) sequence
    length (Megatron-DeepSpeed's ``actual seqlen``: what the step's samples held, shorter than the configured
    length under curriculum learning), else an exact consumed-tokens delta; None when nothing states it."""
    reported = step.get("reported") or {}
    gbs = positive(reported.get("global_batch_size")) or gbs  # a printed 0 or -1 states nothing
    seq = positive(reported.get("actual_seqlen")) or seq
    if gbs and seq:
        return int(gbs * seq)
    now, before = reported.get("consumed_tokens"), ((previous or {}).get("reported") or {}).get("consumed_tokens")
    if now is not None and before is not None and step["step"] > previous["step"] and now > before:
        return int((now - before) / (step["step"] - previous["step"]))
    return None


def positive(value):
    return value if value is not None and value > 0 else None


def step_time_of(step: dict, tokens: Optional[int], world: Optional[int], warnings: list[str]) -> Optional[float]:
    """The printed step time; derived from printed tokens/s/device where no time is printed (torchtitan)."""
    reported = step["reported"]
    time_s = step.get("step_time_s")
    if time_s is not None and time_s <= 0:  # timer artefacts happen (NeMo around async checkpoints)
        reported["step_time_s_printed"] = time_s
        warnings.append(f"step {step['step']}: printed step time {time_s} s is not positive; ignored")
        return None
    tps = reported.get("tokens_per_s_per_gpu")
    if time_s is None and tps and tokens and world:
        reported["step_time_s_from"] = "tokens per step / (printed tokens/s/device x world size)"
        return tokens / (tps * world)
    return time_s


def complete_step(step: dict, gbs: Optional[int], seq: Optional[int], world: Optional[int],
                  previous: Optional[dict], warmup: bool, warnings: list[str]) -> dict:
    """A parsed log step (``tprimat.logs``) completed in place into the result's step object (tokens, step time,
    warm-up): the one conversion ingest and live backends share. In place, so that a log of 300k steps is held
    once, as the dicts its result will write."""
    if len(step) != len(FIELD_NAMES):  # a step from another source (TensorBoard scalars, W&B history)
        for name in FIELD_NAMES:
            step.setdefault(name, DEFAULTS.get(name))
    if step.get("reported") is None:
        step["reported"] = {}
    tokens = tokens_of(step, gbs, seq, previous)
    step["step_time_s"] = step_time_of(step, tokens, world, warnings)
    step["step"], step["tokens"], step["warmup"] = int(step["step"]), tokens, warmup
    return step


def record_from_step(step: dict, gbs: Optional[int], seq: Optional[int], world: Optional[int],
                     previous: Optional[dict], warmup: bool, warnings: list[str]) -> StepRecord:
    """``complete_step`` of a copy (the parsed step is left as the parser gave it), as a step record."""
    return as_record(complete_step(dict(step), gbs, seq, world, previous, warmup, warnings))


def complete_uniform(steps: list[dict], gbs: Optional[int], seq: Optional[int], warmup: int) -> bool:
    """``complete_step`` of every parsed step at once, where it does the same to each: the steps of one parser
    (every field, ``reported`` set), all with a positive printed step time and int step numbers, and the same
    tokens per step (one printed batch size and sequence length, or none printed and both stated). The first
    ``warmup`` steps are warm-up. False, and nothing changed, otherwise. Steps held as columns are completed as
    columns."""
    if isinstance(steps, StepColumns):
        return _complete_uniform_columns(steps, gbs, seq, warmup)
    if not steps or set(map(len, steps)) != {len(FIELD_NAMES)}:
        return False
    reported = list(map(itemgetter("reported"), steps))
    times = list(map(itemgetter("step_time_s"), steps))
    if None in reported or None in times or min(times) <= 0 or set(map(type, map(itemgetter("step"), steps))) != {int}:
        return False
    tokens = tokens_of(steps[0], gbs, seq, None)
    for name in ("global_batch_size", "actual_seqlen"):  # what ``tokens_of`` reads from each step
        printed = list(map(methodcaller("get", name), reported))
        if printed.count(printed[0]) != len(printed):
            return False
    if tokens is None or (tokens_of(steps[-1], gbs, seq, None) != tokens):
        return False
    for i, step in enumerate(steps):
        step["tokens"], step["warmup"] = tokens, i < warmup
    return True


def _complete_uniform_columns(steps: StepColumns, gbs: Optional[int], seq: Optional[int], warmup: int) -> bool:
    """``complete_uniform`` of steps held as columns (``StepColumns``: every step has its fields and ``reported``)."""
    times, numbers = steps.column("step_time_s"), steps.column("step")
    if not len(steps) or None in times or min(times) <= 0 or set(map(type, numbers)) != {int}:
        return False
    for name in ("global_batch_size", "actual_seqlen"):  # what ``tokens_of`` reads from each step
        printed = steps.printed(name)
        if printed.count(printed[0]) != len(printed):
            return False
    tokens = tokens_of(steps[0], gbs, seq, None)
    if tokens is None:
        return False
    count = len(steps)
    steps.own["tokens"] = [tokens] * count
    steps.own["warmup"] = [True] * min(warmup, count) + [False] * max(count - warmup, 0)
    return True


def as_record(step: dict) -> StepRecord:
    """A result's step object (or a completed parsed step) as a step record."""
    try:
        return StepRecord(*FIELD_VALUES(step))
    except KeyError:  # a step object without some field (null)
        return StepRecord(**{name: step.get(name) for name in FIELD_NAMES})
