"""Progress on long work (a sweep's points, a batch of logs, a deep check's stages, a measured projection's runs):
a rich progress bar on stderr when it is a terminal, nothing otherwise (CI logs, pipes, files stay clean). Work
inside work (a deep check's stages inside a sweep's points) adds its own line to the bar already shown: rich
allows one live display at a time."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator

_shown: list = []  # the live rich Progress while one is on screen


@contextmanager
def progress(total: int, what: str) -> Iterator[Callable[[str], None]]:
    """Yields ``advance(label)``: one item of ``total`` done, ``label`` the one being worked on next."""
    if total < 2 or not sys.stderr.isatty():
        yield lambda label="": None
        return
    if _shown:
        with _task(_shown[-1], total, what) as advance:
            yield advance
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as bar:
        _shown.append(bar)
        try:
            with _task(bar, total, what) as advance:
                yield advance
        finally:
            _shown.pop()


@contextmanager
def _task(bar, total: int, what: str) -> Iterator[Callable[[str], None]]:
    task = bar.add_task(what, total=total)
    try:
        yield lambda label="": bar.update(task, advance=1, description=f"{what} {label}".strip())
    finally:
        bar.remove_task(task)
