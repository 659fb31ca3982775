"""What the suite needs from the machine beyond what the README's first command installs, set up by the suite itself
once per test run (``tests/conftest.py``: ``pytest_sessionstart``), so that the README's test command is green on a
fresh machine whatever order the tests run in:

- Debian's Slurm, munge, MariaDB and iproute2 (``scripts/slurm_cluster.py``'s ``PACKAGES``): the private clusters of
  ``tests/test_slurm_nodes.py`` and submitit's Slurm executor in ``tests/test_sweep.py``;
- Debian's ``chromium``: ``tests/test_report_html.py`` opens report.html in it, headless;
- DeepSpeed's CPU communication op (``deepspeed_shm_comm``, C++ through torch's JIT loader, about 30 s on 2 cores),
  which the first DeepSpeed engine on a machine would otherwise build in the middle of a test.

Packages are installed as root on a Debian machine (one ``apt-get update``, one ``apt-get install``); elsewhere the
tests that need them skip, saying why. Each step's outcome and time is printed at the end of the run.

The set-up runs in a process of its own beside the tests (``start``): apt's downloads and the op's compiler would
otherwise hold every worker for their whole time before the first test. A test marked ``machine`` waits for the
step it needs (``wait``, from ``tests/conftest.py``, before the test lock) before it looks for what it needs:
``machine("packages")`` for Slurm or chromium, ``machine`` for DeepSpeed's op too. A DeepSpeed engine not so marked is
safe as well: torch's extension loader holds a lock while one process builds the op, and the others wait on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from scripts import slurm_cluster
from scripts.slurm_cluster import PACKAGES

SLURM_BINARIES = ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "sbatch", "srun", "ip", "tc")
NOT_ROOT = "not root on a Debian machine (apt-get): the suite installs it only as root"


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing_packages() -> list[str]:
    slurm = [] if all(shutil.which(b) for b in SLURM_BINARIES) else PACKAGES
    return slurm + ([] if chromium() else ["chromium"])


def apt_install(packages: list[str]) -> str | None:
    """Debian's packages installed as root (scripts/slurm_cluster.py's ``apt_install``); None when done, else why not."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return NOT_ROOT
    return slurm_cluster.apt_install(packages)


def deepspeed_op() -> str:
    """DeepSpeed's CPU communication op built into torch's extension cache (a no-op when it is there)."""
    try:
        from deepspeed.comm.torch import build_shm_op
    except ImportError as exc:
        return f"not built: deepspeed does not import ({exc})"
    try:
        return "built" if build_shm_op() is not None else "not used on this machine"
    except Exception as exc:  # noqa: BLE001 - a compiler missing here: the DeepSpeed tests say so themselves
        return f"not built: {type(exc).__name__}: {str(exc)[:200]}"


def packages() -> str:
    start = time.monotonic()
    wanted = missing_packages()
    why = apt_install(wanted) if wanted else None
    return (f"packages: {', '.join(wanted) if wanted else 'nothing to install'}: "
            f"{why or ('installed' if wanted else 'ready')} ({time.monotonic() - start:.0f} s)")


def op() -> str:
    start = time.monotonic()
    return f"deepspeed cpu op: {deepspeed_op()} ({time.monotonic() - start:.0f} s)"


STEPS = {"packages": packages, "deepspeed_op": op}  # in the order the set-up takes them; machine("packages") waits
                                                    # for the first only
FOLDER_ENV, PID_ENV = "TPRIMAT_TESTS_MACHINE", "TPRIMAT_TESTS_MACHINE_PID"  # read by the processes the run starts
WAIT_S = 1800  # apt's downloads on a slow mirror, then the op's compile on a busy machine


def start(folder: Path) -> subprocess.Popen:
    """The set-up in a process of its own: each step's line lands in ``folder``/<step>.json as the step ends;
    ``FOLDER_ENV`` names the folder to this process and those it starts (pytest-xdist's workers)."""
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen([sys.executable, "-m", "tests.machine", str(folder)], cwd=root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # a Ctrl-C of the run stops the tests,
    # not apt halfway through an install
    os.environ[FOLDER_ENV], os.environ[PID_ENV] = str(folder), str(proc.pid)
    return proc


def wait(step: str = "deepspeed_op") -> list[str]:
    """The set-up's lines once ``step`` (and every step before it) has ended; [] where this run started none
    (``TPRIMAT_TESTS_NO_SETUP``)."""
    folder = os.environ.get(FOLDER_ENV)
    if not folder:
        return []
    names = list(STEPS)
    files = [Path(folder) / f"{name}.json" for name in names[:names.index(step) + 1]]
    deadline = time.monotonic() + WAIT_S
    while not all(f.exists() for f in files):
        if not running(int(os.environ[PID_ENV])) and not all(f.exists() for f in files):  # it may end just after writing
            raise RuntimeError(f"the suite's set-up (tests/machine.py) ended without its {step} step")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the suite's set-up (tests/machine.py) did not reach its {step} step in {WAIT_S} s")
        time.sleep(0.5)
    return [json.loads(f.read_text()) for f in files]


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, ended but not yet reaped by the run's first process, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def main(folder: Path) -> None:
    for step, run in STEPS.items():
        try:
            line = run()
        except Exception as exc:  # noqa: BLE001 - said at the end of the run; the tests that need it skip, naming it
            line = f"{step}: failed: {type(exc).__name__}: {exc}"
        partial = folder / f"{step}.json.partial"
        partial.write_text(json.dumps(line))
        partial.replace(folder / f"{step}.json")  # whole or absent: a waiting test never reads half of it


if __name__ == "__main__":
    main(Path(sys.argv[1]))
