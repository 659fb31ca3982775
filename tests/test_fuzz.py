"""Ingest never raises: mutated lines of every format, fed to every parser line by line and in blocks, then
made into records, a summary and a result, raise nothing; bad files fail alone; BOM-marked encodings decode."""

from __future__ import annotations

import codecs
import io
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.test_ingest import DEEPSPEED, HF, MEGATRON, NEMO, PRIMUS, TITAN
from tests.test_provenance import ARGS_DUMP, MEGATRON_DS, MLPERF, RANKED, SHORT_AND_ODD
from tprimat.compose import compose
from tprimat.ingest.build import Meta, ingest_parsed
from tprimat.logs.parsers import PARSERS, Parsed, finished, parse_stream
from tprimat.logs.stream import Step
from tprimat.results.columns import columns_of
from tprimat.results.result import read_result, validate_result

LINES = [line for text in (MEGATRON, PRIMUS, NEMO, TITAN, DEEPSPEED, HF, RANKED, MEGATRON_DS, MLPERF, ARGS_DUMP,
                           SHORT_AND_ODD) for line in text.splitlines() if line.strip()]
NASTY = ["nan", "NaN", "inf", "-inf", "1e999", "-1e999", "9" * 5000, ".", "", ":", "|", "/", "(avg", ")", "-1", "0",
         "0.0", "\x00", "\ufffd", "\r", "\x1b[31m", "{", "}", "[", "]", "'", '"', ",", "1,000", "%", "e", "-", "/0"]
META = Meta(compose, ["world_size=2", "training.seq_length=128"], warmup_steps=1)


@st.composite
def mutated_line(draw) -> str:
    """A real line with 1-4 edits: a number replaced by a nasty one, or any span replaced by nasty text."""
    line = draw(st.sampled_from(LINES))
    for _ in range(draw(st.integers(1, 4))):
        piece = draw(st.one_of(st.sampled_from(NASTY), st.text(max_size=6)))
        numbers = list(re.finditer(r"\d+(\.\d+)?", line))
        if numbers and draw(st.booleans()):
            m = draw(st.sampled_from(numbers))
            line = line[:m.start()] + piece + line[m.end():]
        else:
            at, cut = draw(st.integers(0, len(line))), draw(st.integers(0, 6))
            line = line[:at] + piece + line[at + cut:]
    return line


def parse_both_ways(fmt: str, lines: list[str]) -> Parsed:
    parser = PARSERS[fmt]()
    steps: list[dict] = []
    for line in lines:
        steps += parser.feed(line)
    by_line = finished(parser, steps, fmt)
    for block_chars in (64, 1 << 20):  # blocks that cut lines, and the column path over whole blocks
        by_block = parse_stream(io.StringIO("\n".join(lines) + "\n"), fmt, block_chars=block_chars)
        assert by_block.steps == by_line.steps, block_chars
        assert (by_block.facts, by_block.error) == (by_line.facts, by_line.error), block_chars
    return by_block


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(st.one_of(mutated_line(), st.sampled_from(LINES)), min_size=1, max_size=25))
def test_mutated_lines_never_raise_in_any_parser_or_in_the_result(lines):
    for fmt in PARSERS:
        parsed = parse_both_ways(fmt, lines)
        result = ingest_parsed(parsed, "fuzz.log", META, "0" * 64)
        assert result["status"] in ("ok", "failed") and validate_result(result) == []


def test_another_ranks_copy_whose_bar_was_lost_reads_alike_by_line_and_in_blocks():
    """Found by the test above: rank 3's copy of step 3 with the "|" before its elapsed time lost. Line by line the
    time was searched for anywhere in the line (4.1005 s); in blocks the table read the field it was run into (nothing).
    Both now read a field of its own only: rank 1's 0.98 s is the step's, and rank 3 adds no time."""
    lines = ["[rank1]: iteration    3/   4 | consumed samples: 96 | elapsed time per iteration (ms): 980.0 | lm loss: 1.8 |",
             "3:  [2025-01-01 10:00:09] iteration        3/      10 | consumed samples:         nan elapsed time per "
             "iteration (ms): 4100.5 | learning rate: 3.000000E-05 | lm loss: 1.040000E+01 |"]
    for fmt in ("megatron", "primus"):
        (step,) = parse_both_ways(fmt, lines).steps
        assert step["step_time_s"] == 0.98 and "3" not in step["reported"].get("step_time_s_by_rank", {})
    # a field of its own after any whitespace the table's strip() drops (a no-break space here): read both ways
    spaced = [lines[0], lines[1].replace("nan elapsed", "nan |\xa0elapsed")]
    for fmt in ("megatron", "primus"):
        (step,) = parse_both_ways(fmt, spaced).steps
        assert step["reported"]["step_time_s_by_rank"]["3"] == 4.1005


