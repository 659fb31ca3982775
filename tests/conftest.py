"""Shared helpers: compose configs with Hydra, run benchmarks in-process or as a real subprocess."""

from __future__ import annotations

import collections
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tprimat.compose import compose, hydra_compose
from tprimat.execute.run import execute
from tprimat.results.result import validate_result

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"

# Fast settings for tests that train: few steps, no W&B unless a test asks for it.
QUICK = ["training.max_steps=4", "benchmark.warmup_steps=1", "logging.wandb.mode=disabled", "training.seq_length=64"]


def compose_config(overrides=()):
    """The composed DictConfig (tests that read Hydra's composition itself)."""
    return hydra_compose(list(overrides))


def run_inprocess(tmp_path: Path, overrides=()):
    """Compose + execute exactly as launch.py does, in this process; the result must match the schema."""
    outcome = execute(compose(list(overrides)), tmp_path, list(overrides))
    assert validate_result(outcome.result) == [], validate_result(outcome.result)
    return outcome


def run_launch(tmp_path: Path, *overrides: str, env=None, timeout=300) -> subprocess.CompletedProcess:
    """``python launch.py`` as a user runs it, with Hydra's run directory under tmp_path."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "launch.py"), f"hydra.run.dir={tmp_path}", *overrides],
                          cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=full_env)


def once_per_run(tmp_path_factory, name: str, make):
    """A session fixture's value made once for the whole test run. Under pytest-xdist each worker is a session
    of its own, so the first worker to ask makes it in the run's shared temporary folder, under a file lock, and
    the others read it back (pytest-xdist's recipe); ``make(folder)`` returns JSON."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return make(tmp_path_factory.mktemp(name))
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent
    with FileLock(str(shared / f"{name}.lock")):
        made = shared / f"{name}.json"
        if not made.exists():  # a worker whose make() failed left no file: the next one tries again, in a clean folder
            (shared / name).mkdir(exist_ok=True)
            made.write_text(json.dumps(make(shared / name)))
        return json.loads(made.read_text())


@pytest.fixture(scope="session")
def default_run(tmp_path_factory):
    """The README's main job (defaults: llama_tiny, native, W&B offline), run once for several tests."""
    def make(run_dir):
        proc = run_launch(run_dir, env={"WANDB_API_KEY": "sk-test-secret-0123456789", "HF_TOKEN": "hf_test_secret_987"})
        return {"dir": str(run_dir), "args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout,
                "stderr": proc.stderr}

    made = once_per_run(tmp_path_factory, "default_run", make)
    return Path(made["dir"]), subprocess.CompletedProcess(made["args"], made["returncode"], made["stdout"],
                                                          made["stderr"])


@pytest.fixture(scope="session")
def compiled_run(tmp_path_factory):
    """One cold torch.compile run of llama_tiny (whatever earlier runs left in inductor's on-disk caches), in
    reduce-overhead mode, which asks for CUDA graphs: read by the tests of the compile path (its cost stays in
    the warm-up; on a CPU inductor compiles the blocks without graphs). Compiling costs tens of seconds: once."""
    def make(folder):
        import torch._inductor.config as inductor
        from torch._dynamo.utils import counters

        graphs = counters["stats"]["unique_graphs"]
        with inductor.patch(force_disable_caches=True):
            out = run_inprocess(folder, [
                "training.compile=true", "training.compile_mode=reduce-overhead", "training.max_steps=4",
                "benchmark.warmup_steps=1", "training.optimizer.warmup_steps=1", "logging.wandb.mode=disabled",
                "benchmark.telemetry=false"])
        assert out.status == "ok", out.result["error"]
        return {**out.result, "dynamo_graphs": counters["stats"]["unique_graphs"] - graphs}  # dynamo's own count

    return once_per_run(tmp_path_factory, "compiled", make)


def cores_per_worker() -> int:
    """Each of pytest-xdist's workers gets its share of the cores for torch's threads, in this process and in the
    processes it starts (OMP_NUM_THREADS): two workers of two threads each on two cores oversubscribe them, and
    spinning OpenMP threads then slow every tiny step many times over."""
    return max(1, cores() // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def cores() -> int:
    """The cores this process may run on (its affinity, which a container's cpuset narrows), not the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def use_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)


def pytest_configure(config):
    if "PYTEST_XDIST_WORKER" in os.environ:
        use_threads(cores_per_worker())


TIMELINE = os.environ.get("TPRIMAT_TESTS_TIMELINE")  # a file for one line a test (``timeline``), or None
ALONE = [False]  # whether the test running in this worker holds the machine alone (an ``exclusive`` test)


def running_alone() -> bool:
    """True inside an ``exclusive`` test (its fixtures' set-up included), or with no pytest-xdist at all."""
    return ALONE[0] or "PYTEST_XDIST_TESTRUNUID" not in os.environ


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Two pytest-xdist workers share the cores (pyproject's addopts). A test marked ``exclusive`` (a time budget, a
    real slowdown on half the cores) runs with no other test beside it: every test holds one lock file for
    its setup, call and teardown, shared, and an exclusive test holds it alone."""
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if uid is None:
        yield
        return
    wait_for_the_set_up(item)  # before the lock: a test waiting there would hold up an exclusive one, and every worker
    folder = Path(tempfile.gettempdir())
    # a turnstile before the lock: an exclusive test waiting for it stops new shared holders (Linux flock would
    # otherwise keep granting shared locks while an exclusive one waits, and the exclusive test could starve)
    with open(folder / f"tprimat-tests-{uid}.turnstile", "a") as turnstile, \
            open(folder / f"tprimat-tests-{uid}.lock", "a") as lock:
        exclusive = item.get_closest_marker("exclusive") is not None
        ALONE[0] = exclusive
        asked = time.time()
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        else:  # alone on the machine: every core
            use_threads(cores())
        started, cpu = time.time(), cpu_s() if TIMELINE else 0.0
        try:
            yield
        finally:
            if exclusive:
                use_threads(cores_per_worker())
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            if TIMELINE:
                timeline(item.nodeid, exclusive, asked, started, time.time(), cpu_s() - cpu)


def cpu_s() -> float:
    """CPU seconds of this worker and of the processes it started and waited for (``subprocess.run``'s)."""
    import resource

    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF,
                                                                          resource.RUSAGE_CHILDREN)))


def timeline(test: str, exclusive: bool, asked: float, started: float, ended: float, cpu: float) -> None:
    """With TPRIMAT_TESTS_TIMELINE=FILE: one JSON line a test (its worker, when it asked for the lock, got it and
    ended, epoch seconds; the CPU seconds it took, its children's included), appended: where a run's wall time goes
    (``python -m tests.timeline FILE`` sums it up)."""
    with open(TIMELINE, "a") as out:
        out.write(json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER"), "test": test, "exclusive": exclusive,
                              "asked": asked, "started": started, "ended": ended, "cpu_s": cpu}) + "\n")


