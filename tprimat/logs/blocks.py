"""A long log read in blocks of whole lines, its uniform step blocks read as tables by worker processes.

Reading a block as a table (a format's ``block_table``) is a function of the block alone and most of the work
of parsing a long log; offering the table's steps (``feed_table``: which rank's copy a step is, what a memory
report waits for) depends on every block before it. So ``with_tables`` has worker processes read the blocks
ahead, each from the file itself (a block travels as its byte range), while the parser offers their tables one
by one in the file's order, and reads the text of a block only where it takes it line by line: the same steps as
one process reading every block, on as many cores as the machine lends. A worker that dies, or raises, costs
only speed: its blocks are read by the parser itself.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Callable, Iterator, NamedTuple, TextIO

from tprimat.logs.stream import UNREAD

BLOCK_CHARS = 1 << 20
LINE_WINDOW = 1 << 12  # bytes looked at, at a time, for the line end that closes a block
PARALLEL_MIN_BLOCKS = 8  # a shorter log is read in one process: starting the workers would cost more
MAX_WORKERS = 4  # the parser offers tables at about 4 x the rate one worker reads them (0.4 s vs 1.5 s per 100 MB)


class FileBlock(NamedTuple):
    """Bytes ``start`` to ``end`` of a UTF-8 file, whole lines (the last block may end without a line end)."""

    path: str
    start: int
    end: int

    def raw(self) -> bytes:
        with open(self.path, "rb") as f:
            return os.pread(f.fileno(), self.end - self.start, self.start)

    def text(self) -> str:
        """The block as ``open(path, errors="replace")`` reads it: decoded, ``\\r\\n`` and ``\\r`` as line ends."""
        text = self.raw().decode("utf-8", "replace")
        return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


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


def file_blocks(path: str, block_bytes: int = BLOCK_CHARS) -> Iterator[FileBlock]:
    """The file (as long as it is now) in blocks of whole lines, each about ``block_bytes``: a block ends after
    the first line end at or past its nominal end."""
    with open(path, "rb") as f:
        fd, size = f.fileno(), os.fstat(f.fileno()).st_size
        start = 0
        while start < size:
            end = start + block_bytes
            while end < size:
                cut = os.pread(fd, LINE_WINDOW, end).find(b"\n")
                if cut >= 0:
                    end += cut + 1
                    break
                end += LINE_WINDOW
            yield FileBlock(path, start, min(end, size))
            start = min(end, size)


def workers_for(size: int, block_bytes: int = BLOCK_CHARS) -> int:
    """How many worker processes read the tables of a file of ``size`` bytes: one per core this process may run
    on (at most ``MAX_WORKERS``); none for a short file, a single core, or where processes cannot be forked."""
    if size < PARALLEL_MIN_BLOCKS * block_bytes or "fork" not in multiprocessing.get_all_start_methods():
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cores, MAX_WORKERS) if cores > 1 else 0


def with_tables(blocks: Iterator[FileBlock], read: Callable[[str], object], workers: int
                ) -> Iterator[tuple[FileBlock, object]]:
    """Each block with its table as ``read`` reads the block's text (None: not a table), in the blocks' order.
    ``workers`` forked processes read them ahead, worker k every workers-th block from the k-th, each sending its
    tables back in order through its own pipe (a full pipe holds a worker back: a table or two in flight each);
    ``UNREAD`` for a block no worker read (its worker lost): the parser reads it itself."""
    blocks = list(blocks)  # byte ranges: a few hundred bytes per megabyte of log
    context = multiprocessing.get_context("fork")
    pipes: list = []
    processes = []
    try:
        # Ctrl-C is held while the workers start (a fork it interrupted would leave a child nobody knows of) and
        # arrives once they all have: the finally below then stops every one
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for k in range(workers):
                receive, send = context.Pipe(duplex=False)
                pipes.append(receive)
                process = context.Process(target=_serve, args=(read, blocks[k::workers], send), daemon=True)
                processes.append(process)
                process.start()
                send.close()  # the worker's end: its exit closes the pipe, and a lost worker reads as EOF
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for i, block in enumerate(blocks):
            table, pipe = UNREAD, pipes[i % workers]
            if pipe is not None:
                try:
                    table = pipe.recv()
                except (EOFError, OSError):  # the worker was lost: the parser reads its blocks itself
                    pipes[i % workers] = None
            yield block, table
    finally:
        for process in processes:
            if process.pid is None:  # interrupted before it started
                continue
            if process.is_alive():
                process.kill()  # the parse stopped early: a worker waiting to send is not waited for
            process.join()
        for pipe in pipes:
            if pipe is not None:
                pipe.close()


def _serve(read: Callable[[str], object], blocks: list[FileBlock], send) -> None:
    """A worker: its blocks' tables, sent in order (``UNREAD`` for a block whose reading raised). Ctrl-C reaches
    the whole process group: the parser stops the workers itself, so a worker ignores it (no traceback of its
    own)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # forked while the parser held Ctrl-C
    for block in blocks:
        try:
            table = read(block.text())
        except Exception:  # noqa: BLE001 - the parser reads this block itself, as in one process
            table = UNREAD
        send.send(table)
    send.close()