def test_a_count_printed_as_minus_one_states_nothing():
    """Found by this fuzz test in CI: MLPerf's global batch size logged as -1 became the spec's (and a negative
    tokens per step in the plan); a count that is not positive states nothing."""
    lines = [':::MLLOG {"key": "global_batch_size", "value": -1, "time_ms": 1, "metadata": {}}']
    for fmt in PARSERS:
        parsed = parse_both_ways(fmt, lines)
        assert "training.global_batch_size" not in parsed.facts
        result = ingest_parsed(parsed, "fuzz.log", META, "0" * 64)
        assert validate_result(result) == [] and result["plan"]["tokens_per_step"] != -128


def test_a_step_number_too_long_for_int_is_skipped_on_both_paths():
    line = ("0: iteration " + "9" * 5000 + "/ 10 | consumed samples: 64 | elapsed time per iteration (ms): 900.0 | "
            "lm loss: 1.9 |")
    good = "0: iteration 3/ 10 | consumed samples: 64 | elapsed time per iteration (ms): 900.0 | lm loss: 1.9 |"
    parsed = parse_both_ways("megatron", [line, good, line])
    assert [s["step"] for s in parsed.steps] == [3]


def test_a_number_too_long_for_int_in_a_rank_prefix_is_text():
    line = "9" * 5000 + ":  iteration 3/ 10 | elapsed time per iteration (ms): 900.0 | lm loss: 1.9 | consumed samples: 6 |"
    assert [s["step"] for s in parse_both_ways("megatron", [line]).steps] == [3]


def test_a_carriage_return_inside_a_step_line_reads_the_same_on_both_paths():
    """A progress bar's carriage return inside a field name (found by the fuzz test in CI): ``clean`` drops it
    on the line path, so the block path must read that block line by line too."""
    line = ("0: [2026-01-01 00:00:00] iteration    2/   4 | c\ronsumed samples: 64 | "
            "elapsed time per iteration (ms): 900.0 | lm loss: 1.9 |")
    (step,) = parse_both_ways("megatron", [line]).steps
    assert step["reported"]["consumed_samples"] == 64 and step["step_time_s"] == 0.9


MS = ["1000.5", "900.0/950.2", " 12 ", "nan", "0", "-3.0", "1,360.5", "7e2", "N/A"]


@st.composite
def megatron_run(draw) -> list[str]:
    """A long run's uniform step lines, the table path's input: one to three printing ranks in any order (rank
    0 first, later or absent; labelled or not), steps re-printed or skipped, ranks dropping a line, memory
    reports before and after their step, noise and fact lines between them, values of every kind."""
    ranks = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True))
    label = draw(st.sampled_from(["{r}:  [2026-05-23 18:00:01] ", "{r}: ", "", "[2026-05-23 18:00:01] ", "  {r}:\t"]))
    extra = draw(st.sampled_from(["", " tokens per GPU (tokens/s/GPU): 5120.5 |", " lm loss: 2.0 |", " other: x |"]))
    usual = draw(st.sampled_from(MS))  # the run's usual step time print; now and then another kind
    lines, key = [], 0
    for _ in range(draw(st.integers(1, 30))):
        odd = draw(st.integers(0, 60))  # now and then a step re-printed, skipped or printed again
        key = max(key - 1, 1) if odd == 0 else key if odd == 1 else key + 2 if odd == 2 else key + 1
        for rank in ranks:
            if draw(st.integers(0, 150)) == 0:
                continue  # this rank's copy is missing
            ms = usual if draw(st.integers(0, 7)) else draw(st.sampled_from(MS))
            lines.append(label.format(r=rank) + f"iteration {key:>8}/  100000 | consumed samples: {key * 8:>12} | "
                         f"elapsed time per iteration (ms): {ms} | learning rate: {key:.6E} | global batch size:"
                         f"     8 | lm loss: {1 + key / 7:.6E} | loss scale: 1.0 |{extra}")
        noise = draw(st.integers(0, 30))
        if noise == 0:
            lines.append(f"[Rank 0] (after {key + draw(st.integers(-1, 1))} iterations) memory (MB) | allocated: "
                         "1024.0 | max allocated: 2048.5 | reserved: 3000.0 | max reserved: 3000.0")
        elif noise == 1:
            lines.append("0: [WARNING] a framework warning between the steps")
        elif noise == 2:
            lines.append("global_batch_size: 16")
    return lines


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=megatron_run(), block_chars=st.sampled_from([300, 1000, 4096, 1 << 20]))
def test_uniform_megatron_blocks_read_as_tables_equal_the_line_path(lines, block_chars):
    """The column path (whole blocks of uniform lines) and its one-by-one edges give the line path's steps,
    facts and errors, wherever the block boundaries fall."""
    by_line = parse_both_ways("megatron", lines)
    by_block = parse_stream(io.StringIO("\n".join(lines) + "\n"), "megatron", block_chars=block_chars)
    assert by_block.steps == by_line.steps
    assert (by_block.facts, by_block.error) == (by_line.facts, by_line.error)


