"""One run per directory: a run or sweep directory is claimed with an exclusive lock on ``.tprimat.lock``
(``flock``: released by the kernel when the process ends, however it ends, so a crash leaves no stale claim).
A second launch into a claimed directory is refused before it writes anything there."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path
from typing import IO

LOCK_FILE = ".tprimat.lock"


class DirectoryClaimed(RuntimeError):
    pass


def claim(directory: Path, overwrite: bool = False) -> IO:
    """The open, locked lock file (keep it open for as long as the directory is in use). A directory that holds a
    finished result (a run's ``result.json``, or a sweep point's) is refused unless ``overwrite``."""
    directory.mkdir(parents=True, exist_ok=True)
    handle = open(directory / LOCK_FILE, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise DirectoryClaimed(f"in use by another tprimat run ({holder}); choose another directory") from None
    finished = next(iter(sorted(directory.glob("result.json")) + sorted(directory.glob("*/result.json"))), None)
    if finished is not None and not overwrite:
        handle.close()
        raise DirectoryClaimed(f"holds the finished result {finished}; choose another directory, or pass "
                               "overwrite=true to replace it")
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
    handle.flush()
    return handle
