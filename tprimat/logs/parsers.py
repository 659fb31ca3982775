"""The log formats: one stream parser class per format (see ``tprimat.logs.stream``), format detection, and
``parse_lines`` for a whole text. ``tprimat ingest`` and the live external backends use the same classes."""

from __future__ import annotations

import codecs
import dataclasses
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence, TextIO

from tprimat.logs.blocks import BLOCK_CHARS, file_blocks, line_blocks, with_tables, workers_for
from tprimat.logs.deepspeed import DS_STEP, DS_TIMER, DeepspeedParser
from tprimat.logs.hf import HF_DICT, HfParser
from tprimat.logs.megatron import ITERATION, MegatronParser, PrimusParser
from tprimat.logs.mlperf import MARK, MlperfParser
from tprimat.logs.nemo import NEMO2, NemoParser
from tprimat.logs.stepcolumns import StepColumns
from tprimat.logs.stream import UNREAD, StreamParser
from tprimat.logs.torchtitan import TITAN, TorchtitanParser
from tprimat.logs.tprimat import STEP as TPRIMAT_STEP
from tprimat.logs.tprimat import TprimatParser

PARSERS: dict[str, type[StreamParser]] = {
    "megatron": MegatronParser, "primus": PrimusParser, "nemo": NemoParser, "torchtitan": TorchtitanParser,
    "deepspeed": DeepspeedParser, "hf": HfParser, "mlperf": MlperfParser, "tprimat": TprimatParser,
}

# Evidence that a text is in a format: (pattern, weight).
SIGNATURES = {
    "primus": [(re.compile(r"rank-\d+/\d+\]"), 1), (re.compile(r"hip mem usage|\[aiter\]|primus", re.I), 3)],
    "megatron": [(ITERATION, 2), (re.compile(r"lm loss:"), 2)],
    "nemo": [(NEMO2, 5), (re.compile(r"reduced_train_loss="), 5), (re.compile(r"\[NeMo [IWE]"), 1)],
    "torchtitan": [(TITAN, 5), (re.compile(r"\[titan\]|torchtitan"), 2)],
    "deepspeed": [(DS_STEP, 5), (DS_TIMER, 5), (re.compile(r"\bdeepspeed\b", re.I), 1)],
    "hf": [(HF_DICT, 5), (re.compile(r"\*\*\*\*\* Running training \*\*\*\*\*"), 5)],
    "mlperf": [(re.compile(re.escape(MARK)), 5)],
    "tprimat": [(TPRIMAT_STEP, 5), (re.compile(r"spec \(world size \d+\): \{"), 5)],
}
DETECT_BYTES = 4 << 20  # formats are recognised from the head of a file: at most this much of it
FIRST_LOOK = 256 << 10  # ... and only this much when it already holds clear evidence
CLEAR = 100  # a score this high, with no other format's signature at all, is clear evidence (20 step lines)


def detect(raw_text: str) -> Optional[str]:
    """The format whose signatures weigh most in the file's head: the first 256 KB when only one format has
    signatures there, and clear ones (its step lines); else the first 4 MB (a long argument dump or banner
    before the steps, or several formats' signatures to weigh)."""
    if len(raw_text) > FIRST_LOOK:
        first = scores_of(raw_text[:FIRST_LOOK])
        found = [fmt for fmt, score in first.items() if score]
        if len(found) == 1 and first[found[0]] >= CLEAR:
            return found[0]
    scores = scores_of(raw_text[:DETECT_BYTES])
    best = max(scores, key=scores.get)
    return best if scores[best] > 0 else None


def scores_of(head: str) -> dict[str, int]:
    scores = {fmt: sum(weight * len(p.findall(head)) for p, weight in sigs) for fmt, sigs in SIGNATURES.items()}
    if scores["primus"] and scores["megatron"] == 0 and scores["torchtitan"]:
        scores["primus"] = 0  # torchtitan re-emitted through Primus's logger is torchtitan's format
    if scores["primus"] and scores["megatron"]:
        scores["primus"] += scores["megatron"]
    return scores


class Unrecognised(StreamParser):
    """No format recognised: facts and failures are still read, no step is."""

    def read(self, line) -> list[dict]:
        return []