MACHINE: list = []  # the set-up's process (tests/machine.py), in the run's first process: its lines end the run


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """Once per test run (in pytest-xdist's controller, before its workers start): what the suite needs beyond the
    README's first command (tests/machine.py), set up in a process of its own while the tests run; a test marked
    ``machine`` waits for it."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        return
    compile_the_project()
    if os.environ.get("TPRIMAT_TESTS_NO_SETUP"):
        return
    from tests import machine

    MACHINE.append(machine.start(Path(tempfile.mkdtemp(prefix="tprimat_machine_"))))


PACKAGES = ("tprimat", "scripts", "bench", "hydra_plugins", "tests")  # what the suite's processes import from the tree


def compile_the_project() -> None:
    """The project's own modules compiled to bytecode once, before the workers start. An environment that sets
    PYTHONDONTWRITEBYTECODE (the project's development machine does) never writes it, so each of the suite's 200-odd Python
    processes (``launch.py``, ranks, ``python -m tprimat``) compiled the modules it imports again: 0.16 s of each
    launch's CPU (2026-11-29). Bytecode that exists is read whatever that variable says; pip compiles what it
    installs in site-packages the same way."""
    import compileall

    for package in PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=2)


def wait_for_the_set_up(item) -> None:
    """A test marked ``machine`` waits for the set-up's step it needs; an ``exclusive`` test for the whole set-up
    (apt's unpacking and the op's compiler would run beside it, on the cores it times)."""
    marker = item.get_closest_marker("machine")
    if marker is not None or item.get_closest_marker("exclusive") is not None:
        from tests import machine

        machine.wait(*(marker.args if marker is not None else ()))


def pytest_runtest_setup(item):
    if "PYTEST_XDIST_TESTRUNUID" not in os.environ:  # one process: no lock, so no protocol hook's wait before it
        wait_for_the_set_up(item)


def pytest_terminal_summary(terminalreporter):
    if not MACHINE:
        return
    from tests import machine

    MACHINE[0].wait()
    try:
        lines = machine.wait()
    except RuntimeError as exc:  # the set-up was killed (out of memory, a signal): said, not an internal error
        lines = [str(exc)]
    for line in lines:
        terminalreporter.write_line(f"machine set-up (tests/machine.py): {line}")
    shutil.rmtree(os.environ[machine.FOLDER_ENV], ignore_errors=True)


# files whose tests mostly wait (Slurm's daemons, its node timeouts, jobs on network namespaces): handed out first, so
# that their waiting overlaps the other worker's work. Handed out last (pytest-xdist's order: most tests first), the
# Slurm file ran 325 s after every other file had ended on the other worker, which sat idle for 97 s of it
# (``python -m tests.timeline``, 2026-11-29)
WAITING_FIRST = ("test_slurm_nodes.py",)


def pytest_collection_modifyitems(config, items):
    """Files in the order pytest-xdist hands them out (pyproject's ``--no-loadscope-reorder``): ``WAITING_FIRST``,
    then most tests first, as pytest-xdist itself orders them. ``gpu`` tests need a CUDA/ROCm device: skipped, with
    the reason, where there is none."""
    import torch

    tests_in = collections.Counter(item.path.name for item in items)
    items.sort(key=lambda item: (item.path.name not in WAITING_FIRST, -tests_in[item.path.name], item.path.name))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA/ROCm GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
