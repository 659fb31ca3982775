"""torchtitan's metric line: ``step: N  loss: L  grad_norm: G  memory: XGiB(P%)  tps: T  tflops: F  mfu: M%``
(``wps`` in older releases). torchtitan prints no step time: it is derived later from tps and the tokens per
step when those are known."""

from __future__ import annotations

import re

from tprimat.logs.clean import Line, number
from tprimat.logs.stream import Step, StreamParser, new_step

TITAN = re.compile(r"step:\s*(\d+)\s+loss:\s*([-\d.eE+naif]+)(.*)")
GRAD = re.compile(r"grad_norm:\s*([-\d.eE+]+)")
MEMORY = re.compile(r"memory:\s*([\d.]+)GiB\(([\d.]+)%\)")
TPS = re.compile(r"(?:tps|wps):\s*([\d,.]+)")
TFLOPS = re.compile(r"tflops:\s*([\d.,]+)")
MFU = re.compile(r"mfu:\s*([\w.%/]+)")


def grab(pattern: re.Pattern, text: str):
    m = pattern.search(text)
    return number(m.group(1)) if m else None


class TorchtitanParser(StreamParser):
    format = "torchtitan"
    MEANT = re.compile(r"\bstep:\s*\S+\s+loss:")  # a step line, whatever its numbers

    def read(self, line: Line) -> list[Step]:
        text = line.text
        if "step:" not in text:
            return []
        if not (m := TITAN.search(text)):
            return self.unread_if_meant(text)
        rest = m.group(3)
        memory = MEMORY.search(rest)
        reported = {"tokens_per_s_per_gpu": grab(TPS, rest), "tflops_per_gpu": grab(TFLOPS, rest),
                    "mfu_pct": grab(MFU, rest), "memory_pct": float(memory.group(2)) if memory else None}
        step = new_step(int(m.group(1)), reported, loss=number(m.group(2)), grad_norm=grab(GRAD, rest),
                        memory_gib=float(memory.group(1)) if memory else None)
        return self.offer(step, line.rank)
