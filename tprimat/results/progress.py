"""Progress on long work (a sweep's points, a batch of logs, a measured projection's runs): a rich progress bar
on stderr when it is a terminal, nothing otherwise (CI logs, pipes, files stay clean)."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def progress(total: int, what: str) -> Iterator[Callable[[str], None]]:
    """Yields ``advance(label)``: one item of ``total`` done, ``label`` the one being worked on next."""
    if total < 2 or not sys.stderr.isatty():
        yield lambda label="": None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda label="": bar.update(task, advance=1, description=f"{what} {label}".strip())
