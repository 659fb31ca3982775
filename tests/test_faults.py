"""Faults with real processes and real signals: a killed launcher takes its ranks with it, a rank that dies is
named and stops the others, SIGTERM/SIGINT end in a failed result that keeps the measured steps, steps.jsonl
survives anything, and a result that cannot be written is one line and exit 1."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import QUICK, ROOT, run_inprocess
from tprimat.results.result import read_result, validate_result
from tprimat.results.steplog import STEPS_FILE, read_steps, rebuild

LONG_2_RANKS = ["platform=cpu", "platform.devices_per_node=2", "training.max_steps=400", "benchmark.warmup_steps=1",
                "logging.wandb.mode=disabled", "benchmark.telemetry=false"]
LONG_1_RANK = ["platform=cpu", "training.max_steps=400", "benchmark.warmup_steps=1", "logging.wandb.mode=disabled"]


def start(run_dir: Path, overrides: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "launch.py"), f"hydra.run.dir={run_dir}", *overrides],
                            cwd=run_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def ranks_of(proc: subprocess.Popen) -> list[psutil.Process]:
    """The launcher's ranks: its descendants (forked from its forkserver) named tprimat-rankN, as ps shows them."""
    return [p for p in psutil.Process(proc.pid).children(recursive=True) if name_of(p).startswith("tprimat-rank")]


def name_of(process: psutil.Process) -> str:
    """A descendant's name; empty for one that ended meanwhile (the launcher's short-lived helpers end while the
    test looks for the ranks)."""
    try:
        return process.name()
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return ""


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def measured_steps(run_dir: Path) -> int:
    return len(read_steps(run_dir)[1])


def rank_named(process: psutil.Process) -> int:
    return int(name_of(process).removeprefix("tprimat-rank"))


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_ranks_die_with_their_launcher(tmp_path, how):
    proc = start(tmp_path, LONG_2_RANKS)
    try:
        ranks = wait_for(lambda: len(ranks_of(proc)) == 2 and ranks_of(proc), 60, "two ranks")
        wait_for(lambda: measured_steps(tmp_path) >= 2, 120, "two measured steps")
        proc.send_signal(how)
        proc.wait(timeout=30)
        gone, alive = psutil.wait_procs(ranks, timeout=15)
        assert not alive, f"ranks still running after the launcher got {how.name}: {alive}"
    finally:
        proc.kill()
        for child in psutil.Process().children(recursive=True):
            child.kill()
    if how == signal.SIGTERM:  # caught: a failed result naming the signal, with the steps measured so far
        result = read_result(tmp_path)
        assert result["status"] == "failed" and "SIGTERM" in result["error"] and proc.returncode == 1
        assert len(result["steps"]) >= 2 and validate_result(result) == []


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before its first step", "after some steps"])
def test_a_dead_rank_is_named_and_stops_the_others_within_seconds(tmp_path, when):
    proc = start(tmp_path, LONG_2_RANKS)
    try:
        ranks = wait_for(lambda: len(ranks_of(proc)) == 2 and ranks_of(proc), 60, "two ranks")
        if when == "after some steps":
            wait_for(lambda: measured_steps(tmp_path) >= 3, 120, "three measured steps")
        victim = next(p for p in ranks if rank_named(p) == 1)
        killed_at = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        assert time.monotonic() - killed_at < 20, "the launcher took too long to stop the other rank"
        gone, alive = psutil.wait_procs(ranks, timeout=10)
        assert not alive
    finally:
        proc.kill()
    result = read_result(tmp_path)
    assert proc.returncode == 1 and result["status"] == "failed"
    assert "rank 1 was killed by SIGKILL (the first rank to fail)" in result["error"], result["error"]
    assert "rank 0 exited" not in result["error"]
    if when == "after some steps":
        assert len(result["steps"]) >= 3  # rank 0 wrote them to steps.jsonl as they were measured


