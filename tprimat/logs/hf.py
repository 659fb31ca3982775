"""Hugging Face Trainer: per-log dicts (``{'loss': ..., 'grad_norm': ..., 'learning_rate': ...}``) with no step
key, tqdm bars, and the final ``{'train_runtime': ...}`` summary. The bar printed after a dict is its step only
when the bars advance by exactly one per dict (logging every step); that is known only at the end, so steps
are released by ``finish()``. HF logs are ingested, never streamed live (the transformers backend runs in
process)."""

from __future__ import annotations

import re

from tprimat.logs.clean import Line, number
from tprimat.logs.stream import Step, StreamParser, new_step

HF_DICT = re.compile(r"\{'(loss|train_runtime)'.*")
HF_PAIR = re.compile(r"'(\w+)':\s*'?([-\d.eE+]+)'?")
HF_BAR = re.compile(r"^\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")


def values(text: str) -> dict:
    return {k: v for k, v in ((k, number(v)) for k, v in HF_PAIR.findall(text)) if v is not None}


class HfParser(StreamParser):
    format = "hf"
    MEANT = re.compile(r"\{'loss': ")  # the Trainer's logged dict

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[Step] = []
        self.waiting = False

    def read(self, line: Line) -> list[Step]:
        text = line.text
        if "{'" in text and (m := HF_DICT.search(text)):
            found = values(m.group(0))
            if m.group(1) == "train_runtime":
                self.extra.setdefault("final_summary", found)
            elif "loss" in found:
                self.dict_line(found)
        elif self.waiting and "%|" in text and (m := HF_BAR.search(text)):
            self.steps[-1]["reported"]["progress_bar_step"] = int(m.group(1))
            self.waiting = False
        return []

    def dict_line(self, found: dict) -> None:
        index = len(self.steps) + 1
        reported = {"epoch": found.get("epoch"), "tokens_per_s": found.get("train_tokens_per_second"),
                    "num_input_tokens_seen": found.get("num_input_tokens_seen"),
                    "train_runtime_so_far_s": found.get("train_runtime"), "log_index": index}
        self.steps.append(new_step(index, reported, loss=found.get("loss"), lr=found.get("learning_rate"),
                                   grad_norm=found.get("grad_norm")))
        self.waiting = True

    def finish(self) -> list[Step]:
        bars = [s["reported"].get("progress_bar_step") for s in self.steps]
        if bars and None not in bars and all(b - a == 1 for a, b in zip(bars, bars[1:])):
            for step, bar in zip(self.steps, bars):
                step["step"] = bar
        steps, self.steps = self.steps, []
        return steps
