"""The projection's own record: how far its roofline landed from measured throughput, by stack and GPU class.

``projection_record.json`` beside this file is written by ``python bench/projection.py --write-record`` from every
published row the bench scores (its development rows and its held-out sets, MLPerf's submissions among them): per
group, the rows and families (near-duplicates once) and the lowest and highest family error (projected /
measured - 1). A projection carries the interval of its group (its stack on its GPU class), else of its stack on
every GPU, else of every row, and says which: a user reads "within -4% to +9% for megatron-core stacks on Hopper
(23 rows)", not a bare number. Data only: nothing here is fitted to the rows (a development row's error is taken at
the per-operation gap learned without its family, ``tprimat.spec.op_gap``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Optional

from tprimat.spec.keeps import MEGATRON_CORE

RECORD = Path(__file__).with_name("projection_record.json")
GPU_CLASSES = {"h100": "Hopper", "h100_96gb": "Hopper", "h200": "Hopper", "h200_nvl": "Hopper", "b200": "Blackwell",
               "b300": "Blackwell", "gb200": "Blackwell", "gb300": "Blackwell", "a100": "Ampere", "mi250x": "CDNA 2",
               "mi300x": "CDNA 3", "mi325x": "CDNA 3", "mi350x": "CDNA 4", "mi355x": "CDNA 4"}


def stack_of(framework: str) -> str:
    return "megatron-core" if framework in MEGATRON_CORE else framework


def group_of(framework: str, gpu: Optional[str]) -> str:
    return f"{stack_of(framework)} stacks on {GPU_CLASSES.get((gpu or '').lower(), gpu or 'unknown')}"


@lru_cache(maxsize=1)
def groups() -> dict:
    return json.loads(RECORD.read_text())["groups"] if RECORD.exists() else {}


def interval(framework: str, gpu: Optional[str]) -> Optional[dict]:
    """The record's interval for a stack on a GPU (falling back to the stack on every GPU, then every row), with
    the group it comes from; None with no record."""
    record = groups()
    for name in (group_of(framework, gpu), f"{stack_of(framework)} stacks on every GPU", "every stack on every GPU"):
        if name in record:
            return {"group": name, **record[name]}
    return None


def phrase(found: Optional[dict]) -> str:
    if found is None:
        return "no record of this projection's error yet (bench/projection.py --write-record)"
    return (f"within {found['low']:+.0%} to {found['high']:+.0%} for {found['group']} ({found['rows']} rows, "
            f"{found['families']} families: the projection's record, {found['source']})")
