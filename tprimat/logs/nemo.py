"""NeMo 2 (Lightning printer: ``Training epoch E, iteration N/M | key: value | ...``, keyed on global_step) and
the NeMo 1 / BioNeMo progress bar (``34103/1100000 [5:28:58<..., 1.73it/s, reduced_train_loss=...]``)."""

from __future__ import annotations

import re

from tprimat.logs.clean import Line, number
from tprimat.logs.stream import Step, StreamParser, new_step

NEMO2 = re.compile(r"Training epoch (\d+), iteration (\d+)/(\d+) \|(.*)")
NEMO1_BAR = re.compile(r"(\d+)/(\d+) \[([\d:]+)<[^,]*,\s*([\d.]+)(it/s|s/it),\s*(.*)\]")


def pairs(text: str, sep: str, fields: str) -> dict:
    out = {}
    for field in text.split(sep):
        key, found, value = field.partition(fields)
        if found:
            out[key.strip()] = value.strip()
    return out


class NemoParser(StreamParser):
    format = "nemo"
    MEANT = re.compile(r"Training epoch \S+, iteration \S+ \||reduced_train_loss=")  # NeMo 2's step line, NeMo 1's bar

    def read(self, line: Line) -> list[Step]:
        text = line.text
        if "Training epoch" in text and (m := NEMO2.search(text)):
            return self.offer(self.nemo2(m), line.rank)
        if "reduced_train_loss=" in text and (m := NEMO1_BAR.search(text)):
            return self.offer(self.nemo1(m), line.rank)
        return self.unread_if_meant(text) if "Training epoch" in text or "reduced_train_loss=" in text else []

    def nemo2(self, m: re.Match) -> Step:
        fields = pairs(m.group(4), "|", ":")
        key = number(fields["global_step"]) if "global_step" in fields else int(m.group(2))
        reported = {"epoch": int(m.group(1)), "iteration_in_epoch": int(m.group(2)),
                    "global_batch_size": number(fields.get("global_batch_size", "")),
                    "consumed_samples": number(fields.get("consumed_samples", "")),
                    "tflops_per_gpu": number(fields.get("TFLOPS_per_GPU", ""))}
        return new_step(int(key), reported, loss=number(fields.get("reduced_train_loss", "")),
                        lr=number(fields.get("lr", "")), grad_norm=number(fields.get("grad_norm", "")),
                        step_time_s=number(fields.get("train_step_timing in s", "")))

    def nemo1(self, m: re.Match) -> Step:
        fields = pairs(m.group(6), ",", "=")
        rate = float(m.group(4))
        reported = {"it_per_s": rate if m.group(5) == "it/s" else 1 / rate,
                    "loss_smoothed": number(fields.get("loss", "")), "global_step_printed": fields.get("global_step"),
                    "val_loss": number(fields.get("val_loss", "")), "elapsed": m.group(3)}
        return new_step(int(m.group(1)), reported, loss=number(fields.get("reduced_train_loss", "")))
