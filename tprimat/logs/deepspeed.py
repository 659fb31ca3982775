"""DeepSpeed engine lines: ``[Rank 0] step=N, skipped=K, lr=[...]``, the timer line with samples/s and memory,
and the training script's own ``[Rank 0] Loss: L`` (DeepSpeed prints no loss)."""

from __future__ import annotations

import re

from tprimat.logs.clean import Line, number
from tprimat.logs.stream import Step, StreamParser, new_step

DS_STEP = re.compile(r"\[Rank 0\] step=(\d+), skipped=(\d+), lr=\[([^\]]*)\]")
DS_TIMER = re.compile(r"global_step=(\d+), RunningAvgSamplesPerSec=([\d.]+), CurrSamplesPerSec=([\d.]+), "
                      r"MemAllocated=([\d.]+)GB, MaxMemAllocated=([\d.]+)GB")
DS_LOSS = re.compile(r"\[Rank 0\] Loss: ([-\d.eE+]+)")


class DeepspeedParser(StreamParser):
    format = "deepspeed"
    MEANT = re.compile(r"\[Rank 0\] step=\S+, skipped=")  # the engine's step line

    def read(self, line: Line) -> list[Step]:
        text = line.text
        if "step=" in text and (m := DS_STEP.search(text)):
            step = new_step(int(m.group(1)), {"skipped_cumulative": int(m.group(2))},
                            lr=number(m.group(3).split(",")[0]))
            return self.offer(step, None)
        if "step=" in text and self.meant(text):
            self.unread(text)
            return []
        held = self.pending
        if held is None:
            return []
        if "CurrSamplesPerSec" in text and (m := DS_TIMER.search(text)) and int(m.group(1)) == held["step"]:
            held.update(memory_gib=float(m.group(4)), peak_memory_gib=float(m.group(5)))
            held["reported"].update(samples_per_s=float(m.group(3)), samples_per_s_running_avg=float(m.group(2)))
        elif "Loss:" in text and (m := DS_LOSS.search(text)) and held["loss"] is None:
            held["loss"] = number(m.group(1))
        return []
