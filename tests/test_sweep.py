"""Sweeps: tprimat plan expands and validates every point without running anything, agreeing with the launcher."""

import csv
import subprocess
import sys

import pytest

from tests.conftest import CONF, run_inprocess
from tprimat.sweep import expand, plan_sweep

SWEEP = ["platform=nvidia", "platform.gpu=h100", "model=llama,llama70b", "parallelism.tp=1,2,3,8"]


def test_expand_is_the_cartesian_product():
    points = expand(["model=llama,qwen", "parallelism.tp=1,2", "training.max_steps=3"])
    assert len(points) == 4 and ["model=qwen", "parallelism.tp=2", "training.max_steps=3"] in points


def test_plan_marks_each_point_with_its_reason_and_numbers():
    points = {" ".join(p.overrides): p for p in plan_sweep(SWEEP, str(CONF))}
    assert len(points) == 8
    ok = points["platform=nvidia platform.gpu=h100 model=llama parallelism.tp=1"]
    assert ok.valid and ok.world_size == 8 and ok.dp == 8 and ok.flops_per_token == pytest.approx(51.47e9, rel=1e-3)
    assert ok.memory_estimate_gib <= ok.device_memory_gib
    bad = points["platform=nvidia platform.gpu=h100 model=llama parallelism.tp=3"]
    assert not bad.valid and "world size must be a multiple of tp * pp * cp" in bad.reason
    big = points["platform=nvidia platform.gpu=h100 model=llama70b parallelism.tp=1"]
    assert not big.valid and "exceeds 80.0 GiB" in big.reason


@pytest.mark.parametrize("overrides", [["parallelism.tp=2"], ["platform=nvidia", "platform.gpu=h100", "model=llama"],
                                       ["training.precision=fp8"], ["platform.devices_per_node=2", "parallelism.fsdp=true"]])
def test_plan_agrees_with_a_dry_run(tmp_path, overrides):
    [point] = plan_sweep(overrides, str(CONF))
    out = run_inprocess(tmp_path, [*overrides, "dry_run=true"])
    backend_ok = not (out.result["plan"] or {}).get("backend_problems")
    assert point.valid == (out.status == "dry_run" and backend_ok)


def test_type_errors_and_unknown_keys_are_a_points_reason():
    bad_type, good = plan_sweep(["parallelism.tp=two,1"], str(CONF))
    assert not bad_type.valid and "parallelism.tp='two': must be of type int" in bad_type.reason and good.valid
    [unknown] = plan_sweep(["training.nope=1"], str(CONF))
    assert not unknown.valid and "training.nope: unknown key" in unknown.reason


def test_plan_command_writes_a_csv_and_exits_2_when_a_point_is_invalid(tmp_path):
    out = tmp_path / "plan.csv"
    proc = subprocess.run([sys.executable, "-m", "tprimat", "plan", *SWEEP, "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 8 and {r["valid"] for r in rows} == {"True", "False"}
    assert "tprimat plan: 8 points" in proc.stdout
