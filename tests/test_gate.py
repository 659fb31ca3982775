"""``tprimat gate`` on real CPU runs (throughput judged at the suite's 15%, memory and loss at the defaults): golden
values from two runs of two repeats, one before the rerun and one after; a rerun with two repeats passes; the same
configuration on half this machine's cores (a real slowdown, not scaled steps, two repeats) fails naming throughput;
one repeat a side never yields a significance verdict; a learning rate that diverges (as a user would hit it) ends
the run ``failed`` and the gate fails naming the file; a golden workload with no current run, a missing memory figure
and a mix of broken result files each fail with one line naming the cause; two workloads under one printed label
stay two (keyed by spec identity) and are told apart in the label."""

import copy
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, run_inprocess, running_alone
from tprimat.results.result import write_result

# eight real training runs (the ``runs`` fixture) need the machine alone: the test that makes them is ``exclusive``; the
# others read the stored results and run the gate on them, beside other tests; the run made beside a busy process on
# purpose is exclusive too, so that its spinner is the only other work (and slows no other test)
pytestmark = pytest.mark.slow

# 14 measured steps a repeat: with 6 (8 steps) one slow second in a repeat moved a quiet rerun's median 11% (CI,
# 2026-11-28), beyond the 5% the gate now holds as a hard bound
RUN = ["training.max_steps=16", "benchmark.warmup_steps=2", "logging.wandb.mode=disabled", "platform=cpu",
       "training.precision=fp32", "training.seq_length=128"]
TWO = ["benchmark.repeats=2"]
CORES = os.cpu_count() or 1


# The suite judges throughput at 15%, not the CLI's default 5%: on this shared 2-core VM a quiet rerun drifted 6%
# (golden interleaved around it) to 26% (golden first) within a minute on 2026-11-29, while 1024^2 matmuls took 0.37 to
# 0.57 s from one second to the next. Every failure the tests make is a 1.25x slowdown or more.
SUITE_TOLERANCE = ["--time-tolerance", "0.15"]


