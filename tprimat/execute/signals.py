"""SIGTERM and SIGINT (Slurm's preemption, a scheduler's kill, Ctrl-C) as an exception in the main thread, so
a run that is stopped ends like one that broke: a ``failed`` result that names the signal and keeps every step
measured before it, and local ranks stopped on the way out."""

from __future__ import annotations

import contextlib
import signal
import threading

STOPPING = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """Raised by the handler; a BaseException, like KeyboardInterrupt, so that a backend's broad
    ``except Exception`` cannot swallow it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


def _raise(signum: int, frame) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_raise():
    """Within the block, SIGTERM and SIGINT raise ``Interrupted`` (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOPPING}
    for s in STOPPING:
        signal.signal(s, _raise)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
