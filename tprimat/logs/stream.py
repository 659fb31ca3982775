"""The stateful stream parser every log format shares: fed one raw line at a time, by ``tprimat ingest``
(a whole file) and by the live external backends (a process's output) alike, so both give the same records.

A step is a dict keyed by tprimat's step-record names (step, loss, lr, grad_norm, step_time_s, memory_gib,
peak_memory_gib) plus ``reported``: what the framework printed for it. A step is held until a line of another
step (or ``finish()``) completes it, so that lines that follow it (Megatron's memory report, DeepSpeed's timer
and loss lines) and the same step printed by other ranks are attached first. Among ranks, rank 0's values are
the step's (the first printing rank's when rank 0 never prints it); every rank's step time is kept
(``reported.step_time_s_by_rank``) for the spread.

Parsers never raise on bad input: a line they cannot read is skipped.
"""

from __future__ import annotations

import bisect
import operator
import re
from operator import itemgetter
from typing import TYPE_CHECKING, Callable, Optional

from tprimat.logs import facts as facts_mod
from tprimat.logs.clean import PLAIN_LABEL, Line, clean
from tprimat.logs.perkey import PerKey

if TYPE_CHECKING:
    from tprimat.logs.stepcolumns import StepColumns

FAILURE_WORDS = ("Traceback (most recent call last)", "ChildFailedError", "OutOfMemoryError", "NCCL Error",
                 "SIGABRT", "Segmentation fault", "[ERROR]")
NONZERO_EXIT = re.compile(r"[Ee]xited with (exit )?code -?[1-9]")
EXCERPT_LINES = 20
UNREAD_EXAMPLES, UNREAD_EXAMPLE_CHARS = 3, 200  # source.unparsed_examples: the first 3, cut to 200 characters
class _Unread:
    """``UNREAD``: pickled by name, so that a worker process's UNREAD is this process's."""

    def __reduce__(self) -> str:
        return "UNREAD"


UNREAD = _Unread()  # feed_block: the block's table is not read yet
MANGLED = (ValueError, TypeError, KeyError, IndexError, OverflowError, AttributeError, RecursionError,
           ZeroDivisionError)  # what a bad line raises
# A block holding any of these is read line by line: colour codes, carriage returns (progress bars; ``clean``
# drops them), fact-bearing lines (argument dumps, launcher command lines, model arguments) and failures need
# the full per-line path.
BLOCK_TRIGGERS = ("\x1b", "\r", " ...", "torchrun", "torch.distributed.run", "TransformerModelArgs(", "xited with",
                  *FAILURE_WORDS)


