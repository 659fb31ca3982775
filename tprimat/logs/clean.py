"""Make real log lines parseable: ANSI colours, srun labels, torchrun/Ray/Primus prefixes. The rank a prefix
names is kept (``Line.rank``), and a Primus prefix also states the world size (``rank-7/8``)."""

from __future__ import annotations

import math
import re
from typing import NamedTuple, Optional

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
SRUN = re.compile(r"^\s*(\d{1,9}):\s+")  # srun --label: "3:  " (a task id: a rank, or a node under torchrun)
TORCHRUN = re.compile(r"^\[rank(\d{1,9})\]:")  # torchrun --tee: "[rank0]:" (possibly doubled)
RAY = re.compile(r"^\([\w-]+, pid=\d+\)\s*")  # Ray / SkyPilot: "(pretraining, pid=4112) "
PRIMUS = re.compile(r"^\[\d{8} \d\d:\d\d:\d\d\]\[rank-(\d{1,9})/(\d{1,9})\]\[\s*\w+\s*\]\s*(?:\[-*[\w.]+:\d+\]\s*:)?\s*")
PREFIX_START = frozenset("0123456789 \t[(")
# An srun label followed by nothing ``clean`` reads as a further prefix: its rank without the loop in ``clean``.
PLAIN_LABEL = re.compile(r"[ \t]*(\d{1,9}):[ \t]+(?!\[rank|\[\d{8} |\(|\d|\s)(?![^\n]*[\x1b\r])")


class Line(NamedTuple):
    text: str
    rank: Optional[int] = None  # the rank a prefix names (srun labels count as ranks only when nothing else does)
    world: Optional[int] = None  # world size a prefix states (Primus "rank-7/8")


def clean(raw: str) -> Line:
    if "\x1b" in raw:
        raw = ANSI.sub("", raw)
    line = raw.replace("\r", "") if "\r" in raw else raw
    if not line or line[0] not in PREFIX_START:
        return Line(line.strip())
    rank = world = label = None
    while True:
        if (m := PRIMUS.match(line)):
            rank, world = int(m.group(1)), int(m.group(2))
        elif (m := TORCHRUN.match(line)):
            rank = int(m.group(1))
        elif (m := SRUN.match(line)):
            label = int(m.group(1))
        elif (m := RAY.match(line)):
            pass
        else:
            break
        line = line[m.end():]
    return Line(line.strip(), rank if rank is not None else label, world)


def clean_line(raw: str) -> str:
    return clean(raw).text


def clean_lines(text: str) -> list[str]:
    return [clean(raw).text for raw in text.splitlines()]


def number(text: str):
    """A printed number ("1,360", "1.249e+03", "12.3%", "N/A") as a finite float, or None."""
    if len(text) <= 64:
        try:  # the common case, a plain number with surrounding blanks, in one C call
            value = float(text)
            return value if math.isfinite(value) else None
        except ValueError:
            pass
    text = text.strip().rstrip("%").replace(",", "")
    if len(text) > 64:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def count(text: str):
    """A printed count that may carry a unit suffix ("0.004B", "104857600") as (value, exact)."""
    text = text.strip()
    scale = SUFFIX.get(text[-1:].upper()) if text and not text[-1].isdigit() else None
    value = number(text[:-1] if scale else text)
    if value is None:
        return None, False
    return value * (scale or 1), scale is None
