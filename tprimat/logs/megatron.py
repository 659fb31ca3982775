"""Megatron-LM, Megatron-Bridge, Megatron-DeepSpeed and AMD Primus iteration lines:
``iteration N/M | key: value | ...`` (fields in any order, ``current/average`` pairs in Primus) and the
separate ``(after N iterations) memory (MB)`` report."""

from __future__ import annotations

import math
import re
from typing import Optional

from tprimat.logs.clean import Line, count, number
from tprimat.logs.stream import Step, StreamParser, new_step

ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)")
MEMORY = re.compile(r"\(after (\d+) iterations\) memory \(MB\) \| allocated: ([\d.]+) \| max allocated: ([\d.]+)")
FIELDS = {
    "elapsed time per iteration (ms)": "step_time_ms", "learning rate": "lr", "lm loss": "loss",
    "grad norm": "grad_norm", "global batch size": "global_batch_size", "consumed samples": "consumed_samples",
    "loss scale": "loss_scale", "number of skipped iterations": "skipped_iterations",
    "number of nan iterations": "nan_iterations", "throughput per GPU (TFLOP/s/GPU)": "tflops_per_gpu",
    "compute per GPU (TFLOP/s/GPU)": "tflops_per_gpu", "tokens per GPU (tokens/s/GPU)": "tokens_per_s_per_gpu",
    "tokens/sec/gpu": "tokens_per_s_per_gpu", "tokens/s/GPU inst/harmonic mean": "tokens_per_s_per_gpu",
    "energy per GPU (J/iter/GPU)": "energy_j_per_iter_per_gpu", "power per GPU (W/GPU)": "power_w_per_gpu",
    # Megatron-DeepSpeed
    "samples per second": "samples_per_s", "TFLOPs": "tflops_per_gpu", "actual seqlen": "actual_seqlen",
}
OWN = frozenset(("step_time_ms", "loss", "lr", "grad_norm"))
STEP_TIME = re.compile(r"elapsed time per iteration \(ms\)\s*:\s*([^|]*)")
SHORT_LINE = 100  # facts.read_line reads "key: value" config lines shorter than this
VALUES_KEPT = 4096  # printed values remembered per parser (their parse, and one shared number object)
TOKENS = "consumed tokens"  # Megatron-DeepSpeed: an exact count; swiss-ai Megatron: "0.004B" (rounded)


def current_and_average(text: str) -> tuple[Optional[float], Optional[float]]:
    """'32025.5/32117.1' or '238.4 (avg 231.0)' -> (current, running average); '9.1' -> (9.1, None)."""
    try:  # the common case: one plain number
        value = float(text)
        return (value if math.isfinite(value) else None), None
    except ValueError:
        pass
    if "(avg" in text:
        current, _, average = text.partition("(avg")
        return number(current), number(average.rstrip(") "))
    current, slash, average = text.partition("/")
    if slash and "/" not in average:
        return number(current), number(average)
    return number(text), None


class MegatronParser(StreamParser):
    format = "megatron"
    FAST = re.compile(r"\biteration[ \t]+(\d+)[ \t]*/[ \t]*(\d+)[ \t]*\|([^\n]*)\n")

    def __init__(self) -> None:
        super().__init__()
        self.memory: dict[int, tuple[float, float]] = {}  # reports that came before their step
        # printed value text -> (current, average): batch size, loss scale, skipped counts and learning-rate
        # plateaus repeat on every line, so each distinct text is parsed once and its number object shared
        self.values: dict[str, tuple] = {}

    def read(self, line: Line) -> list[Step]:
        text = line.text
        if "iteration" in text and (m := ITERATION.search(text)):
            return self.step_line(int(m.group(1)), m.group(2), m.group(3), line.rank)
        if "memory (MB)" in text and (m := MEMORY.search(text)):
            self.attach_memory(int(m.group(1)), float(m.group(2)) / 1024, float(m.group(3)) / 1024)
        return []

    def fast(self, match: re.Match, prefix: str, length: int) -> list[Step]:
        if length < SHORT_LINE:  # a short line might be a config dump: the full path reads it
            return self.feed(prefix + match.group(0))
        return self.step_line(int(match.group(1)), match.group(2), match.group(3), self.prefix_rank(prefix))

    def step_line(self, key: int, total: str, body: str, rank: Optional[int]) -> list[Step]:
        if self.echo(key, rank):  # another rank's copy: only its step time is new
            ms = (t := STEP_TIME.search(body)) and current_and_average(t.group(1))[0]
            self.rank_time(key, rank, ms / 1000 if ms is not None else None)
            return []
        return self.offer(self.iteration(key, int(total), body), rank)

    def iteration(self, key: int, total: int, body: str) -> Step:
        reported: dict = {"total_iterations": total}
        own: dict = {}  # the step record's own fields, kept out of ``reported`` (which is held once per step)
        for part in body.split("|"):
            key_text, colon, value = part.partition(":")
            name = FIELDS.get(key_text.strip()) if colon else None
            if name is not None:
                pair = self.values.get(value)
                if pair is None:
                    pair = current_and_average(value)
                    if len(self.values) < VALUES_KEPT:
                        self.values[value] = pair
                current, average = pair
                (own if name in OWN else reported)[name] = current
                if average is not None:
                    reported[f"{name}_running_avg"] = average
            elif colon and key_text.strip() == TOKENS:
                tokens, exact = count(value)
                reported["consumed_tokens" if exact else "consumed_tokens_rounded"] = tokens
        ms = own.get("step_time_ms")
        if "step_time_ms_running_avg" in reported:
            reported["step_time_s_running_avg"] = reported.pop("step_time_ms_running_avg") / 1000
        step = new_step(key, reported, loss=own.get("loss"), lr=own.get("lr"), grad_norm=own.get("grad_norm"),
                        step_time_s=ms / 1000 if ms is not None else None)
        if key in self.memory:
            step["memory_gib"], step["peak_memory_gib"] = self.memory.pop(key)
        return step

    def attach_memory(self, step: int, allocated: float, peak: float) -> None:
        held = self.pending
        if held is not None and held["step"] == step:
            if held.get("memory_gib") is None:
                held["memory_gib"], held["peak_memory_gib"] = allocated, peak
        elif step not in self.seen:
            self.memory.setdefault(step, (allocated, peak))


class PrimusParser(MegatronParser):
    format = "primus"