def test_the_table_path_reads_what_the_line_path_reads():
    """A block of two ranks' uniform lines: every field, each rank's step time, rank 0's values as the step's."""
    lines = [f"{r}:  iteration {k:>4}/ 10 | consumed samples: {8 * k:>6} | elapsed time per iteration (ms): "
             f"{1000 + r + k:.1f} | lm loss: {2 + k / 10:.4f} | learning rate: 3.0E-04 | global batch size:     8 |"
             f" throughput per GPU (TFLOP/s/GPU): {400 + k:.1f} |" for k in range(1, 6) for r in (1, 0)]
    steps = parse_stream(io.StringIO("\n".join(lines) + "\n"), "megatron").steps
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5]
    third = steps[2]
    assert (third["step_time_s"], third["loss"], third["lr"]) == (1.003, 2.3, 3e-4)  # rank 0's: 1000 + 0 + 3 ms
    assert third["reported"] == {"total_iterations": 10, "consumed_samples": 24.0, "global_batch_size": 8.0,
                                 "tflops_per_gpu": 403.0, "step_time_s_by_rank": {"1": 1.004, "0": 1.003}}


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32", "utf-8-sig"])
def test_bom_marked_logs_are_decoded(tmp_path, encoding):
    from tprimat.ingest.build import ingest_file

    path = tmp_path / "run.log"
    data = MEGATRON.encode(encoding)
    if encoding == "utf-16-be":
        data = codecs.BOM_UTF16_BE + data
    path.write_bytes(data)
    plain = tmp_path / "plain.log"
    plain.write_text(MEGATRON)
    got, want = ingest_file(path, META), ingest_file(plain, META)
    assert got["source"]["format"] == "megatron" and got["steps"] == want["steps"]