@pytest.mark.slow
def test_sigint_in_a_single_process_run_keeps_its_steps(tmp_path):
    proc = start(tmp_path, LONG_1_RANK)
    try:
        wait_for(lambda: measured_steps(tmp_path) >= 3, 120, "three measured steps")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    result = read_result(tmp_path)
    assert proc.returncode == 1 and result["status"] == "failed" and "SIGINT" in result["error"]
    kept = measured_steps(tmp_path)
    assert len(result["steps"]) == kept >= 3 and result["summary"] is not None


def test_every_measured_step_is_on_disk_as_it_is_measured(tmp_path):
    out = run_inprocess(tmp_path, QUICK)
    header, steps = read_steps(tmp_path)
    assert header["run_id"] == out.result["run_id"] and header["plan"]["world_size"] == 1
    assert steps == out.result["steps"]


@pytest.mark.slow
def test_a_lost_result_is_rebuilt_from_steps_jsonl(tmp_path):
    out = run_inprocess(tmp_path, QUICK)
    (tmp_path / "result.json").unlink()
    with open(tmp_path / STEPS_FILE, "a") as f:
        f.write('{"step": 9, "step_time_s": 0.1, "tok')  # a line cut short by a crash
    rebuilt = rebuild(tmp_path)
    assert rebuilt["status"] == "failed" and rebuilt["run_id"] == out.result["run_id"]
    assert rebuilt["steps"] == out.result["steps"] and validate_result(rebuilt) == []
    assert rebuilt["summary"]["tokens_per_s_per_device"] == pytest.approx(out.result["summary"]["tokens_per_s_per_device"])
    cli = subprocess.run([sys.executable, "-m", "tprimat.cli", "check", str(tmp_path)], capture_output=True, text=True)
    assert cli.returncode == 1 and "tprimat check --rebuild" in cli.stdout
    cli = subprocess.run([sys.executable, "-m", "tprimat.cli", "check", "--rebuild", str(tmp_path)],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert read_result(tmp_path)["status"] == "failed"


def test_a_result_that_cannot_be_written_is_one_line_and_exit_1(tmp_path, monkeypatch, caplog):
    import tprimat.results.result as result_module

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(result_module.os, "replace", full_disk)
    from tests.conftest import compose
    from tprimat.execute.run import execute

    outcome = execute(compose(QUICK), tmp_path, QUICK)
    assert outcome.exit_code == 1 and outcome.result_path is None
    assert any("cannot write the ok result to" in r.message and "No space left" in r.message for r in caplog.records)
    assert not list(tmp_path.glob(".result-*"))  # no temp file left behind
    assert len(read_steps(tmp_path)[1]) == 4  # the steps are on disk all the same


def test_steps_jsonl_write_errors_never_stop_training(tmp_path, monkeypatch):
    from tprimat.results import steplog

    class Full:
        def write(self, text):
            raise OSError(28, "No space left on device")

        def flush(self):
            pass

        def close(self):
            pass

    log = steplog.StepLog(tmp_path, {"run_id": "x"})
    log.file = Full()
    log._write({"step": 1})
    assert "No space left" in log.error and log.file is None
    log._write({"step": 2})  # a no-op now, not a crash
    assert json.loads((tmp_path / STEPS_FILE).read_text().splitlines()[0]) == {"header": {"run_id": "x"}}


@pytest.mark.slow
def test_a_claimed_run_directory_is_refused_before_anything_is_written(tmp_path):
    from tests.conftest import run_launch
    from tprimat.execute.claim import claim

    held = claim(tmp_path)  # another run holds it (a real flock, from this process)
    try:
        proc = run_launch(tmp_path, *QUICK)
    finally:
        held.close()
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().startswith(f"invalid: hydra.run.dir={tmp_path}: in use by another tprimat run (pid ")
    assert not (tmp_path / ".hydra").exists() and not (tmp_path / "result.json").exists()
    assert run_launch(tmp_path, *QUICK).returncode == 0  # released: the directory can be used again


@pytest.mark.slow
def test_a_claimed_sweep_directory_is_refused(tmp_path):
    from tprimat.execute.claim import claim

    held = claim(tmp_path)
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={tmp_path}",
                               "training.max_steps=2,3", "benchmark.warmup_steps=0", "logging.wandb.mode=disabled"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
    finally:
        held.close()
    assert proc.returncode == 2 and "invalid: hydra.sweep.dir=" in proc.stderr and "in use" in proc.stderr
    assert not list(tmp_path.glob("*/result.json")) and not (tmp_path / "sweep_summary.csv").exists()


@pytest.mark.slow
def test_a_finished_run_directory_is_not_overwritten_unless_asked(tmp_path):
    """A launch into the directory of a run that has ended is refused in one line naming hydra.run.dir and the
    result it holds (exit 2), leaving that result as it was; overwrite=true replaces it. The ended run is made in
    this process (the launches are what is tested)."""
    from tests.conftest import run_launch

    assert run_inprocess(tmp_path, QUICK).status == "ok"
    first = (tmp_path / "result.json").read_text()
    proc = run_launch(tmp_path, *QUICK)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"invalid: hydra.run.dir={tmp_path}: holds the finished result {tmp_path}/result.json; "
                                   "choose another directory, or pass overwrite=true to replace it")
    assert (tmp_path / "result.json").read_text() == first
    assert run_launch(tmp_path, *QUICK, "overwrite=true").returncode == 0
    assert (tmp_path / "result.json").read_text() != first


