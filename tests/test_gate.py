"""``tprimat gate`` on real CPU runs: golden values from one run; a rerun passes; a run whose loss curve departs (a
10x learning rate, trained for real), the golden run with every step 1.6x slower, and the rerun with 1.5x the peak
memory each fail naming the check; bad input exits 2 with one line. The CPU's run-to-run noise is near 10%
(docs/benchmarks.md) and more on a loaded machine, so the rerun is held to a 50% time tolerance; the 1.6x slowdown
(60% slower) is beyond it and beyond the noise."""

import copy
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_inprocess

pytestmark = pytest.mark.slow  # three real training runs

RUN = ["training.max_steps=12", "benchmark.warmup_steps=2", "logging.wandb.mode=disabled", "platform=cpu",
       "training.precision=fp32"]


def gate(*args):
    proc = subprocess.run([sys.executable, "-m", "tprimat", "gate", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    return proc.returncode, proc.stdout.strip().splitlines(), proc.stderr


def scaled(result: dict, time_scale: float = 1.0, memory_scale: float = 1.0) -> dict:
    r = copy.deepcopy(result)
    columns = r["steps"] if isinstance(r["steps"], dict) else None
    rows = r["steps"] if columns is None else None
    if columns is not None:
        columns["step_time_s"] = [t * time_scale if t else t for t in columns["step_time_s"]]
        columns["peak_memory_gib"] = [m * memory_scale if m else m for m in columns["peak_memory_gib"]]
    else:
        for s in rows:
            s["step_time_s"] *= time_scale
            s["peak_memory_gib"] = s["peak_memory_gib"] * memory_scale if s.get("peak_memory_gib") else None
    summary = r["summary"]
    summary["tokens_per_s"] /= time_scale
    summary["tokens_per_s_per_device"] /= time_scale
    for rep in summary.get("per_repeat", []):
        rep["tokens_per_s"] /= time_scale
    return r


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    made = {}
    for name, extra in (("golden", []), ("rerun", []), ("departed", ["training.optimizer.lr=0.03"])):
        (root / name).mkdir()
        made[name] = run_inprocess(root / name, [*RUN, *extra]).result
        (root / name / "result.json").write_text(json.dumps(made[name]))
    # the slowdown is the golden run's own steps, 1.6x: a rerun that happened to be faster than the golden one
    # would otherwise leave 1.6x of it inside the 50% tolerance (CI saw 0.669x)
    for name, result in (("slow", scaled(made["golden"], time_scale=1.6)),
                         ("heavy", scaled(made["rerun"], memory_scale=1.5))):
        (root / name).mkdir()
        (root / name / "result.json").write_text(json.dumps(result))
    code, out, err = gate(root / "golden", "--write-golden", root / "golden_values")
    assert code == 0 and "wrote golden values of 1 group" in out[0], out + [err]
    return root


def failed(lines):
    return [line.split(":")[0] for line in lines if line.startswith("FAILED")]


def test_a_rerun_passes(runs):
    code, out, _ = gate(runs / "rerun", "--golden", runs / "golden_values", "--time-tolerance", "0.5")
    assert code == 0 and failed(out) == [] and len(out) == 3, out


def test_a_departed_loss_curve_fails_naming_loss(runs):
    code, out, _ = gate(runs / "departed", "--golden", runs / "golden_values", "--time-tolerance", "0.5")
    assert code == 1 and "FAILED loss" in failed(out), out
    assert any("spec differs" in line for line in out)


def test_a_slowdown_of_1_6x_fails_naming_throughput(runs):
    code, out, _ = gate(runs / "slow", "--golden", runs / "golden_values", "--time-tolerance", "0.5")
    assert code == 1 and failed(out) == ["FAILED throughput"], out
    assert "slower, beyond the tolerance and outside the noise" in next(line for line in out if "throughput" in line)


def test_a_memory_growth_of_1_5x_fails_naming_memory(runs):
    code, out, _ = gate(runs / "heavy", "--golden", runs / "golden_values", "--time-tolerance", "0.5")
    assert code == 1 and failed(out) == ["FAILED memory"], out
    assert "1.5" in next(line for line in out if line.startswith("FAILED memory"))


def test_bad_input_exits_2_with_one_line(runs, tmp_path):
    code, out, err = gate(runs / "rerun", "--golden", tmp_path / "none")
    assert code == 2 and len(out) == 1 and "cannot read golden.json" in out[0] and "Traceback" not in err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "golden.json").write_text("{not json")
    code, out, err = gate(runs / "rerun", "--golden", tmp_path / "broken")
    assert code == 2 and len(out) == 1 and "not JSON" in out[0] and "Traceback" not in err
    other = json.loads((runs / "golden_values" / "golden.json").read_text())
    other["groups"] = {"another group": next(iter(other["groups"].values()))}
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "golden.json").write_text(json.dumps(other))
    code, out, err = gate(runs / "rerun", "--golden", tmp_path / "other")
    assert code == 2 and len(out) == 1 and out[0].startswith("tprimat gate: no golden values for ")