def gate(*args):
    judged = "--golden" in map(str, args) and "--time-tolerance" not in map(str, args)
    proc = subprocess.run([sys.executable, "-m", "tprimat", "gate", *map(str, args), *(SUITE_TOLERANCE if judged else [])],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout.strip().splitlines(), proc.stderr


def gate_beside_timing(*args):
    """The gate where the test judges loss, memory, a missing workload or labels, never the step time: throughput held
    at a tenfold bound, so that the real rerun's timing noise (CI once measured a quiet rerun beyond the suite's 15%,
    2026-11-29) cannot add a throughput line to what the test asserts."""
    return gate(*args, "--time-tolerance", "9")


def failed(lines):
    return [line.split(":")[0] for line in lines if line.startswith("FAILED")]


def doctored(directory, result, edit_step=None, edit=None):
    """A copy of a real result with each step edited and its summary computed again from the edited steps (as
    the run would have written it: consistent with itself), in ``directory``/result.json."""
    from tprimat.results.metrics import summarize
    from tprimat.results.records import StepRecord

    copied = copy.deepcopy(result)
    copied["run_id"] = f"{result['run_id']}-{directory.name}"
    for step in copied["steps"]:
        if edit_step:
            edit_step(step)
    if edit:
        edit(copied)
    plan = copied["plan"]
    copied["summary"] = summarize([StepRecord(**s) for s in copied["steps"]], plan["world_size"],
                                  plan["flops_per_token"], plan["peak_tflops"])
    directory.mkdir(parents=True)
    (directory / "result.json").write_text(json.dumps(copied))
    return copied


def train(directory, overrides, threads=None):
    """One real run in this process; ``threads``: torch's intra-op threads for it (half the cores: a slowdown)."""
    directory.mkdir(parents=True)
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        result = run_inprocess(directory, overrides).result
    finally:
        torch.set_num_threads(before)
    write_result(result, directory)  # as a run writes it (orjson: a non-finite loss as null, never NaN)
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    assert running_alone(), "the gate's golden and rerun runs are timed: made inside an exclusive test only"
    root = tmp_path_factory.mktemp("gate")
    # every run with its threads set: an earlier test of the session may have left torch on fewer
    made = golden_around_a_rerun(root)
    made.update({name: train(root / name, [*RUN, *extra], threads) for name, extra, threads in (
        ("half_cores", TWO, max(1, CORES // 2)),
        ("golden_one", [], CORES), ("rerun_one", [], CORES), ("shorter", ["training.seq_length=64"], CORES),
        ("diverged", ["training.optimizer.lr=1e4", "training.optimizer.grad_clip=0"], CORES))})
    made["golden"] = made["golden/a"]
    return root, made


def golden_around_a_rerun(root) -> dict:
    """Golden a, the rerun and golden b (two repeats each, every core) and the golden values written from a and b:
    the golden's four repeats are two runs, one before the rerun and one after it, so that a machine whose speed
    drifts within the minute (a shared VM: 1024^2 matmuls 0.37-0.57 s, 2026-11-29) moves both sides alike."""
    made = {name: train(root / name, [*RUN, *TWO], CORES) for name in ("golden/a", "rerun", "golden/b")}
    code, out, err = gate(root / "golden", "--write-golden", root / "golden_values")
    assert code == 0 and "wrote golden values of 1 group" in out[0], out + [err]
    return made


@pytest.mark.exclusive
def test_a_rerun_with_two_repeats_a_side_passes_within_the_suites_tolerance(runs, tmp_path):
    """A shared VM's speed can move beyond any fixed tolerance for the few seconds of one run (CI, 2026-11-29: a quiet
    rerun beyond 15% with the golden interleaved around it): a rerun that fails is measured once more, between two
    fresh golden runs, and the test fails only when both attempts fail. A gate that fails every rerun still fails it."""
    root, _ = runs
    code, out, _ = gate(root / "rerun", "--golden", root / "golden_values")
    first = out
    if code != 0:
        code, out = rerun_between_fresh_goldens(tmp_path)
    assert code == 0 and failed(out) == [] and len(out) == 3, (first, out)
    assert "95% CI" in next(line for line in out if "throughput" in line)  # two or more a side: the significance verdict


def rerun_between_fresh_goldens(root):
    """Golden a, the rerun and golden b made again (two repeats each) and the rerun judged: (exit code, lines)."""
    assert running_alone(), "timed: inside an exclusive test only"
    golden_around_a_rerun(root)
    code, out, _ = gate(root / "rerun", "--golden", root / "golden_values")
    return code, out


@pytest.mark.skipif(CORES < 2, reason="one core: no half of it to run on")
def test_the_same_run_on_half_the_cores_fails_naming_throughput(runs):
    root, made = runs
    slower = made["half_cores"]["summary"]["step_time_s"]["median"] / made["golden"]["summary"]["step_time_s"]["median"]
    # the slowdown is real (measured, not made) and beyond the suite's tolerance: one thread against two measured
    # 1.25x to 1.9x on this 2-core VM (1.248x once, on a clean clone on 2026-11-29)
    assert slower > 1 + float(SUITE_TOLERANCE[1]), slower
    code, out, _ = gate(root / "half_cores", "--golden", root / "golden_values")
    assert code == 1 and failed(out) == ["FAILED throughput"], out
    assert "rule: hard bound: step time and tokens/s per device" in next(line for line in out if "throughput" in line)


def test_one_repeat_a_side_is_judged_by_the_tolerance_alone(runs, tmp_path):
    """One repeat a side: no interval, the hard bound decides; the rerun passes (exit 0) and its copy with every step
    three times as long fails (exit 1)."""
    root, made = runs
    code, out, _ = gate(root / "golden_one", "--write-golden", tmp_path / "one")
    assert code == 0, out
    # one repeat a side carries one run's noise (a quiet rerun measured 5-11% slower on CI's machine, and once, on a
    # clean clone on 2026-11-29, more than 30% slower): the exit code is held at a tolerance above that noise (a rerun
    # up to 1.5x the golden step passes), the 3x copy below fails at the same tolerance unless its rerun ran 2x faster
    code, out, _ = gate(root / "rerun_one", "--golden", tmp_path / "one", "--time-tolerance", "0.5")
    line = next(line for line in out if "throughput" in line)
    assert code == 0 and "no interval" in line and "95% CI" not in line and "rule: within the tolerance" in line, out
    doctored(tmp_path / "slow", made["rerun_one"], lambda step: step.update(step_time_s=step["step_time_s"] * 3))
    code, out, _ = gate(tmp_path / "slow", "--golden", tmp_path / "one", "--time-tolerance", "0.5")
    assert code == 1 and failed(out) == ["FAILED throughput"] and "no interval" in out[0], out
    code, out, _ = gate(root / "rerun_one", "--golden", root / "golden_values")  # one current, four golden
    assert "no interval" in next(line for line in out if "throughput" in line)


def test_a_diverged_run_ends_failed_and_the_gate_names_it(runs):
    root, made = runs
    diverged = made["diverged"]
    assert diverged["status"] == "failed" and "the loss diverged" in diverged["error"], diverged["error"]
    assert len(diverged["steps"]) == 16  # every step kept
    code, out, _ = gate(root / "rerun", root / "diverged", "--golden", root / "golden_values")
    assert code == 1 and "FAILED skipped" in failed(out), out
    assert any("diverged" in line and "status failed" in line for line in out), out


def test_a_golden_workload_with_no_current_run_fails_and_labels_tell_workloads_apart(runs, tmp_path):
    root, _ = runs
    code, out, _ = gate(root / "golden", root / "shorter", "--write-golden", tmp_path / "two")
    assert code == 0 and "2 group" in out[0], out
    groups = json.loads((tmp_path / "two" / "golden.json").read_text())["groups"]
    labels = sorted(g["label"] for g in groups.values())
    assert labels[0] != labels[1] and all("training.seq_length=" in label for label in labels), labels
    code, out, _ = gate_beside_timing(root / "rerun", "--golden", tmp_path / "two")  # the seq-128 workload only
    assert code == 1 and failed(out) == ["FAILED missing"], out
    assert "training.seq_length=64" in next(line for line in out if line.startswith("FAILED missing"))
    code, out, _ = gate_beside_timing(root / "shorter", "--golden", root / "golden_values")  # golden seq 128, current seq 64 only
    lines = [line for line in out if line.startswith(("FAILED golden", "FAILED missing"))]
    assert code == 1 and len(lines) == 2, out
    golden_line, missing_line = sorted(lines)
    assert "training.seq_length=64" in golden_line and "training.seq_length=128" in missing_line, lines


def test_a_missing_memory_figure_fails_naming_memory(runs, tmp_path):
    root, made = runs
    stripped = copy.deepcopy(made["rerun"])
    for step in stripped["steps"]:
        step["peak_memory_gib"] = None
    (tmp_path / "nomem").mkdir()
    (tmp_path / "nomem" / "result.json").write_text(json.dumps(stripped))
    code, out, _ = gate_beside_timing(tmp_path / "nomem", "--golden", root / "golden_values")
    assert code == 1 and failed(out) == ["FAILED memory"], out
    assert "no peak recorded" in next(line for line in out if line.startswith("FAILED memory"))


def test_a_missing_loss_in_any_repeat_or_run_fails_naming_it(runs, tmp_path):
    """The rerun with its second repeat's losses gone (the first intact), and the rerun beside a copy of it (another
    run id) whose losses are all gone: each fails naming loss and where (the review found both passing)."""
    root, made = runs
    second = copy.deepcopy(made["rerun"])
    for step in second["steps"]:
        if step.get("repeat", 0) == 1:
            step["loss"] = None
    (tmp_path / "second").mkdir()
    (tmp_path / "second" / "result.json").write_text(json.dumps(second))
    code, out, _ = gate_beside_timing(tmp_path / "second", "--golden", root / "golden_values")
    assert code == 1 and failed(out) == ["FAILED loss"], out
    assert "repeat 1" in next(line for line in out if line.startswith("FAILED loss")), out
    silent = {**copy.deepcopy(made["rerun"]), "run_id": "s" * 12}
    for step in silent["steps"]:
        step["loss"] = None
    for name, result in (("good", made["rerun"]), ("silent", silent)):
        (tmp_path / "pair" / name).mkdir(parents=True)
        (tmp_path / "pair" / name / "result.json").write_text(json.dumps(result))
    code, out, _ = gate_beside_timing(tmp_path / "pair", "--golden", root / "golden_values")
    assert code == 1 and "FAILED loss" in failed(out), out


def test_a_mix_of_broken_result_files_fails_naming_each(runs, tmp_path):
    root, made = runs
    mix = tmp_path / "mix"
    mix.mkdir()
    text = json.dumps(made["rerun"])
    (mix / "truncated.json").write_text(text[: len(text) // 2])  # a crash while writing
    future = {**made["rerun"], "schema_version": "99", "run_id": "x" * 12}
    (mix / "future.json").write_text(json.dumps(future))  # a version tprimat check refuses
    (mix / "copy_a.json").write_text(text)
    (mix / "copy_b.json").write_text(text)  # the same run twice: counted once
    code, out, err = gate(mix, "--golden", root / "golden_values")
    assert code == 1 and "Traceback" not in err, out
    skipped = [line for line in out if line.startswith("FAILED skipped")]
    assert any("truncated.json" in line and "not JSON" in line for line in skipped), out
    assert any("future.json" in line for line in skipped), out
    assert any(line.startswith("note:") and "counted once" in line for line in out), out


def test_bad_input_exits_2_with_one_line(runs, tmp_path):
    root, _ = runs
    code, out, err = gate(root / "rerun", "--golden", tmp_path / "none")
    assert code == 2 and len(out) == 1 and "cannot read golden.json" in out[0] and "Traceback" not in err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "golden.json").write_text("{not json")
    code, out, err = gate(root / "rerun", "--golden", tmp_path / "broken")
    assert code == 2 and len(out) == 1 and "not JSON" in out[0] and "Traceback" not in err
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "golden.json").write_text(json.dumps({"version": 1, "groups": {}}))
    code, out, err = gate(root / "rerun", "--golden", tmp_path / "old")
    assert code == 2 and len(out) == 1 and "write it again" in out[0]


@pytest.mark.parametrize("scale", [2, 3])
def test_every_step_time_scaled_fails_whatever_the_interval_says(runs, tmp_path, scale):
    """Two repeats a side, every step x2 or x3: the interval may be wide, the tolerance is a hard bound."""
    root, made = runs
    doctored(tmp_path / "slow", made["rerun"], lambda step: step.update(step_time_s=step["step_time_s"] * scale))
    code, out, _ = gate(tmp_path / "slow", "--golden", root / "golden_values")
    line = next(line for line in out if "throughput" in line)
    assert code == 1 and failed(out) == ["FAILED throughput"], out
    assert "rule: hard bound" in line and "95% CI" in line, line


def test_halved_tokens_or_a_doubled_world_fail_on_tokens_per_device(runs, tmp_path):
    """The same step times with half the tokens per step, or the same run claimed on twice the devices: tokens/s per
    device halves (0.500x, by hand), the step time does not move."""
    root, made = runs
    doctored(tmp_path / "half", made["rerun"], lambda step: step.update(tokens=step["tokens"] // 2))
    doctored(tmp_path / "wide", made["rerun"], edit=lambda r: r["plan"].update(world_size=r["plan"]["world_size"] * 2))
    for name in ("half", "wide"):
        code, out, _ = gate(tmp_path / name, "--golden", root / "golden_values")
        line = next(line for line in out if "throughput" in line)
        assert code == 1 and failed(out) == ["FAILED throughput"], (name, out)
        assert "rule: hard bound:" in line and "tokens/s per device beyond the tolerance" in line, line


def test_a_stated_throughput_its_steps_do_not_give_is_a_broken_result(runs, tmp_path):
    """summary.tokens_per_s_per_device doubled by hand, the steps untouched: tprimat check refuses it and the gate
    skips it by name."""
    root, made = runs
    broken = copy.deepcopy(made["rerun"])
    broken["summary"]["tokens_per_s_per_device"] *= 2
    (tmp_path / "stated").mkdir()
    (tmp_path / "stated" / "result.json").write_text(json.dumps(broken))
    proc = subprocess.run([sys.executable, "-m", "tprimat", "check", str(tmp_path / "stated" / "result.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "summary/tokens_per_s_per_device" in proc.stdout, proc.stdout
    code, out, _ = gate(tmp_path / "stated", "--golden", root / "golden_values")
    assert code == 1 and "FAILED skipped" in failed(out), out
    assert "tokens_per_s_per_device" in next(line for line in out if line.startswith("FAILED skipped")), out


def test_losses_x3_in_any_repeat_or_run_fail_naming_loss(runs, tmp_path):
    root, made = runs
    triple = lambda step: step.update(loss=step["loss"] * 3)  # noqa: E731
    doctored(tmp_path / "second", made["rerun"], lambda step: step.get("repeat") == 1 and triple(step))
    code, out, _ = gate_beside_timing(tmp_path / "second", "--golden", root / "golden_values")
    assert code == 1 and failed(out) == ["FAILED loss"] and "repeat 1" in out[1], out
    (tmp_path / "pair").mkdir()
    (tmp_path / "pair" / "good.json").write_text(json.dumps(made["rerun"]))
    doctored(tmp_path / "pair" / "bad", made["rerun"], triple)
    code, out, _ = gate_beside_timing(tmp_path / "pair", "--golden", root / "golden_values")
    assert code == 1 and failed(out) == ["FAILED loss"] and "bad repeat 0" in out[1], out


def test_memory_golden_without_a_figure_or_negative_fails_unless_allowed(runs, tmp_path):
    root, made = runs
    doctored(tmp_path / "nomem", made["golden"], lambda step: step.update(peak_memory_gib=None))
    code, out, _ = gate(tmp_path / "nomem", "--write-golden", tmp_path / "golden_nomem")
    assert code == 0, out
    doctored(tmp_path / "big", made["rerun"], lambda step: step.update(peak_memory_gib=(step["peak_memory_gib"] or 0)
                                                                         * 10))
    code, out, _ = gate_beside_timing(tmp_path / "big", "--golden", tmp_path / "golden_nomem")
    assert code == 1 and failed(out) == ["FAILED memory"] and "cannot be judged" in out[2], out
    code, out, _ = gate_beside_timing(tmp_path / "big", "--golden", tmp_path / "golden_nomem", "--allow-missing", "memory")
    assert code == 0 and "allowed by --allow-missing memory" in out[2], out
    doctored(tmp_path / "negative", made["rerun"], lambda step: step.update(peak_memory_gib=-1.0))
    code, out, _ = gate_beside_timing(tmp_path / "negative", "--golden", root / "golden_values")
    assert code == 1 and failed(out) == ["FAILED skipped", "FAILED missing"] and "negative" in out[0], out


def battery(made) -> dict:
    """Broken result files, each as a user or a tool could leave one, and a word of the reason it must be refused
    for (by the rule it breaks, not by what the code prints)."""
    good = made["rerun"]
    text = json.dumps(good)

    def edited(edit):
        copied = copy.deepcopy(good)
        edit(copied)
        return json.dumps(copied)

    first_measured = next(i for i, s in enumerate(good["steps"]) if not s["warmup"])
    return {
        "zero_steps": (edited(lambda r: r["summary"].update(measured_steps=0)), "summary"),
        "all_warmup": (edited(lambda r: [s.update(warmup=True) for s in r["steps"]]), "warm-up"),
        "dup_status": (text.replace('"status": "ok"', '"status": "failed", "status": "ok"', 1), "twice"),
        "nested": ('{"a": ' * 50_000 + "1" + "}" * 50_000, "nested too deeply"),
        "nan_literal": (text.replace('"loss": ' + json.dumps(good["steps"][1]["loss"]), '"loss": NaN', 1), "NaN"),
        "spec_null": (edited(lambda r: r.update(spec=None)), "spec"),
        "int_platform": (edited(lambda r: r["spec"]["platform"].update(name=7)), "spec.platform.name"),
        "huge_tokens": (text.replace('"tokens": ' + json.dumps(good["steps"][first_measured]["tokens"]),
                                     '"tokens": 1' + "0" * 400, 1), "float range"),
        "stated_rate": (edited(lambda r: r["summary"].update(tokens_per_s_per_device=2 * r["summary"][
            "tokens_per_s_per_device"])), "tokens_per_s_per_device"),
        "no_status": (edited(lambda r: r.pop("status")), "status"),
        "no_schema": (edited(lambda r: r.pop("schema_version")), "schema_version"),
        "array": (json.dumps([good]), "list"),
        "stated_no_steps": (edited(lambda r: [s.update(tokens=None) for s in r["steps"]] and r["summary"].update(
            tokens_per_s_per_device=10 * r["summary"]["tokens_per_s_per_device"])), "no measured step"),
    }


def test_check_refuses_each_broken_file_by_name_and_the_gate_and_compare_skip_it(runs, tmp_path):
    root, made = runs
    mix = tmp_path / "mix"
    for name, (text, reason) in battery(made).items():
        (mix / name).mkdir(parents=True)
        (mix / name / "result.json").write_text(text)
        proc = subprocess.run([sys.executable, "-m", "tprimat", "check", str(mix / name / "result.json")], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and "INVALID" in proc.stdout and reason in proc.stdout, (name, proc.stdout[-600:])
        assert "Traceback" not in proc.stderr, (name, proc.stderr[-600:])
    (mix / "fifo").mkdir()
    os.mkfifo(mix / "fifo" / "result.json")  # read, it would block every reader forever
    (mix / "good").mkdir()
    (mix / "good" / "result.json").write_text(json.dumps(made["rerun"]))
    doctored_same_id = copy.deepcopy(made["rerun"])
    doctored_same_id["steps"][-1]["loss"] *= 0.5
    (mix / "same_id").mkdir()
    (mix / "same_id" / "result.json").write_text(json.dumps(doctored_same_id))  # the run's id, other contents
    code, out, err = gate(mix, "--golden", root / "golden_values")
    skipped = {Path(line.split(": ")[1]).parent.name for line in out if line.startswith("FAILED skipped")}
    assert code == 1 and "Traceback" not in err, out
    assert skipped == {*battery(made), "fifo", "same_id", "good"}, sorted(skipped)  # a conflict reads neither
    assert any("conflict" in line for line in out if "same_id" in line), out
    proc = subprocess.run([sys.executable, "-m", "tprimat", "compare", str(mix)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert "Traceback" not in proc.stderr and proc.stderr.count("skipped ") == len(skipped), proc.stderr[-3000:]


@pytest.mark.exclusive  # its spinner is the other work: beside another test too it took 35 s, not 12 s (2026-11-29)
def test_a_run_beside_other_work_says_so_and_the_gate_names_it(runs, tmp_path):
    """The rerun's configuration trained beside a process that keeps a core busy: its result records
    the other processes' share of the machine's CPU time, compare flags it, and the gate's throughput failure names
    it."""
    root, made = runs
    # one a core, started through a shell that exits at once: not this process's children, which the run (trained
    # in this process) would count as its own (niced to 10 they took 0.1% of this machine's CPU on 2026-11-28)
    # one spinner, not one a core: beside one a core a step took 2.4 s, not 0.4 s (2026-11-28), 40 s of a suite that
    # must fit 15 minutes, where one spinner already holds one of the run's threads back every step
    spinners = [int(subprocess.run(["sh", "-c", f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
                                   capture_output=True, text=True, check=True).stdout) for _ in range(1)]
    try:
        beside = train(tmp_path / "beside", RUN, CORES)  # one repeat: the tolerance alone judges it
    finally:
        for pid in spinners:
            os.kill(pid, signal.SIGKILL)
    busy = beside["contention"]["outside_cpu_share"]
    assert busy > 0.10, beside["contention"]  # a process spinning on one of the cores: well above a tenth
    proc = subprocess.run([sys.executable, "-m", "tprimat", "compare", str(tmp_path / "beside")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert "shared machine" in proc.stdout, proc.stdout[-3000:]
    code, out, _ = gate(tmp_path / "beside", "--golden", root / "golden_values")
    line = next(line for line in out if "throughput" in line)  # 4x the golden's step beside one spinner (2026-11-29)
    assert code == 1 and line.startswith("FAILED") and "measured beside other work" in line, line