@dataclass
class Parsed:
    format: str
    steps: Sequence[dict]  # parsed steps in (repeat, step) order: a list, or ``StepColumns`` from ``parse_stream``
    error: Optional[str]
    facts: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    sha256: Optional[str] = None  # the file's digest, where the parse took it on its way (``parse_file``)


def parse_lines(lines: Iterable[str], fmt: Optional[str]) -> Parsed:
    """Feed every raw line to the format's stream parser; ``fmt`` None: no format recognised."""
    parser = PARSERS[fmt]() if fmt in PARSERS else Unrecognised()
    steps: list[dict] = []
    for line in lines:
        steps += parser.feed(line)
    return finished(parser, steps, fmt)


def finished(parser: StreamParser, steps: list[dict], fmt: Optional[str]) -> Parsed:
    steps += parser.finish()
    steps.sort(key=lambda s: (s["repeat"], s["step"]))
    return Parsed(fmt or "unknown", steps, no_steps(parser, steps, fmt), parser.facts, with_unread(parser))


def with_unread(parser: StreamParser) -> dict:
    """The parser's run facts for the result's source, with the count of lines it recognised as step lines but
    could not read (``source.unparsed_lines``) and the first of them (``source.unparsed_examples``)."""
    return {**parser.extra, "unparsed_lines": parser.unparsed_lines,
            "unparsed_examples": list(parser.unparsed_examples)}


def no_steps(parser: StreamParser, steps, fmt: Optional[str]) -> Optional[str]:
    """The parse's error: the failure the log shows, else none found when no step was."""
    if parser.error is None and not len(steps):
        return "no training step found" + ("" if fmt else " (format not recognised)")
    return parser.error


def parse_stream(f: TextIO, fmt: Optional[str], block_chars: int = BLOCK_CHARS) -> Parsed:
    """A text stream read in blocks (each cut at its last line end) through ``feed_block``: the same steps as
    ``parse_lines`` over its lines (held as columns: ``StepColumns``), faster on long logs."""
    parser = PARSERS[fmt]() if fmt in PARSERS else Unrecognised()
    steps = StepColumns()
    for block in line_blocks(f, block_chars):
        steps.add(parser.feed_block(block) if block.endswith("\n") else parser.feed(block))
    return _parsed(parser, steps, fmt)


def parse_file(path: Path, fmt: Optional[str], encoding: str = "utf-8", block_bytes: int = BLOCK_CHARS,
               workers: Optional[int] = None) -> Parsed:
    """A log file, as ``parse_stream`` reads it opened with ``encoding`` (``errors="replace"``). A long UTF-8 file
    of a format that reads tables has its blocks' tables read by ``workers`` processes (``tprimat.logs.blocks``;
    None: one per core), each from the file itself; the parser takes the tables in order and reads the text of
    the blocks it reads line by line."""
    parser = PARSERS[fmt]() if fmt in PARSERS else Unrecognised()
    workers = workers_for(os.path.getsize(path), block_bytes) if workers is None else workers
    if workers < 1 or codecs.lookup(encoding).name != "utf-8" or type(parser).read_table is StreamParser.read_table:
        with open(path, encoding=encoding, errors="replace") as f:
            return parse_stream(f, fmt, block_bytes)
    steps, digest = StepColumns(), hashlib.sha256()
    for block, table in with_tables(file_blocks(str(path), block_bytes), parser.block_table, workers):
        digest.update(block.raw())  # here, while the workers read the blocks ahead: no second pass over the file
        if table is not None and table is not UNREAD and (offered := parser.feed_table(table)) is not None:
            steps.add(offered)
            continue
        text = block.text()
        steps.add(parser.feed_block(text, table) if text.endswith("\n") else parser.feed(text))
    return dataclasses.replace(_parsed(parser, steps, fmt), sha256=digest.hexdigest())


def _parsed(parser: StreamParser, steps: StepColumns, fmt: Optional[str]) -> Parsed:
    steps.add(parser.finish())
    steps.sort()
    return Parsed(fmt or "unknown", steps, no_steps(parser, steps, fmt), parser.facts, with_unread(parser))


def parse_text(raw: str, fmt: str = "auto") -> Parsed:
    chosen = detect(raw) if fmt == "auto" else fmt
    return parse_lines(raw.splitlines(), chosen)
