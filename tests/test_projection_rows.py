"""The projection's published rows (bench/projection_rows.py, the held-out sets bench/held_out_3.py and
bench/held_out_4.py), composed as bench/projection.py composes them, against the layout each row's own name
states, as its source table prints it: the degrees (``TP4 PP8 VP5``, ``CP2``, ``FSDP``; a degree not named is 1)
and the GPUs (``x64``; else the row's count), and the recompute its source runs. A layout leaking in from a
methodology or a recipe (two Megatron-Bridge H100 rows composed with CP 2 until 2026-11-28; the 70B rows with the
methodology's selective recompute until 2026-11-29) fails here."""

import importlib
import re
import sys

import pytest

from tests.conftest import ROOT
from tprimat.compose import Composer

sys.path.insert(0, str(ROOT / "bench"))
# composed as bench/projection.py composes them: the sweep's fast composition, equal to Hydra's (tests/test_sweep.py)
COMPOSER = Composer()
projection_rows = importlib.import_module("projection_rows")
ROWS = [("scored", r) for r in projection_rows.SCORED] + [
    (module, projection_rows.row(**r)) for module in ("held_out_3", "held_out_4")
    for r in importlib.import_module(module).PUBLISHED]


def stated(row: dict) -> dict:
    """The degrees a row's name prints (``\\bTP(\\d+)``: FSDP8 is FSDP's degree, not TP's; unnamed ones are 1)
    and FSDP where its name or its family (the table's FSDP column: GB200 and GB300 70B) says so."""
    degree = {key: int(m.group(1)) if (m := re.search(rf"\b{key.upper()}(\d+)", row["name"])) else 1
              for key in ("tp", "pp", "cp", "vp")}
    return {**degree, "fsdp": "FSDP" in row["name"] or "FSDP" in row["family"]}


@pytest.mark.parametrize("where,row", ROWS, ids=[f"{w}: {r['name']}" for w, r in ROWS])
def test_a_published_row_composes_with_the_layout_its_source_states(where, row):
    """Its degrees, GPUs and recompute (maximum_performance, the default methodology, recomputes the 70B rows
    selectively: a row that does not state its own recompute fails here)."""
    composed = COMPOSER.compose(row["overrides"])
    par, platform = composed["parallelism"], composed["platform"]
    assert {key: par[key] for key in ("tp", "pp", "cp", "vp", "fsdp")} == stated(row), where
    gpus = re.search(r"\bx(\d+)\b", row["name"])
    if gpus:
        assert platform["nodes"] * platform["devices_per_node"] == int(gpus.group(1))
    assert composed["training"]["activation_checkpointing"] == source_recompute(row), where


def source_recompute(row: dict) -> str:
    """The activation recompute the row's source ran, as each source states it: torchtitan's tables name theirs
    (202412 Tables 1 and 3 "Selective activation checkpointing", Tables 2 and 4 "Full activation checkpointing";
    2025-06 async TP: the 70B "full AC", the 8B "per op SAC"; Trainy's H200 runs: llama3_8b.toml, selective op);
    the Megatron-core rows' configs set none (NeMo-Framework-Launcher 24.07's training yamls:
    activations_checkpoint_granularity null; Megatron-Bridge's perf configs for these layouts: no recompute)."""
    if "torchtitan" not in row["source"]:
        return "none"
    return "full" if "full AC" in row["name"] or " 70B " in row["name"] else "selective"

