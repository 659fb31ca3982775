"""Nothing foreign hangs a parser: lines of 1 MB, shaped to defeat backtracking regexes (a long word before a
failing arguments-dump tail, runs of dashes after ``torchrun``, thousands of fields), go through every parser's
line path and block path within a budget measured against a plain pass over the same text (a regex split into
tokens): linear work. A quadratic pattern took 9 s on a 40,000-character line and did not finish on 200,000."""

import re
import time

import pytest

from tprimat.logs.parsers import PARSERS

N = 1_000_000
SHAPES = {
    "dump that fails late": "x" * N + " ... 5 6",
    "dots that fail late": "a " + "." * N + " 1 2",
    "many dumps": "ab ... " * (N // 7) + "z z",
    "dashes after torchrun": "torchrun " + "-" * N,
    "flags": "torchrun " + "--a=b " * (N // 6),
    "yaml-like": "a" * N + ": b c",
    "iteration digits": "iteration " + "1" * N + "/",
    "step digits": "step: " + "1" * N + " x",
    "model args": "TransformerModelArgs(" + "a=1, " * (N // 5),
    "pipes": "iteration 1x/ 2 |" + "|" * N,
    "ansi": "\x1b[3" * (N // 4),
    "mllog": ":::MLLOG {" + "[" * N,
    "trainer dict": "{'loss': " + "1" * N,
}


def plain_pass(text: str) -> float:
    start = time.perf_counter()
    re.findall(r"\S+", text)
    return time.perf_counter() - start


# not exclusive: the budget (100 plain passes and half a second) holds beside another test, whose contention slows the
# plain pass too, while a quadratic pattern misses it by minutes; held alone it cost 35 s of the suite's wall time in
# waits for the lock (2026-11-29)
@pytest.mark.slow  # a time budget per megabyte line: the full run
@pytest.mark.parametrize("fmt", list(PARSERS))
def test_a_megabyte_line_costs_a_plain_pass_not_a_quadratic_one(fmt):
    for name, line in SHAPES.items():
        before = plain_pass(line)
        parser = PARSERS[fmt]()
        start = time.perf_counter()
        parser.feed(line)
        parser.feed_block(line + "\n")
        elapsed = time.perf_counter() - start
        # the plain pass timed on both sides of the parse, the slower counted: contention around the parse moves the
        # budget with it (beside nothing, the worst parse took 0.31 of its budget, 2026-11-29)
        budget = 100 * max(before, plain_pass(line)) + 0.5
        assert elapsed < budget, f"{fmt}: {name}: {elapsed:.2f} s against a budget of {budget:.2f} s"


def test_deeply_nested_mllog_json_is_an_unread_line_not_a_crash():
    """json's recursion limit on 100,000 nested brackets after the MLLOG marker: the line is counted as unread."""
    from tprimat.compose import compose
    from tprimat.ingest.build import Meta, ingest_text

    record = (':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "submission_org", '
              '"value": "x"}\n')
    result = ingest_text(record + ":::MLLOG " + "[" * 100_000 + "\n", "nested.log", Meta(compose), fmt="mlperf")
    assert result["source"]["unparsed_lines"] == 1