class StreamParser:
    format = ""
    FAST: Optional[re.Pattern] = None  # a step line from its marker to the line end (see ``feed_block``)
    MEANT: Optional[re.Pattern] = None  # a line meant as a step line (looser than what reads one): unread if unread

    def __init__(self) -> None:
        self.facts: facts_mod.Facts = {}
        self.extra: dict = {}  # format-specific run facts for the result's source section
        self.pending: Optional[Step] = None
        self.pending_rank: Optional[int] = None
        self.seen = Seen()  # steps already emitted: a later re-print is dropped
        self.failure: list[str] = []
        self.lines = 0
        self.unparsed_lines = 0  # lines recognised as step lines (``MEANT``) that could not be read
        self.unparsed_examples: list[str] = []

    # ------------------------------------------------------------ the interface
    def feed(self, raw: str) -> list[Step]:
        """One raw line (ANSI, prefixes and all) -> the steps it completes."""
        self.lines += 1
        line = clean(raw)
        if line.world is not None:
            facts_mod.state(self.facts, "world_size", line.world, "log: rank prefix rank-N/W")
        self._watch_failure(line.text)
        facts_mod.read_line(line.text, self.facts)
        try:
            return self.read(line)
        except MANGLED:  # a mangled line is skipped, never fatal, and counted when it was meant as a step line
            if self.meant(line.text):
                self.unread(line.text)
            return []

    def meant(self, text: str) -> bool:
        return self.MEANT is not None and self.MEANT.search(text) is not None

    def unread(self, text: str) -> None:
        """Count a line recognised as a step line that could not be read (``source.unparsed_lines``)."""
        self.unparsed_lines += 1
        if len(self.unparsed_examples) < UNREAD_EXAMPLES:
            self.unparsed_examples.append(text.strip()[:UNREAD_EXAMPLE_CHARS])

    def unread_if_meant(self, text: str) -> list[Step]:
        """``read``'s answer for a line its strict pattern did not match: nothing, counted if it was meant."""
        if self.meant(text):
            self.unread(text)
        return []

    def feed_block(self, block: str, table=UNREAD) -> list[Step]:
        """Many raw lines at once, ending at a line end: the same steps as feeding them one by one. A format
        with a ``FAST`` pattern (a step line from its marker to the line end; the marker starts with a literal,
        so the search runs at C speed) reads its step lines straight from the block, the text before the marker
        being the line's prefix; the lines between them, and any block holding a fact, a failure or colour, go
        line by line. A format that reads uniform blocks as a table (``block_table``) does that first (and
        searches only the texts it does not read as numbers for the words that send a block line by line).
        ``table``: the block's ``block_table``, when already read (by a worker process: ``parse_file``)."""
        if self.failure:  # from the first failure on, every line is kept for the excerpt
            return self._feed_lines(block)
        if table is UNREAD:
            table = self.block_table(block)
        if table is not None:
            return self.offer_table(table)
        if self.FAST is None or "\x1b" in block or "\r" in block:
            return self._feed_lines(block)
        if any(word in block for word in BLOCK_TRIGGERS):
            return self._feed_lines(block)
        steps, pos = [], 0
        for m in self.FAST.finditer(block):
            start = block.rfind("\n", pos, m.start()) + 1 or pos  # the step line's own start
            if start > pos:
                steps += self._feed_lines(block[pos:start])
            self.lines += 1
            try:
                steps += self.fast(m, block[start:m.start()], m.end() - start)
            except MANGLED:  # a mangled line is skipped, never fatal, and counted (as in ``feed``)
                self.unread(block[start:m.end()])
            pos = m.end()
        if pos < len(block):
            steps += self._feed_lines(block[pos:])
        return steps

    def _feed_lines(self, text: str) -> list[Step]:
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        steps: list[Step] = []
        for raw in lines:
            steps += self.feed(raw)
        return steps

    def feed_table(self, table) -> Optional[list[Step]]:
        """A block's ``block_table``, read elsewhere (a worker process): its steps, as ``feed_block`` gives them;
        None where the parser must read the block's lines instead (from the first failure on)."""
        return None if self.failure else self.offer_table(table)

    @classmethod
    def block_table(cls, block: str) -> Optional[object]:
        """``read_table`` of a block that may be read as a table at all (a format with a ``FAST`` pattern; no
        colour codes or carriage returns, which need ``clean``): a function of the block alone."""
        if cls.FAST is None or "\x1b" in block or "\r" in block:
            return None
        return cls.read_table(block)

    @staticmethod
    def read_table(block: str) -> Optional[object]:
        """A block of uniform step lines read as a table, or None: not such a block (or a format without a table
        reader), read by ``FAST`` instead. A function of the block alone, never of the parser's state: it may
        run in another process (``parse_file``)."""
        return None

    def offer_table(self, table) -> list[Step]:
        """A ``read_table`` table's steps, offered in order as its lines would be."""
        raise NotImplementedError

    def fast(self, match: re.Match, prefix: str, length: int) -> list[Step]:
        """One ``FAST`` match, the line's ``prefix`` before it and the whole line's ``length``."""
        raise NotImplementedError

    def prefix_rank(self, prefix: str) -> Optional[int]:
        """The rank (and world size) a step line's prefix names, as ``feed`` reads them."""
        if not prefix or prefix.isspace():
            return None
        if (m := PLAIN_LABEL.match(prefix)):  # the common "3:  [timestamp] " srun label, without ``clean``
            return int(m.group(1))
        line = clean(prefix)
        if line.world is not None:
            facts_mod.state(self.facts, "world_size", line.world, "log: rank prefix rank-N/W")
        return line.rank

    def finish(self) -> list[Step]:
        """The steps still held at the end of the stream."""
        return self.flush()

    @property
    def error(self) -> Optional[str]:
        return "\n".join(self.failure) if self.failure else None

    def read(self, line: Line) -> list[Step]:
        raise NotImplementedError

    # ------------------------------------------------------------ helpers for the formats
    def offer(self, step: Step, rank: Optional[int]) -> list[Step]:
        """A step line: merged into the held step when it is the same step (another rank), else it completes it.
        A step number below 0 (a corrupted counter: no run has one) is not a step; it is counted as unread."""
        key = step["step"]
        if key < 0:
            self.unread(f"step {key}: a negative step number")
            return []
        if key in self.seen:
            return []
        if self.pending is not None and self.pending["step"] == key:
            self._merge(step, rank)
            return []
        done = self.flush()
        self.pending, self.pending_rank = step, rank
        if rank is not None and step.get("step_time_s") is not None:
            step["reported"]["step_time_s_by_rank"] = {str(rank): step["step_time_s"]}
        return done

    def echo(self, key: int, rank: Optional[int]) -> bool:
        """Whether a line of step ``key`` from ``rank`` can only add that rank's step time: another rank's copy
        of the held step (rank 0's copy, when a later rank came first, replaces it instead), or a re-print."""
        if key in self.seen:
            return True
        held = self.pending
        return held is not None and held["step"] == key and not (rank == 0 and self.pending_rank not in (None, 0))

    def rank_time(self, key: int, rank: Optional[int], time_s: Optional[float]) -> None:
        """Another rank's step time for the held step (the cheap path of ``offer`` for an ``echo`` line)."""
        if key in self.seen:
            return
        by_rank = self.pending["reported"].setdefault("step_time_s_by_rank", {})
        if rank is not None and time_s is not None:
            by_rank.setdefault(str(rank), time_s)

    def offer_rows(self, keys: list[int], ranks: list, times: list, echo_times: list,
                   one: Callable[[int], Step], many: Callable[[slice], StepColumns]) -> list:
        """A table's step lines (``columns``), in order: the same steps as offering them one by one. Rows of a
        step already held or seen, and the last printed step, go one by one (``one(i)`` builds row i's step);
        between them, where every step is printed by the same ranks in the same order (one row each, step
        numbers increasing, each step new), all steps at once (``many(rows)`` builds the steps of rows
        ``rows``, a slice, as one ``StepColumns`` chunk; each step's rows are its ranks' copies,
        ``step_time_s_by_rank`` from ``times``)."""
        steps: list = []  # parsed steps and StepColumns chunks, in order
        n, start = len(keys), 0
        while start < n and (keys[start] in self.seen or (self.pending is not None and self.pending["step"] == keys[start])):
            steps += self.row(start, keys, ranks, echo_times, one)
            start += 1
        period = next((j for j in range(1, n - start) if keys[start + j] != keys[start]), n - start) or 1
        stop = start + period * ((n - start) // period - 1)  # the last whole step and what follows: one by one
        if stop > start and self.uniform_rows(keys, ranks, times, echo_times, start, stop, period):
            steps += self.flush()
            primary = ranks.index(0, start, start + period) - start \
                if 0 in ranks[start + 1:start + period] and ranks[start] not in (None, 0) else 0
            built = many(slice(start + primary, stop, period))
            if period > 1:
                built.reported["step_time_s_by_rank"] = PerKey(  # one more printed column, one per rank
                    (str(rank), times[start + j:stop:period]) for j, rank in enumerate(ranks[start:start + period]))
            self.seen.update(keys[start:stop:period])  # increasing: consecutive ones held as one range
            steps.append(built)
            start = stop
        for i in range(start, n):
            steps += self.row(i, keys, ranks, echo_times, one)
        return steps

    def uniform_rows(self, keys: list[int], ranks: list, times: list, echo_times: list, start: int, stop: int,
                     period: int) -> bool:
        """Whether rows ``start:stop`` are whole steps of ``period`` rows each, printed by the same distinct ranks
        in the same order, step numbers increasing and new, nothing held for them (memory reports), and the row
        after them a new step (which, line by line, is what completes the last of them)."""
        firsts = keys[start:stop:period]
        count = len(firsts)
        held = None if self.pending is None else self.pending["step"]  # done before them: as seen
        if not all(map(operator.lt, firsts, firsts[1:])) or not self.seen.none_of(firsts) or held in firsts \
                or self.memory_held(firsts):
            return False
        if keys[stop] <= firsts[-1] or keys[stop] in self.seen or keys[stop] == held:  # it completes the last one
            return False
        pattern = ranks[start:start + period]
        if any(keys[start + j:stop:period] != firsts or ranks[start + j:stop:period] != [pattern[j]] * count
               for j in range(period)):
            return False
        return period == 1 or (None not in pattern and len(set(pattern)) == period and echo_times is times
                               and None not in times[start:stop])

    def memory_held(self, keys: list[int]) -> bool:
        """Whether something printed before its step (a memory report) waits for one of these steps."""
        return False

    def row(self, i: int, keys: list[int], ranks: list, echo_times: list, one: Callable[[int], Step]) -> list[Step]:
        key, rank = keys[i], ranks[i]
        if self.echo(key, rank):
            self.rank_time(key, rank, echo_times[i])
            return []
        return self.offer(one(i), rank)

    def flush(self) -> list[Step]:
        if self.pending is None:
            return []
        step, self.pending = self.pending, None
        self.seen.add(step["step"])
        by_rank = step["reported"].get("step_time_s_by_rank")
        if by_rank is not None and len(by_rank) < 2:
            del step["reported"]["step_time_s_by_rank"]
        return [step]

    def _merge(self, step: Step, rank: Optional[int]) -> None:
        held = self.pending
        by_rank = held["reported"].setdefault("step_time_s_by_rank", {})
        if rank is not None and step.get("step_time_s") is not None:
            by_rank.setdefault(str(rank), step["step_time_s"])
        if rank == 0 and self.pending_rank not in (None, 0):  # rank 0's values are the step's
            kept = {k: held[k] for k in ("memory_gib", "peak_memory_gib") if held.get(k) is not None}
            step["reported"]["step_time_s_by_rank"] = by_rank
            self.pending, self.pending_rank = Step(step, **kept), 0

    def _watch_failure(self, text: str) -> None:
        if self.failure:
            if len(self.failure) < EXCERPT_LINES and text:
                self.failure.append(text)
        elif any(word in text for word in FAILURE_WORDS) or ("xited with" in text and NONZERO_EXIT.search(text)):
            self.failure.append(text)


class Seen:
    """The keys of the steps a parser has emitted, as a set holds them (``in``, ``add``, ``len``), except that a
    table's run of consecutive step numbers is held as one range (a long log: 300k steps, not a set of them)."""

    def __init__(self) -> None:
        self.single: set = set()
        self.starts: list[int] = []  # each range's first step, in order
        self.ranges: list[range] = []

    def __contains__(self, key) -> bool:
        if key in self.single:
            return True
        if not self.ranges or type(key) is not int:
            return False
        i = bisect.bisect_right(self.starts, key) - 1
        return i >= 0 and key in self.ranges[i]

    def __len__(self) -> int:
        return len(self.single) + sum(map(len, self.ranges))

    def add(self, key) -> None:
        if key not in self:
            self.single.add(key)

    def update(self, keys: list[int]) -> None:
        """New step numbers, increasing (a table's steps: ``none_of`` them seen)."""
        if len(keys) > 1 and keys[-1] - keys[0] == len(keys) - 1 and set(map(type, keys[:1])) == {int}:
            i = bisect.bisect_left(self.starts, keys[0])
            self.starts.insert(i, keys[0])
            self.ranges.insert(i, range(keys[0], keys[-1] + 1))
        else:
            self.single.update(keys)

    def none_of(self, keys: list[int]) -> bool:
        """Whether none of these step numbers (increasing) is seen."""
        if not keys or not self.single.isdisjoint(keys):
            return not keys
        first = max(bisect.bisect_right(self.starts, keys[0]) - 1, 0)
        for held in self.ranges[first:bisect.bisect_right(self.starts, keys[-1])]:  # those that may overlap them
            j = bisect.bisect_left(keys, held.start)
            if j < len(keys) and keys[j] < held.stop:
                return False
        return True


STEP_FIELDS = ("step", "step_time_s", "tokens", "loss", "lr", "grad_norm", "memory_gib", "peak_memory_gib", "repeat",
               "warmup", "reported")


class Step(dict):
    """A parsed step: the result's step object itself (a dict keyed and ordered as ``STEP_FIELDS``), whose fields
    also read as attributes (``step.step_time_s``), so that the summary reads parsed steps as it reads step
    records, without a second object per step (a 300k-step log is held once)."""

    __slots__ = ()


for _field in STEP_FIELDS:
    setattr(Step, _field, property(itemgetter(_field)))


def new_step(step: int, reported: dict, loss=None, lr=None, grad_norm=None, step_time_s=None,
             memory_gib=None, peak_memory_gib=None) -> Step:
    """A parsed step, keyed and ordered as the result's step object (``tprimat.results.records.FIELD_NAMES``):
    what the log does not state (tokens, warm-up) is filled in later, in place, by ``complete_step``."""
    return Step(step=step, step_time_s=step_time_s, tokens=None, loss=loss, lr=lr, grad_norm=grad_norm,
                memory_gib=memory_gib, peak_memory_gib=peak_memory_gib, repeat=0, warmup=False, reported=reported)
