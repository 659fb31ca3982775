"""What the suite needs from the machine beyond what the README's first command installs, set up by the suite itself
once per test run, before any test runs (``tests/conftest.py``: ``pytest_sessionstart``), so that the README's test
command is green on a fresh machine whatever order the tests run in:

- Debian's Slurm, munge, MariaDB and iproute2 (``scripts/slurm_cluster.py``'s ``PACKAGES``): the private clusters of
  ``tests/test_slurm_nodes.py`` and submitit's Slurm executor in ``tests/test_sweep.py``;
- Debian's ``chromium``: ``tests/test_report_html.py`` opens report.html in it, headless;
- DeepSpeed's CPU communication op (``deepspeed_shm_comm``, C++ through torch's JIT loader, about 30 s on 2 cores),
  which the first DeepSpeed engine on a machine would otherwise build in the middle of a test.

Packages are installed as root on a Debian machine (one ``apt-get update``, one ``apt-get install``); elsewhere the
tests that need them skip, saying why. Each step's outcome and time is printed at the end of the run.
"""

from __future__ import annotations

import os
import shutil
import time

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


def prepare() -> list[str]:
    """Everything above, once; one line per step with its time."""
    lines = []
    start = time.monotonic()
    wanted = missing_packages()
    why = apt_install(wanted) if wanted else None
    lines.append(f"packages: {', '.join(wanted) if wanted else 'nothing to install'}: "
                 f"{why or ('installed' if wanted else 'ready')} ({time.monotonic() - start:.0f} s)")
    start = time.monotonic()
    lines.append(f"deepspeed cpu op: {deepspeed_op()} ({time.monotonic() - start:.0f} s)")
    return lines