def test_a_directory_ingests_every_file_it_can_and_lists_the_rest(tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "out"
    logs.mkdir()
    (logs / "a.log").write_text(MEGATRON)
    (logs / "b-run.wandb").write_bytes(b"not a W&B run file")  # raises inside the W&B reader
    (logs / "c.log").write_text(NEMO)
    proc = subprocess.run([sys.executable, "-m", "tprimat", "ingest", str(logs), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 of 3 files could not be ingested:" in proc.stdout and "b-run.wandb: could not ingest" in proc.stdout
    results = {r["source"]["file"]: r for r in (read_result(p) for p in out.rglob("result.json"))}
    assert set(results) == {"a.log", "b-run.wandb", "c.log"}  # the good file after the bad one was ingested too
    assert results["a.log"]["status"] == "ok" and results["c.log"]["status"] == "ok"
    assert results["b-run.wandb"]["status"] == "failed" and validate_result(results["b-run.wandb"]) == []


PREFIX_PARTS = st.sampled_from(["3:", "12: ", "0:\t", " 7:  ", "[rank1]:", "[20260523 18:30:15][rank-2/8][ INFO ] ",
                                "(pretraining, pid=4112) ", "[2026-05-23 18:30:15] ", " ", "\t", "\x1b[32m", "\r",
                                "x", "1", "[", "(", "rank"])


@given(parts=st.lists(PREFIX_PARTS, max_size=5))
def test_the_srun_label_shortcut_names_the_rank_clean_names(parts):
    """``prefix_rank``'s plain-label shortcut (no ``clean``) gives the rank ``clean`` reads, for any prefix."""
    from tprimat.logs.clean import clean
    from tprimat.logs.megatron import MegatronParser

    prefix = "".join(parts)
    expected = clean(prefix).rank if prefix and not prefix.isspace() else None
    assert MegatronParser().prefix_rank(prefix) == expected


def test_a_negative_printed_throughput_is_left_out_of_the_summary():
    """Found by the fuzz test: a Primus line printing ``throughput per GPU: -1/350.0`` gave a negative reported
    TFLOP/s headline, which the result schema refuses."""
    lines = ["[20260101 10:00:00][rank-0/8][INFO ] [----trainer.py:2509] :  iteration        4/      10 | "
             "consumed samples:         1024 | elapsed time per iteration (ms): 2000.0/2500.0 | throughput per GPU "
             "(TFLOP/s/GPU): -1/350.0 | global batch size:   256 | lm loss: 1.000000E+01 | grad norm: 1.000 |"]
    lines = [lines[0].replace("iteration        4", f"iteration        {i}") for i in range(1, 5)]
    result = ingest_parsed(parse_both_ways("primus", lines), "neg.log", META, "0" * 64)
    assert validate_result(result) == []
    assert "tflops_per_gpu" not in result["summary"]["reported"]
    assert result["summary"]["tflops_per_device"] is None


STEP_ROW = st.builds(
    lambda step, repeat_, time_s, loss, printed: Step(step=step, step_time_s=time_s, tokens=None, loss=loss, lr=None,
                                                      grad_norm=None, memory_gib=None, peak_memory_gib=None,
                                                      repeat=repeat_, warmup=False, reported=printed),
    st.integers(0, 20), st.integers(0, 2), st.none() | st.floats(0.1, 2.0), st.none() | st.floats(allow_nan=False),
    st.dictionaries(st.sampled_from(["tflops_per_gpu", "samples_per_s", "step_time_s_by_rank"]),
                    st.none() | st.floats(0, 9) | st.dictionaries(st.sampled_from(["0", "1"]), st.floats(0, 9)),
                    max_size=3))


def per_rank_row(ranks: dict) -> dict:
    return Step(step=0, step_time_s=None, tokens=None, loss=None, lr=None, grad_norm=None, memory_gib=None,
                peak_memory_gib=None, repeat=0, warmup=False, reported={"tflops_per_gpu": ranks})


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(STEP_ROW, max_size=25), groups=st.lists(st.integers(1, 6), max_size=25),
       as_chunk=st.lists(st.booleans(), max_size=25))
# hypothesis's find of 2026-11-29: a chunk of steps with one rank's figure, then a step with a second rank's: the
# second rank's column read back the sentinel, not None, for the steps before it
@example(rows=[per_rank_row({"0": 0.0}), per_rank_row({"0": 0.0}), per_rank_row({"0": 0.0, "1": 0.0})], groups=[2],
         as_chunk=[True])
def test_steps_held_as_columns_are_the_steps_given_in_order(rows, groups, as_chunk):
    """Steps added to ``StepColumns`` as parsed dicts or as column chunks (as ``parse_stream`` adds what parsers
    return) read back as the same steps, one by one and iterated, ordered by (repeat, step) as ``sorted``
    orders them; a printed name a step lacks reads as absent from it, and as None in its column."""
    from tprimat.logs.stepcolumns import MISSING, OWN, PerKey, StepColumns, per_key

    parts, start = [], 0
    for size, chunk in zip(groups + [len(rows)], as_chunk + [False] * (len(groups) + 1)):
        group, start = rows[start:start + size], start + size
        if chunk and group:  # a chunk built from the steps' own columns, by hand (a figure per key: per key)
            names = dict.fromkeys(name for r in group for name in r["reported"])
            printed = {n: [r["reported"].get(n, MISSING) for r in group] for n in names}
            parts.append(StepColumns.of(len(group), {f: [r[f] for r in group] for f in OWN},
                                        {n: PerKey.of(v) if per_key(v) else v for n, v in printed.items()}))
        else:
            parts += group
    steps = StepColumns()
    steps.add(parts)
    steps.sort()
    expected = sorted(rows, key=lambda r: (r["repeat"], r["step"]))
    assert len(steps) == len(rows) and list(steps) == expected
    assert [steps[i] for i in range(len(steps))] == expected and steps == expected
    for name in ("tflops_per_gpu", "step_time_s_by_rank"):
        assert steps.printed(name) == [r["reported"].get(name) for r in expected]
    assert columns_of(steps) == columns_of(expected)  # the result file's columns, as from the steps one by one
