"""A long log's step blocks read as tables by worker processes (``tprimat.logs.blocks``): the same steps, facts and
errors as one process reading them, the tables really read elsewhere, in order, and a lost worker costing only
speed."""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_fuzz import megatron_run, parse_both_ways
from tprimat.compose import compose
from tprimat.ingest.build import Meta, ingest_file
from tprimat.logs import blocks, facts, parsers
from tprimat.logs.blocks import file_blocks, with_tables, workers_for
from tprimat.logs.columns import Shared, all_finite, integers, numbers
from tprimat.logs.megatron import HEAD_LABELS, MegatronParser, current_and_average, head_ranks, read_table
from tprimat.logs.parsers import PARSERS, parse_file, parse_stream
from tprimat.logs.stream import UNREAD

LINE = ("{r}:  [2026-05-23 18:00:01] iteration {i:>8}/  100000 | consumed samples: {s:>12} | elapsed time per "
        "iteration (ms): {ms:.1f} | learning rate: 3.000000E-04 | global batch size:   512 | lm loss: {loss:.6E} | "
        "loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |\n")


def long_log(steps: int, ranks: int = 1) -> str:
    return "".join(LINE.format(r=r, i=i, s=512 * i, ms=1000 + i % 7 + r / 10, loss=10 / i)
                   for i in range(1, steps + 1) for r in range(ranks))


def where_read(text: str):  # module level: the workers unpickle it by name
    return os.getpid(), read_table(text)


TEST_PROCESS = os.getpid()


def dies_at_step_40(text: str):
    if "iteration       40/" in text and os.getpid() != TEST_PROCESS:
        os._exit(3)  # a worker killed mid-parse (the OOM killer, a signal)
    return read_table(text)


class DyingWorkerParser(MegatronParser):
    read_table = staticmethod(dies_at_step_40)


def test_file_blocks_are_whole_lines_read_as_open_reads_them(tmp_path):
    text = long_log(40) + "caf\u00e9 \udcff bad bytes, CRLF and a lone CR\r\nnext\rlast line without an end"
    path = tmp_path / "run.log"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    chunks = list(file_blocks(str(path), 700))
    assert [b.start for b in chunks[1:]] == [b.end for b in chunks[:-1]] and chunks[-1].end == len(path.read_bytes())
    assert all(b.text().endswith("\n") for b in chunks[:-1])
    with open(path, errors="replace") as f:
        assert "".join(b.text() for b in chunks) == f.read()


def test_workers_read_every_table_in_order_in_other_processes(tmp_path):
    path = tmp_path / "run.log"
    path.write_text(long_log(300, ranks=2))
    chunks = list(file_blocks(str(path), 2000))
    got = list(with_tables(iter(chunks), where_read, 2))
    assert [block for block, _ in got] == chunks  # in the file's order
    assert {pid for _, (pid, _) in got}.isdisjoint({os.getpid()})
    assert [table for _, (_, table) in got] == [read_table(block.text()) for block in chunks]
    assert all(table is not None for _, (_, table) in got)  # every block a table: the workers did the reading


def test_a_lost_worker_costs_only_speed(tmp_path, monkeypatch):
    path = tmp_path / "megatron.log"
    path.write_text(long_log(120, ranks=2) + "[WARNING] the end, without a line end")
    with open(path) as f:
        expected = parse_stream(f, "megatron", block_chars=1500)
    monkeypatch.setitem(PARSERS, "megatron", DyingWorkerParser)
    got = parse_file(path, "megatron", block_bytes=1500, workers=2)
    assert len(got.steps) == 120 and got.steps == expected.steps
    assert (got.facts, got.error, got.extra) == (expected.facts, expected.error, expected.extra)
    chunks = list(file_blocks(str(path), 1500))
    tables = [table for _, table in with_tables(iter(chunks), DyingWorkerParser.block_table, 2)]
    lost = next(i for i, block in enumerate(chunks) if "iteration       40/" in block.text())
    # worker k reads blocks k, k + 2, ...: the dying worker's blocks from the lost one on are left to the parser;
    # its blocks before that, and all of the other worker's, are read by the workers
    assert all(table is UNREAD for table in tables[lost::2])
    assert not any(table is UNREAD for table in tables[lost % 2:lost:2] + tables[1 - lost % 2::2])


