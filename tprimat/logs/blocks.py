"""A long log read in blocks of whole lines, its uniform step blocks read as tables by worker processes.

Reading a block as a table (a format's ``read_table``) is a function of the block alone and most of the work of
parsing a long log; offering the table's steps (``offer_table``: which rank's copy a step is, what a memory
report waits for) depends on every block before it. So ``with_tables`` has worker processes read the tables of
the blocks ahead while the parser offers them one by one in the file's order: the same steps as reading every
block in one process, on as many cores as the machine lends. A worker that dies, or raises, costs only speed:
its blocks are read by the parser itself.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterator, Optional, TextIO

from tprimat.logs.stream import UNREAD

BLOCK_CHARS = 1 << 20
PARALLEL_MIN_BLOCKS = 8  # a shorter log is read in one process: starting the workers would cost more
MAX_WORKERS = 4  # beyond this the parser's own ordered offering is the bottleneck
AHEAD = 3  # blocks in flight per worker (each one held twice: here and in its worker)


def line_blocks(f: TextIO, block_chars: int = BLOCK_CHARS) -> Iterator[str]:
    """The text of ``f`` in blocks of whole lines, about ``block_chars`` each; the last one ends without a line
    end when the file does."""
    carry = ""
    for block in iter(lambda: f.read(block_chars), ""):
        block = carry + block
        cut = block.rfind("\n") + 1
        carry = block[cut:]
        if cut:
            yield block[:cut]
    if carry:
        yield carry


def workers_for(f: TextIO, block_chars: int = BLOCK_CHARS) -> int:
    """How many worker processes read the tables of ``f``: one per core this process may run on (at most
    ``MAX_WORKERS``), none for a stream that is no file, a short file or a single core, or where processes
    cannot be forked."""
    try:
        size = os.fstat(f.fileno()).st_size
    except (AttributeError, OSError, ValueError):  # io.StringIO, a pipe's unsupported fileno
        return 0
    if size < PARALLEL_MIN_BLOCKS * block_chars or "fork" not in multiprocessing.get_all_start_methods():
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cores, MAX_WORKERS) if cores > 1 else 0


def with_tables(blocks: Iterator[str], read: Optional[Callable[[str], object]], workers: int
                ) -> Iterator[tuple[str, object]]:
    """Each block with its table as ``read`` reads it (None: not a table), ``workers`` processes reading ahead,
    in the blocks' order; ``UNREAD`` for a block no worker read (no reader, no workers, a block without a line
    end, a worker lost): the parser reads it itself."""
    if read is None or workers < 1:
        yield from ((block, UNREAD) for block in blocks)
        return
    pool: Optional[ProcessPoolExecutor] = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    pending: deque[tuple[str, Optional[Future]]] = deque()
    try:
        for block in blocks:
            future = None
            if pool is not None and block.endswith("\n"):
                try:
                    future = pool.submit(read, block)
                except BrokenProcessPool:  # a worker was lost: the parser reads the rest itself
                    pool.shutdown(wait=True, cancel_futures=True)  # workers joined: none left behind
                    pool = None
            pending.append((block, future))
            if len(pending) > AHEAD * workers:
                yield _done(*pending.popleft())
        while pending:
            yield _done(*pending.popleft())
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)  # workers joined: none left behind


def _done(block: str, future: Optional[Future]) -> tuple[str, object]:
    if future is None:
        return block, UNREAD
    try:
        return block, future.result()
    except Exception:  # a worker lost (BrokenProcessPool) or a table it could not read: the parser reads it
        return block, UNREAD
