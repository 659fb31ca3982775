"""Make real log lines parseable: ANSI colours, srun labels, torchrun/Ray/Primus prefixes."""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
PREFIXES = [
    re.compile(r"^\s*\d+:\s+"),  # srun --label: "3:  "
    re.compile(r"^(\[rank\d+\]:)+"),  # torchrun --tee: "[rank0]:" (possibly doubled)
    re.compile(r"^\([\w-]+, pid=\d+\)\s*"),  # Ray / SkyPilot: "(pretraining, pid=4112) "
    re.compile(r"^\[\d{8} \d\d:\d\d:\d\d\]\[rank-\d+/\d+\]\[\s*\w+\s*\]\s*(\[-*[\w.]+:\d+\]\s*:)?\s*"),  # Primus
]


def clean_line(line: str) -> str:
    line = ANSI.sub("", line).replace("\r", "")
    changed = True
    while changed:
        changed = False
        for prefix in PREFIXES:
            stripped = prefix.sub("", line, count=1)
            if stripped != line:
                line, changed = stripped, True
    return line.strip()


def clean_lines(text: str) -> list[str]:
    return [clean_line(raw) for raw in text.splitlines()]


def number(text: str):
    """A printed number ("1,360", "1.249e+03", "12.3%", "N/A") as float, or None."""
    text = text.strip().rstrip("%").replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None