def test_a_failure_sends_the_blocks_after_it_line_by_line(tmp_path):
    """From the first failure on every line is kept for the excerpt: the workers' tables of later blocks are
    left, their text read line by line, as in one process."""
    path = tmp_path / "megatron.log"
    path.write_text(long_log(60) + "Traceback (most recent call last):\n  File x\nRuntimeError: boom\n" + long_log(60))
    with open(path) as f:
        expected = parse_stream(f, "megatron", block_chars=1500)
    got = parse_file(path, "megatron", block_bytes=1500, workers=2)
    assert expected.error and got.error == expected.error
    assert got.steps == expected.steps
    assert got.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()  # the file hashed block by block on the way


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(lines=megatron_run(), block_bytes=st.sampled_from([300, 1000, 4096]))
def test_tables_read_by_workers_equal_the_line_path(tmp_path, lines, block_bytes):
    by_line = parse_both_ways("megatron", lines)
    path = tmp_path / "run.log"
    path.write_text("\n".join(lines) + "\n")
    by_workers = parse_file(path, "megatron", block_bytes=block_bytes, workers=2)
    assert by_workers.steps == by_line.steps
    assert (by_workers.facts, by_workers.error) == (by_line.facts, by_line.error)


ODD = " \t0123456789:[(x-"  # what a label, and what a rule reading labels, might trip on
TAIL = st.one_of(st.text(ODD, max_size=16), st.text(ODD, max_size=8).map("iteration {}  5/ 9".format))
LABELLED = st.builds("{}{}:{}{}".format, st.sampled_from(["", " ", "  ", "\t"]), st.integers(0, 10**10).map(str),
                     st.sampled_from(["", " ", "  ", "\t "]), TAIL)


@settings(max_examples=300, deadline=None)
@given(heads=st.lists(st.one_of(LABELLED, st.text(ODD, max_size=20), TAIL), min_size=1, max_size=40),
       repeats=st.integers(1, 70))
def test_line_starts_read_once_give_each_lines_label_as_the_rule_reads_it(heads, repeats):
    """``head_ranks`` reads each distinct line start once: every line's rank is still what ``HEAD_LABELS`` (the
    rule, applied to each line) reads, for labels of any width, blanks, digits and colons in any place."""
    heads = tuple(heads * repeats)
    expected = [int(label) if label else None for label in HEAD_LABELS.findall("\n".join(heads))]
    assert head_ranks(heads, "\n".join(heads)) == expected


STATES = ["  seq_length ...................... 4096", "[20260101 10:00:00][rank-7/8][INFO ] ", "global_batch_size: 16",
          "torchrun --nproc_per_node=8 --nnodes=2 train.py", "python -m torch.distributed.run --nproc_per_node 4",
          "TransformerModelArgs(dim=4096, n_layers=32, n_heads=32, multiple_of=1024)",
          "torchrun train.py --training.seq_len 2048"]
AROUND = ["0: ", "  ", "\t", "[rank0]: ", "(worker, pid=7) ", "x", ":", " | ", "...", "rank-", "seq_length"]


@settings(max_examples=300, deadline=None)
@given(line=st.lists(st.sampled_from(STATES + AROUND) | st.text(max_size=6), max_size=5).map("".join))
def test_a_line_that_states_a_fact_holds_a_stating_text(line):
    """``facts.may_state``: a block's other lines that it says state nothing are only counted, never read; so
    every line from which a parser reads a fact (or a world size) must be one it says may state one."""
    parser = MegatronParser()
    parser.feed(line)
    assert not parser.facts or facts.may_state(line), parser.facts


@pytest.mark.parametrize("line", STATES)
def test_each_stating_line_states_a_fact(line):
    parser = MegatronParser()
    parser.feed(line)
    assert parser.facts and facts.may_state(line)  # the property above is about lines that do state something


FIELD = st.builds("{}:{}|".format, st.sampled_from([" a", " b b", " c", "x"]), st.text("0123 .:|x", max_size=5))


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(st.builds("{}|{}{}".format, st.text("ab 1:", max_size=4), st.lists(FIELD, max_size=4).map("".join),
                                st.sampled_from(["", " ", "x", "|"])), min_size=1, max_size=8))
def test_lines_read_as_a_table_are_the_lines(lines):
    """``columns.table``: every line, read back from the table, is the line; and a set of lines with the same
    fields in the same order (each ``key:value|``, blanks after the last) is always read as one."""
    from tprimat.logs import columns

    table = columns.table(lines, 0)
    if table is not None:
        for i, line in enumerate(lines):
            fields = "".join(f"{key}:{values[i]}|" for key, values in zip(table.keys, table.values))
            assert line.startswith(f"{table.head[i]}|{fields}") and not line[len(table.head[i]) + 1 + len(fields):].strip()
    fields = [line.split("|")[1:-1] for line in lines]
    if all(line.split("|")[-1].strip() == "" for line in lines) and len(fields[0]) >= 1 and \
            all([f.partition(":")[0] for f in row] == [f.partition(":")[0] for f in fields[0]] and
                all(":" in f for f in row) for row in fields):
        assert table is not None


@given(st.lists(st.floats() | st.sampled_from([1e308, -1e308, math.inf, -math.inf, math.nan]), max_size=6))
def test_all_finite_is_each_value_finite(values):
    assert all_finite(values) == all(map(math.isfinite, values))  # a sum that overflows looks at each value


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "update", "none_of"]), st.integers(0, 60), st.integers(0, 12),
                          st.integers(1, 3)), max_size=30), st.lists(st.integers(-5, 80), max_size=10))
