"""Megatron-LM, Megatron-Bridge, Megatron-DeepSpeed and AMD Primus iteration lines:
``iteration N/M | key: value | ...`` (fields in any order, ``current/average`` pairs in Primus) and the
separate ``(after N iterations) memory (MB)`` report."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple, Optional

from tprimat.logs import columns, facts
from tprimat.logs.clean import Line, count, number
from tprimat.logs.stepcolumns import StepColumns
from tprimat.logs.stream import BLOCK_TRIGGERS, Step, StreamParser, new_step

ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)")
MEMORY = re.compile(r"\(after (\d+) iterations\) memory \(MB\) \| allocated: ([\d.]+) \| max allocated: ([\d.]+)")
FIELDS = {
    "elapsed time per iteration (ms)": "step_time_ms", "learning rate": "lr", "lm loss": "loss",
    "grad norm": "grad_norm", "global batch size": "global_batch_size", "consumed samples": "consumed_samples",
    "loss scale": "loss_scale", "number of skipped iterations": "skipped_iterations",
    "number of nan iterations": "nan_iterations", "throughput per GPU (TFLOP/s/GPU)": "tflops_per_gpu",
    "compute per GPU (TFLOP/s/GPU)": "tflops_per_gpu", "tokens per GPU (tokens/s/GPU)": "tokens_per_s_per_gpu",
    "tokens/sec/gpu": "tokens_per_s_per_gpu", "tokens/s/GPU inst/harmonic mean": "tokens_per_s_per_gpu",
    "energy per GPU (J/iter/GPU)": "energy_j_per_iter_per_gpu", "power per GPU (W/GPU)": "power_w_per_gpu",
    # Megatron-DeepSpeed
    "samples per second": "samples_per_s", "TFLOPs": "tflops_per_gpu", "actual seqlen": "actual_seqlen",
}
OWN = frozenset(("step_time_ms", "loss", "lr", "grad_norm"))
# another rank's copy of a step: its elapsed-time field, as a table reads it (a field of its own, between bars: a
# text run into the field before it is that field's, not read; hypothesis found a line whose "|" was lost read one
# way line by line and the other in blocks)
STEP_TIME = re.compile(r"(?:^|\|)\s*elapsed time per iteration \(ms\)\s*:\s*([^|]*)")  # \s: what strip() drops
SHORT_LINE = 100  # facts.read_line reads "key: value" config lines shorter than this
VALUES_KEPT = 4096  # printed values remembered per parser (their parse, and one shared number object)
TOKENS = "consumed tokens"  # Megatron-DeepSpeed: an exact count; swiss-ai Megatron: "0.004B" (rounded)
# Step lines' texts before their first "|", joined by line ends: each one's step and total, and its srun label
# as ``PLAIN_LABEL`` reads it ("" when none: ``StreamParser.prefix_rank`` reads any other prefix)
HEAD_STEPS = re.compile(r"iteration[ \t]+(\d+)[ \t]*/[ \t]*(\d+)[ \t]*$", re.M)  # at a word start: ``word_start``
HEAD_LABELS = re.compile(r"^(?:[ \t]*(\d{1,9}):[ \t]+(?!\[rank|\[\d{8} |\(|\d|\s))?", re.M)
LABEL_LOOKS_AHEAD = 10  # characters past a label that ``HEAD_LABELS`` reads (its longest exclusion, "[" 8 digits " ")
# A text's start that decides what ``HEAD_LABELS`` reads of it, whatever follows: a character that ends the match
# before or at its colon, or a colon, blanks and the ``LABEL_LOOKS_AHEAD`` characters the rule looks at after them
LABEL_DECIDED = re.compile(r"[ \t]*(?:[^ \t\d]|\d{10}|\d{1,9}(?:[^:\d]|:(?:[^ \t]|[ \t]+[^ \t].{%d})))"
                           % (LABEL_LOOKS_AHEAD - 1), re.S)
LABEL_WIDER = 3  # a line's start read as its label: room for labels up to this many characters wider than the first
DISTINCT_STARTS = 64  # more distinct line starts than this (a clock in them): each line is searched
ELAPSED = "elapsed time per iteration (ms)"


@dataclass
class TableFields:
    own: dict  # step record field -> values (step_time_s, loss, lr, grad_norm)
    reported_names: list  # ``reported`` keys in the order ``iteration`` inserts them
    reported_values: list  # one column per name after the first (total_iterations: from the heads)
    echo_s: Optional[list]  # the first elapsed-time column (s): what another rank's copy of a step adds


class TableBlock(NamedTuple):
    """A block of uniform iteration lines read as a table (``read_table``, in any process): what
    ``MegatronParser.offer_table`` needs to offer its steps."""
    keys: list  # each step line's step number
    totals: list  # each step line's total iterations
    ranks: list  # each step line's rank, from its srun label (None: no label)
    heads: Optional[tuple]  # the step lines' texts before their first "|" when a line has no label (the parser
    # reads the rank from its prefix: ``StreamParser.prefix_rank``); else None
    fields: TableFields
    others: list  # the block's lines that state no step but may state a fact
    quiet: int  # the block's lines that state nothing (only counted)


WORD_CHAR = re.compile(r"\w")
LAST_CHAR = itemgetter(slice(-1, None))


def word_start(text: str, word: str) -> bool:
    """Whether every ``word`` in ``text`` starts a word (as ``\\b`` before it; a regex that starts with a
    literal scans at C speed, one that starts with ``\\b`` does not)."""
    pieces = text.split(word)
    if "" in pieces[1:-1]:  # a word right after another: its first letters before it
        return False
    return not WORD_CHAR.search("".join(map(LAST_CHAR, pieces[:-1])))


def current_and_average(text: str) -> tuple[Optional[float], Optional[float]]:
    """'32025.5/32117.1' or '238.4 (avg 231.0)' -> (current, running average); '9.1' -> (9.1, None)."""
    try:  # the common case: one plain number
        value = float(text)
        return (value if math.isfinite(value) else None), None
    except ValueError:
        pass
    if "(avg" in text:
        current, _, average = text.partition("(avg")
        return number(current), number(average.rstrip(") "))
    current, slash, average = text.partition("/")
    if slash and "/" not in average:
        return number(current), number(average)
    return number(text), None


def read_table(block: str) -> Optional[TableBlock]:
    """A block of uniform iteration lines, and lines that state no step, read as a table
    (``tprimat.logs.columns``): the same steps, offered by ``MegatronParser.offer_table``, as line by line; None
    when it is no such table, or when a text it would not read as a number holds a fact or a failure (those
    blocks, and consumed-token counts, are read line by line). A memory report ("(after N iterations) memory
    (MB)") is a line with "iteration" whose text before its first "|" states no step: a block holding one is no
    such table. A function of the block alone: ``parse_file`` runs it in worker processes."""
    lines = block.split("\n")
    lines.pop()  # a block ends at a line end
    stepping = [line for line in lines if "iteration" in line]
    table = columns.table(stepping, SHORT_LINE)
    if table is None or any(key.strip() == TOKENS for key in table.keys):
        return None
    head_text = "\n".join(table.head)
    heads = HEAD_STEPS.findall(head_text)
    if len(heads) != len(stepping) or not word_start(head_text, "iteration"):
        return None
    key_texts, total_texts = zip(*heads)
    try:
        keys, totals = list(map(int, key_texts)), columns.integers(total_texts)
    except ValueError:  # a number too long for int: the line path skips that line
        return None
    read = table_fields(table)
    if read is None:
        return None
    fields, unread_texts = read
    others = [line for line in lines if "iteration" not in line] if len(stepping) < len(lines) else []
    unread = "\n".join([head_text, *table.keys, *unread_texts, *others])
    if any(word in unread for word in BLOCK_TRIGGERS):
        return None
    quiet = 0
    if others and not facts.may_state("\n".join(others)):  # nothing for the parser to read in them
        quiet, others = len(others), []
    ranks = head_ranks(table.head, head_text)
    return TableBlock(keys, totals, ranks, None if None not in ranks else table.head, fields, others, quiet)


def head_ranks(heads: tuple, head_text: str) -> list:
    """Each step line's rank from its srun label as ``HEAD_LABELS`` reads it (None when none). The rule reads
    at most ``LABEL_LOOKS_AHEAD`` characters past a label: where the lines start with a few distinct texts that
    long (the labels of a few ranks, then a date), each distinct start is read once and every line takes its
    start's rank; else every line is searched."""
    first = HEAD_LABELS.match(heads[0])
    width = first.end() + LABEL_LOOKS_AHEAD + LABEL_WIDER
    starts = list(map(itemgetter(slice(0, width)), heads))
    rank_of = {}
    for start in dict.fromkeys(starts):
        if len(rank_of) == DISTINCT_STARTS or not LABEL_DECIDED.match(start):  # (a line's end decides: searched)
            return [int(label) if label else None for label in HEAD_LABELS.findall(head_text)]
        label = HEAD_LABELS.match(start).group(1)  # as much of the line as the rule reads
        rank_of[start] = int(label) if label else None
    return list(map(rank_of.__getitem__, starts))


def table_fields(table: columns.Table) -> Optional[tuple[TableFields, list]]:
    """The table's value columns as the step records' fields and ``reported`` (as ``iteration`` reads each
    line), and the texts read other than as plain numbers (searched for facts and failures like any other
    line); None when a column has running averages on some lines only (a line without one has no
    ``_running_avg`` key: read line by line)."""
    fields = TableFields(own={}, reported_names=["total_iterations"], reported_values=[], echo_s=None)
    unread_texts: list = []
    average_s = None
    for key, texts in zip(table.keys, table.values):
        name = FIELDS.get(key.strip())
        if name is None:
            unread_texts.extend(texts)
            continue
        in_ms = name == "step_time_ms"  # read as seconds, as ``iteration`` divides it
        current, average, unread = columns.numbers(texts, current_and_average, divisor=1000 if in_ms else None)
        if average is not None and None in average:
            return None
        unread_texts.extend(unread)
        if fields.echo_s is None and key.strip() == ELAPSED:
            fields.echo_s = current  # what another rank's copy of a step adds (``step_line``)
        if name in OWN:
            fields.own["step_time_s" if in_ms else name] = current
        else:
            fields.reported_names.append(name)
            fields.reported_values.append(current)
        if average is not None and in_ms:
            average_s = average
        elif average is not None:
            fields.reported_names.append(f"{name}_running_avg")
            fields.reported_values.append(average)
    if average_s is not None:
        fields.reported_names.append("step_time_s_running_avg")
        fields.reported_values.append(average_s)
    return fields, unread_texts


class MegatronParser(StreamParser):
    format = "megatron"
    FAST = re.compile(r"\biteration[ \t]+(\d+)[ \t]*/[ \t]*(\d+)[ \t]*\|([^\n]*)\n")
    MEANT = re.compile(r"\biteration\s+\S+\s*/\s*\S+\s*\|.*\|")  # the step line's shape, whatever its numbers

    def __init__(self) -> None:
        super().__init__()
        self.memory: dict[int, tuple[float, float]] = {}  # reports that came before their step
        # printed value text -> (current, average): batch size, loss scale, skipped counts and learning-rate
        # plateaus repeat on every line, so each distinct text is parsed once and its number object shared
        self.values: dict[str, tuple] = {}

    def memory_held(self, keys: list[int]) -> bool:
        return bool(self.memory) and not self.memory.keys().isdisjoint(keys)

    def read(self, line: Line) -> list[Step]:
        text = line.text
        if "iteration" in text:
            if m := ITERATION.search(text):
                return self.step_line(int(m.group(1)), m.group(2), m.group(3), line.rank)
            if self.meant(text):
                self.unread(text)
                return []
        if "memory (MB)" in text and (m := MEMORY.search(text)):
            self.attach_memory(int(m.group(1)), float(m.group(2)) / 1024, float(m.group(3)) / 1024)
        return []

    def fast(self, match: re.Match, prefix: str, length: int) -> list[Step]:
        if length < SHORT_LINE:  # a short line might be a config dump: the full path reads it
            return self.feed(prefix + match.group(0))
        return self.step_line(int(match.group(1)), match.group(2), match.group(3), self.prefix_rank(prefix))

    read_table = staticmethod(read_table)

    def offer_table(self, table: "TableBlock") -> list[Step]:
        for line in table.others:  # they state no step (a fact, at most): read as ever
            self.feed(line)
        self.lines += len(table.keys) + table.quiet
        ranks = table.ranks if table.heads is None else \
            [self.prefix_rank(text.rpartition("iteration")[0]) if rank is None else rank
             for rank, text in zip(table.ranks, table.heads)]
        return self.table_steps(table.keys, table.totals, ranks, table.fields)

    def table_steps(self, keys: list[int], totals: list[int], ranks: list, fields: "TableFields") -> list[Step]:
        blank = [None] * len(keys)
        times = fields.own.get("step_time_s", blank)
        echo_times = times if fields.echo_s is None else fields.echo_s
        loss, lr, grad_norm = (fields.own.get(name, blank) for name in ("loss", "lr", "grad_norm"))
        reported = [totals, *fields.reported_values]
        names = fields.reported_names

        def one(i: int) -> Step:
            step = new_step(keys[i], dict(zip(names, (column[i] for column in reported))), loss=loss[i], lr=lr[i],
                            grad_norm=grad_norm[i], step_time_s=times[i])
            if keys[i] in self.memory:
                step["memory_gib"], step["peak_memory_gib"] = self.memory.pop(keys[i])
            return step

        def many(rows: slice) -> StepColumns:
            return StepColumns.of(len(keys[rows]), {"step": keys[rows], "step_time_s": times[rows], "loss": loss[rows],
                                                    "lr": lr[rows], "grad_norm": grad_norm[rows]},
                                  {name: column[rows] for name, column in zip(names, reported)},
                                  frozenset())  # a table's columns are whole: no step lacks a printed name

        return self.offer_rows(keys, ranks, times, echo_times, one, many)

    def step_line(self, key: int, total: str, body: str, rank: Optional[int]) -> list[Step]:
        if self.echo(key, rank):  # another rank's copy: only its step time is new
            ms = (t := STEP_TIME.search(body)) and current_and_average(t.group(1))[0]
            self.rank_time(key, rank, ms / 1000 if ms is not None else None)
            return []
        return self.offer(self.iteration(key, int(total), body), rank)

    def iteration(self, key: int, total: int, body: str) -> Step:
        reported: dict = {"total_iterations": total}
        own: dict = {}  # the step record's own fields, kept out of ``reported`` (which is held once per step)
        for part in body.split("|"):
            key_text, colon, value = part.partition(":")
            name = FIELDS.get(key_text.strip()) if colon else None
            if name is not None:
                pair = self.values.get(value)
                if pair is None:
                    pair = current_and_average(value)
                    if len(self.values) < VALUES_KEPT:
                        self.values[value] = pair
                current, average = pair
                (own if name in OWN else reported)[name] = current
                if average is not None:
                    reported[f"{name}_running_avg"] = average
            elif colon and key_text.strip() == TOKENS:
                tokens, exact = count(value)
                reported["consumed_tokens" if exact else "consumed_tokens_rounded"] = tokens
        ms = own.get("step_time_ms")
        if "step_time_ms_running_avg" in reported:
            reported["step_time_s_running_avg"] = reported.pop("step_time_ms_running_avg") / 1000
        step = new_step(key, reported, loss=own.get("loss"), lr=own.get("lr"), grad_norm=own.get("grad_norm"),
                        step_time_s=ms / 1000 if ms is not None else None)
        if key in self.memory:
            step["memory_gib"], step["peak_memory_gib"] = self.memory.pop(key)
        return step

    def attach_memory(self, step: int, allocated: float, peak: float) -> None:
        held = self.pending
        if held is not None and held["step"] == step:
            if held.get("memory_gib") is None:
                held["memory_gib"], held["peak_memory_gib"] = allocated, peak
        elif step not in self.seen:
            self.memory.setdefault(step, (allocated, peak))


class PrimusParser(MegatronParser):
    format = "primus"