@pytest.mark.slow
def test_a_finished_sweep_directory_is_not_overwritten_unless_asked(tmp_path):
    def sweep(*extra):
        return subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={tmp_path}",
                               "training.max_steps=3,4", "benchmark.warmup_steps=1", "training.optimizer.warmup_steps=1",
                               "training.seq_length=64", "logging.wandb.mode=disabled", "resume_from=null", *extra],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)

    assert sweep().returncode == 0 and len(list(tmp_path.glob("*/result.json"))) == 2
    proc = sweep()
    assert proc.returncode == 2 and "invalid: hydra.sweep.dir=" in proc.stderr and "overwrite=true" in proc.stderr
    assert sweep("overwrite=true").returncode == 0


@pytest.mark.slow
def test_a_claim_dies_with_its_process(tmp_path):
    from tprimat.execute.claim import DirectoryClaimed, claim

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from tprimat.execute.claim import claim; h = claim(Path(sys.argv[1])); "
                               "print('held', flush=True); time.sleep(60)", str(tmp_path)],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(DirectoryClaimed, match=f"pid {holder.pid} on "):
        claim(tmp_path)
    holder.kill()
    holder.wait()
    claim(tmp_path).close()  # SIGKILL left no stale claim


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB tmpfs (root only; skipped where mounting is not allowed), unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.slow
def test_a_read_only_output_disk_is_one_line_and_exit_1(small_disk):
    from tests.conftest import run_launch

    assert subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], capture_output=True).returncode == 0
    proc = run_launch(small_disk.parent, f"hydra.run.dir={small_disk}/run", *QUICK)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert proc.stderr.strip() == f"cannot use hydra.run.dir={small_disk}/run: [Errno 30] Read-only file system: " \
                                  f"'{small_disk}/run'"


@pytest.mark.slow
def test_a_full_output_disk_keeps_the_steps_and_is_one_line(small_disk):
    from tests.conftest import run_launch

    run = small_disk / "run"
    filler = small_disk / "filler"
    # leave 32 KiB: Hydra's 3 config files, the lock, the log and steps.jsonl (4 KiB pages each), not result.json
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1k", f"count={1024 - 32}"], capture_output=True)
    proc = run_launch(small_disk.parent, f"hydra.run.dir={run}", *QUICK)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in output, output[-3000:]
    assert "cannot write the ok result to" in output and "No space left on device" in output
    assert len(read_steps(run)[1]) == 4 and not (run / "result.json").exists()
    filler.unlink()  # space again: the result is rebuilt from the steps
    rebuilt = subprocess.run([sys.executable, "-m", "tprimat.cli", "check", "--rebuild", str(run)],
                             capture_output=True, text=True)
    assert rebuilt.returncode == 0 and read_result(run)["status"] == "failed" and len(read_result(run)["steps"]) == 4
