"""Nothing dropped without a count: a line a parser recognises as a step line but cannot read is counted in
``source.unparsed_lines`` (the first three in ``source.unparsed_examples``, cut to 200 characters), ``tprimat
ingest`` warns, and ``tprimat compare`` flags a log of which more than 1% of the step lines went unread. The
expected counts are the mangled lines the test itself wrote."""

from pathlib import Path

from tests.test_blocks import LINE
from tprimat.compare.groups import build_groups
from tprimat.compare.load import Loaded
from tprimat.compose import compose
from tprimat.ingest.build import Meta, ingest_file, ingest_text
from tprimat.logs import parsers


def megatron_log(steps: int, mangled_every: int, first: int = 5) -> tuple[str, int]:
    """A Megatron log whose every ``mangled_every``-th iteration field reads ``5x`` instead of ``5``, the rest of
    the line intact; returns the text and how many lines were mangled."""
    lines, bad = [], 0
    for i in range(1, steps + 1):
        line = LINE.format(r=0, i=i, s=512 * i, ms=1000 + i % 7, loss=10 / i)
        if i % mangled_every == first % mangled_every:
            line, bad = line.replace(f"iteration {i:>8}/", f"iteration {str(i) + 'x':>8}/"), bad + 1
        lines.append(line)
    return "".join(lines), bad


def test_mangled_iteration_fields_are_counted_not_silently_dropped():
    text, bad = megatron_log(400, 10)
    assert bad == 40
    result = ingest_text(text, "mangled.log", Meta(compose, ["world_size=8"]))
    assert len(result["steps"]) == 360
    source = result["source"]
    assert source["unparsed_lines"] == 40 and len(source["unparsed_examples"]) == 3
    assert all(len(e) <= 200 and "5x/" in source["unparsed_examples"][0] for e in source["unparsed_examples"])
    assert any("40 of 400 lines recognised as step lines could not be read" in w for w in result["warnings"])


def test_a_clean_log_has_no_unparsed_lines_and_no_warning():
    text, _ = megatron_log(100, 10 ** 6, first=0)
    result = ingest_text(text, "clean.log", Meta(compose, ["world_size=8"]))
    assert result["source"]["unparsed_lines"] == 0 and len(result["steps"]) == 100
    assert not any("could not be read" in w for w in result["warnings"])


def test_the_parallel_path_counts_the_same_lines(tmp_path, monkeypatch):
    text, bad = megatron_log(20_000, 97, first=7)
    path = tmp_path / "long.log"
    path.write_text(text)
    counts = {}
    for workers in (0, 2):
        parsed = parsers.parse_file(path, "megatron", workers=workers)
        counts[workers] = (len(parsed.steps), parsed.extra["unparsed_lines"])
    assert counts[0] == counts[2] == (20_000 - bad, bad)


def test_compare_flags_a_log_with_more_than_one_percent_unread(tmp_path):
    meta = Meta(compose, ["world_size=8", "training.seq_length=4096", "training.global_batch_size=512"])
    flagged, fine = tmp_path / "flagged.log", tmp_path / "fine.log"
    flagged.write_text(megatron_log(400, 10)[0])  # 10% unread
    fine.write_text(megatron_log(400, 400, first=5)[0])  # 1 of 400: 0.25%, under the 1% line
    results = [ingest_file(p, meta) for p in (flagged, fine)]
    assert [r["source"]["unparsed_lines"] for r in results] == [40, 1]
    groups = build_groups([Loaded(Path(f"r{i}/result.json"), r) for i, r in enumerate(results)])
    flags = [f for g in groups for f in g.flags if f.startswith("unread step lines")]
    assert len(flags) == 1 and "40 of 400" in flags[0]


def test_a_negative_step_number_is_counted_not_written():
    """A NeMo line whose global_step was corrupted to -13: the step is left out and counted, and the result passes
    the schema ingest writes against (``tprimat check``'s validation)."""
    from tprimat.results.result import validate_result

    good = ("Training epoch 0, iteration {i}/99 | lr: 0.0003 | global_batch_size: 8 | global_step: {g} | "
            "reduced_train_loss: 9.1 | train_step_timing in s: 1.2 | consumed_samples: 8\n")
    text = "".join(good.format(i=i, g=i) for i in range(1, 6)) + good.format(i=6, g=-13) + good.format(i=7, g=7)
    result = ingest_text(text, "nemo.log", Meta(compose, ["world_size=8"]))
    assert result["source"]["format"] == "nemo" and [s["step"] for s in result["steps"]] == [1, 2, 3, 4, 5, 7]
    source = result["source"]
    assert source["unparsed_lines"] == 1 and "negative step number" in source["unparsed_examples"][0]
    assert validate_result(result) == []
