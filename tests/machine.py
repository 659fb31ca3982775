"""What the suite needs from the machine beyond what the README's first command installs, set up by the suite itself
once per test run, before any test runs (``tests/conftest.py``: ``pytest_sessionstart``), so that the README's test
command is green on a fresh machine whatever order the tests run in:

- Debian's Slurm, munge, MariaDB and iproute2 (``scripts/slurm_cluster.py``'s ``PACKAGES``): the private clusters of
  ``tests/test_slurm_nodes.py`` and submitit's Slurm executor in ``tests/test_sweep.py``;
- Debian's ``chromium``: ``tests/test_report_html.py`` opens report.html in it, headless;
- DeepSpeed's CPU communication op (``deepspeed_shm_comm``, C++ through torch's JIT loader, about 30 s on 2 cores),
  built in a process of its own beside the first tests (a DeepSpeed test that starts before it is done waits on
  torch's own build lock, then loads it), not in front of them.

Packages are installed as root on a Debian machine (one ``apt-get update``, one ``apt-get install``); elsewhere the
tests that need them skip, saying why. Each step's outcome and time is printed at the end of the run.
"""

from __future__ import annotations

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


def prepare() -> tuple[list[str], subprocess.Popen]:
    """The packages, once (one line with its time), and DeepSpeed's op building in a process of its own, which
    prints its outcome and time (``finished``)."""
    start = time.monotonic()
    wanted = missing_packages()
    why = apt_install(wanted) if wanted else None
    line = (f"packages: {', '.join(wanted) if wanted else 'nothing to install'}: "
            f"{why or ('installed' if wanted else 'ready')} ({time.monotonic() - start:.0f} s)")
    build = ("import time; from tests.machine import deepspeed_op; start = time.monotonic(); "
             "print(f'deepspeed cpu op: {deepspeed_op()} ({time.monotonic() - start:.0f} s, beside the tests)')")
    return [line], subprocess.Popen([sys.executable, "-c", build], cwd=Path(__file__).resolve().parent.parent,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def finished(build: subprocess.Popen) -> str:
    """The op build's line, once it has ended."""
    out, _ = build.communicate()
    lines = [line for line in out.splitlines() if line.startswith("deepspeed cpu op:")]
    return lines[-1] if lines else f"deepspeed cpu op: the build exited {build.returncode} without a word"