def test_seen_steps_are_a_set_of_them(operations, probes):
    """``Seen`` holds a table's consecutive step numbers as ranges; read as a set (``in``, ``len``, whether none
    of some increasing numbers is in it), it is the set of every step number given to it."""
    from tprimat.logs.stream import Seen

    seen, expected = Seen(), set()
    for operation, start, count, stride in operations:
        keys = list(range(start, start + count * stride, stride))
        if operation == "add":
            seen.add(start)
            expected.add(start)
        elif operation == "update" and expected.isdisjoint(keys):  # as a parser updates it: new steps only
            seen.update(keys)
            expected.update(keys)
        assert seen.none_of(keys) == expected.isdisjoint(keys)
    assert len(seen) == len(expected) and [p in seen for p in probes] == [p in expected for p in probes]
    assert all(k in seen for k in expected) and ("x", 1) not in seen


def test_workers_only_for_a_long_file_on_several_cores(monkeypatch):
    block = 1 << 20
    assert workers_for(blocks.PARALLEL_MIN_BLOCKS * block - 1, block) == 0  # too short
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(9)))
    assert workers_for(blocks.PARALLEL_MIN_BLOCKS * block, block) == blocks.MAX_WORKERS
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert workers_for(10**9, block) == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5})
    assert workers_for(10**9, block) == 0  # one core: no workers


def test_a_column_read_in_a_worker_arrives_sharing_its_repeated_numbers():
    """Pickle writes a number anew at each occurrence: a column's repeated values must come back as one object
    each (else a 300k-step log's constant columns cost 300k numbers each in the parser's process)."""
    step_times, _, _ = numbers(["1000.5", "998.0", "1000.5", "1001.0"] * 500, current_and_average, divisor=1000)
    batch, _, _ = numbers(["  512 "] * 2000, current_and_average)
    totals = integers(("100000",) * 2000)
    by_identity = Shared([0.25, -0.0, 0.25] * 100)  # built without the values' texts: shared by identity
    for column, distinct in ((step_times, 3), (batch, 1), (totals, 1), (by_identity, 2)):
        back = pickle.loads(pickle.dumps(column))
        assert type(back) is list and back == column
        assert list(map(repr, back)) == list(map(repr, column))  # -0.0 stays -0.0
        assert len(set(map(id, back))) == distinct
    assert pickle.loads(pickle.dumps(step_times))[:4] == [1.0005, 0.998, 1.0005, 1.001]


def test_a_long_log_ingests_alike_with_and_without_workers(tmp_path, monkeypatch):
    """``tprimat ingest`` of a log long enough for the workers (on a machine of several cores) gives the result of
    one process reading it: the same steps, summary, warnings and source (the file's digest included)."""
    path = tmp_path / "long.log"
    path.write_text(long_log(30_000))
    assert path.stat().st_size >= blocks.PARALLEL_MIN_BLOCKS * blocks.BLOCK_CHARS
    meta = Meta(compose, ["world_size=8", "training.seq_length=4096"])
    with_workers = ingest_file(path, meta)
    monkeypatch.setattr(parsers, "workers_for", lambda size, block_bytes=0: 0)
    alone = ingest_file(path, meta)
    for key in ("steps", "summary", "warnings", "source", "spec", "status"):
        assert with_workers[key] == alone[key], key
    assert alone["source"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert len(alone["steps"]) == 30_000


INTERRUPTED = """
import os, signal, sys, threading
import psutil
from tprimat.logs.blocks import file_blocks, with_tables
from tprimat.logs.megatron import read_table

signal.signal(signal.SIGINT, signal.default_int_handler)  # as an interactive shell leaves it, even under nohup/&

def once():  # true in the first process to ask, whichever worker it is
    try:
        os.close(os.open(sys.argv[2], os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False

def read(text):
    if "iteration        1/" not in text and once():  # a block after the first: the parse is under way
        os.killpg(0, signal.SIGINT)  # one Ctrl-C: the whole process group, the workers too
    return read_table(text)

try:
    for _ in with_tables(file_blocks(sys.argv[1], 2000), read, 2):
        threading.Event().wait(60)  # the parse waits here for the Ctrl-C, however slow the machine
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted")
print(len(psutil.Process().children()))
"""


def test_ctrl_c_stops_the_parse_and_its_workers_quietly(tmp_path):
    """The parser's process gets KeyboardInterrupt and stops its workers; the workers ignore the signal (no
    traceback of theirs) and none is left behind."""
    path = tmp_path / "run.log"
    path.write_text(long_log(1000))
    done = subprocess.run([sys.executable, "-c", INTERRUPTED, str(path), str(tmp_path / "signalled")],
                          capture_output=True, text=True, timeout=120, start_new_session=True,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.split() == ["interrupted", "0"], done.stderr
    assert "Traceback" not in done.stderr
