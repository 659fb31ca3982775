"""Ingested results hold only stated facts, every headline figure says where it came from, and the live
external path reads a log line by line into exactly the records ``tprimat ingest`` reads from the whole file.
Expected values are hand computations from the fixture lines."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_ingest import CORPUS_LOGS, DEEPSPEED, HF, MEGATRON, NEMO, PRIMUS, TITAN
from tprimat.backends.external.base import LiveSteps
from tprimat.compose import compose
from tprimat.ingest.build import Meta, ingest_text
from tprimat.logs.parsers import detect, parse_file, parse_lines, parse_stream, parse_text
from tprimat.results.result import validate_result
from tprimat.spec.build import build_spec

ESC = "\x1b"
# Megatron-DeepSpeed: exact consumed tokens, actual seqlen, samples/s and its own TFLOPs field.
MEGATRON_DS = "".join(
    f" iteration {i:>8}/     100 | consumed samples: {512 * i:>12} | consumed tokens: {512 * 2048 * i:>12} | "
    f"elapsed time per iteration (ms): {t:.1f} | learning rate: 1.000E-04 | global batch size:   512 | "
    f"lm loss: 7.0{i}E+00 | loss scale: 65536.0 | actual seqlen:  2048 | number of skipped iterations:   0 | "
    f"number of nan iterations:   0 | samples per second: {512 / t * 1000:.3f} | TFLOPs: {tf:.2f} |\n"
    for i, t, tf in ((1, 4000.0, 150.0), (2, 2000.0, 300.0), (3, 2000.0, 300.0), (4, 2000.0, 300.0)))
# Every rank prints the step; rank 0's values are the step's, every rank's time is kept.
RANKED = "".join(f"[rank{r}]: iteration        5/      10 | elapsed time per iteration (ms): {1000 + r}.0 | "
                 f"lm loss: {r + 1}.000000E+00 | global batch size:   8 |\n" for r in (2, 0, 1))
ARGS_DUMP = """\
------------------------ arguments ------------------------
  global_batch_size ............................... 16
  group_query_attention ........................... True
  hidden_size ..................................... 4096
  ffn_hidden_size ................................. 14336
  num_attention_heads ............................. 32
  num_layers ...................................... 32
  num_query_groups ................................ 8
  padded_vocab_size ............................... 128256
  seq_length ...................................... 8192
  swiglu .......................................... True
  tensor_model_parallel_size ...................... 2
  pipeline_model_parallel_size .................... 1
  context_parallel_size ........................... 1
  world_size ...................................... 8
-------------------- end of arguments ---------------------
"""
MLPERF = "\n".join(":::MLLOG " + json.dumps(r) for r in [
    {"key": "global_batch_size", "value": 32, "time_ms": 1, "metadata": {}},
    {"key": "max_sequence_length", "value": 8192, "time_ms": 1, "metadata": {}},
    {"key": "submission_benchmark", "value": "llama31_8b", "time_ms": 1, "metadata": {}},
    {"key": "run_start", "value": None, "time_ms": 10, "metadata": {}},
    {"key": "block_start", "value": None, "time_ms": 10, "metadata": {"samples_count": 0}},
    {"key": "tracked_stats", "value": {"throughput": 30.0}, "time_ms": 20, "metadata": {"step": 12288}},
    {"key": "block_stop", "value": None, "time_ms": 20, "metadata": {"samples_count": 12288}},
    {"key": "block_start", "value": None, "time_ms": 30, "metadata": {"samples_count": 12288}},
    {"key": "tracked_stats", "value": {"throughput": 32.0}, "time_ms": 40, "metadata": {"step": 24576}},
    {"key": "block_stop", "value": None, "time_ms": 40, "metadata": {"samples_count": 24576}},
    {"key": "eval_accuracy", "value": 3.25, "time_ms": 45, "metadata": {"samples_count": 24576}},
    {"key": "run_stop", "value": None, "time_ms": 50, "metadata": {"status": "success"}}])
SYSTEM = {"number_of_nodes": "1", "accelerators_per_node": "8", "accelerator_model_name": "AMD Instinct MI355X"}


def test_a_log_that_states_nothing_gets_no_invented_figures():
    result = ingest_text(MEGATRON, "m.log", Meta(compose, warmup_steps=0))
    spec, plan, summary = result["spec"], result["plan"], result["summary"]
    assert spec["model"]["name"] is None and spec["training"]["seq_length"] is None
    assert plan["world_size"] is None and plan["flops_per_token"] is None and plan["tokens_per_step"] is None
    assert summary["tokens_per_s_per_device"] is None and summary["tokens_per_s"] is None
    assert summary["tflops_per_device"] == 300.5 and summary["provenance"]["tflops_per_device"] == "reported"
    assert summary["provenance"]["step_time_s"] == "reported" and summary["step_time_s"]["median"] == 4.1005
    assert result["source"]["stated"] == {"framework.name": "log format megatron",  # and what every step prints:
                                          "training.global_batch_size": "log: every step line prints global batch size 256"}
    assert spec["training"]["global_batch_size"] == 256
    assert any("no throughput" in w for w in result["warnings"]) and validate_result(result) == []


def test_megatron_arguments_dump_states_the_model_layout_and_batch():
    text = ARGS_DUMP + MEGATRON.replace("global batch size:   256", "global batch size:    16")
    result = ingest_text(text, "m.log", Meta(compose, warmup_steps=0))
    spec, plan, summary = result["spec"], result["plan"], result["summary"]
    assert spec["model"]["num_kv_heads"] == 8 and spec["model"]["vocab_size"] == 128256
    assert (plan["world_size"], plan["tp"], plan["dp"], plan["tokens_per_step"]) == (8, 2, 4, 16 * 8192)
    tokens_per_s = 3 * 16 * 8192 / (5.0 + 4.0 + 4.1005)
    assert summary["tokens_per_s"] == pytest.approx(tokens_per_s) and summary["provenance"]["tokens_per_s"] == "computed"
    # Llama 3.1 8B, Megatron convention (FACTS.md section 1), by hand:
    dense = 4096 * 14336 * 3 * 32 + (4096 * (4096 + 2 * 1024) + 4096 * 4096) * 32 + 4096 * 128256
    per_token = 6 * dense + 6 * 8192 * 4096 * 32
    assert plan["flops_per_token"] == pytest.approx(per_token)
    assert summary["tflops_per_device"] == pytest.approx(per_token * tokens_per_s / 8 / 1e12)
    assert result["source"]["stated"]["training.seq_length"] == "log: arguments dump (seq_length)"
    assert any(w.startswith("tflops_per_device: computed") for w in result["warnings"])  # 300.5 printed vs ours


def test_user_overrides_are_stated_and_win_over_the_log():
    meta = Meta(compose, ["training.seq_length=4096", "world_size=8"], warmup_steps=0)
    result = ingest_text(MEGATRON, "m.log", meta)
    assert result["spec"]["training"]["seq_length"] == 4096 and result["source"]["stated"]["world_size"] == "user (--devices)"
    assert result["summary"]["tokens_per_s_per_device"] == pytest.approx(3 * 256 * 4096 / (5.0 + 4.0 + 4.1005) / 8)
    assert result["spec"]["model"]["name"] is None and result["plan"]["flops_per_token"] is None


def test_megatron_deepspeed_fields_and_exact_consumed_tokens():
    assert detect(MEGATRON_DS) == "megatron"
    result = ingest_text(MEGATRON_DS, "mds.log", Meta(compose, ["world_size=4"], warmup_steps=1))
    steps = result["steps"]
    assert steps[1]["reported"]["tflops_per_gpu"] == 300.0 and steps[1]["reported"]["samples_per_s"] == 256.0
    assert steps[1]["reported"]["actual_seqlen"] == 2048 and steps[1]["tokens"] == 512 * 2048
    assert result["summary"]["tokens_per_s_per_device"] == pytest.approx(512 * 2048 / 2.0 / 4)
    assert result["summary"]["reported"]["tflops_per_gpu"] == 300.0
    assert result["warnings"] == [] and result["spec"]["training"]["global_batch_size"] == 512


def test_a_stated_sequence_length_the_log_contradicts_is_named_and_the_printed_one_used():
    """The user says 4096; every step prints actual seqlen 2048 and consumed tokens growing by 512 x 2048 =
    1,048,576: the step held 2048-token samples, and a throughput from 4096 would be twice the truth."""
    result = ingest_text(MEGATRON_DS, "mds.log", Meta(compose, ["world_size=4", "training.seq_length=4096"],
                                                       warmup_steps=1))
    assert [s["tokens"] for s in result["steps"]] == [1_048_576] * 4
    assert result["summary"]["tokens_per_s_per_device"] == pytest.approx(1_048_576 / 2.0 / 4)
    [warning] = result["warnings"]
    assert warning.startswith("training.seq_length=4096 (user) but the log prints actual seqlen 2048")
    # without the printed length the stated one is used, and the consumed tokens say it is wrong
    silent = MEGATRON_DS.replace("actual seqlen:  2048 | ", "")
    result = ingest_text(silent, "mds.log", Meta(compose, ["world_size=4", "training.seq_length=4096"], warmup_steps=1))
    assert result["steps"][1]["tokens"] == 512 * 4096
    assert any("2,097,152 used at step 2" in w and "grow by 1,048,576 per step" in w for w in result["warnings"])


def test_tprimat_ingest_prints_each_headline_figure_with_its_source_and_the_warnings(tmp_path, capsys):
    from tprimat.cli import main

    (tmp_path / "mds.log").write_text(MEGATRON_DS)
    with pytest.raises(SystemExit) as exit_code:
        main(["ingest", str(tmp_path / "mds.log"), "--devices", "4", "--seq-length", "4096", "--warmup-steps", "1",
              "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out.splitlines()
    assert exit_code.value.code == 0 and out[0].startswith(f"{tmp_path / 'mds.log'}: megatron, 4 steps, status ok")
    # steps 2-4: 512 x 2048 tokens (the printed length) in 2.0 s on 4 devices; TFLOP/s as printed (no model stated)
    assert out[1] == "  131,072 tokens/s/device (computed); 300.0 TFLOP/s/device (reported)"
    assert out[2].startswith("  warning: training.seq_length=4096 (user) but the log prints actual seqlen 2048")


@pytest.mark.parametrize("flags, expected", [
    (["--set", "training.seq_length=-5"], ["training.seq_length=-5: must be >= 1"]),
    (["--tp", "0", "--precision", "fp7"], ["training.precision=fp7: must be one of bf16, fp32, fp8",
                                           "parallelism.tp=0: must be >= 1"]),
    (["--devices", "0", "--warmup-steps", "-1"], ["world_size=0 (--devices): must be >= 1",
                                                  "benchmark.warmup_steps=-1 (--warmup-steps): must be >= 0"]),
    (["--set", "training.optimizer.lr=1e-9"],  # below the default min_lr: the rule names both keys
     ["training.optimizer.min_lr=0.0002, training.optimizer.lr=1e-09: min_lr must not exceed lr"]),
    (["--seq-length", "abc"], ["Error merging override training.seq_length=abc Value 'abc' of type 'str' could not "
                               "be converted to Integer"]),
])
def test_tprimat_ingest_refuses_what_no_run_could_have_had_and_writes_nothing(tmp_path, capsys, flags, expected):
    """A stated value is the premise of every figure computed from it (a sequence length of -5 gave negative
    tokens and a result that tprimat check rejects): the command line is checked by a launch's own rules for the
    keys it states, one line per broken rule, exit 2, nothing written."""
    from tprimat.cli import main

    (tmp_path / "mds.log").write_text(MEGATRON_DS)
    with pytest.raises(SystemExit) as exit_code:
        main(["ingest", str(tmp_path / "mds.log"), *flags, "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out.splitlines()
    assert exit_code.value.code == 2 and not (tmp_path / "out").exists()
    assert out[0].startswith("tprimat ingest: nothing ingested")
    assert out[1:] == [f"  {line}" for line in expected]


def test_a_batch_size_printed_alike_on_every_step_is_stated_and_a_ramped_one_is_not():
    ramped = MEGATRON_DS.replace("global batch size:   512 |", "global batch size:   256 |", 1)
    result = ingest_text(ramped, "mds.log", Meta(compose, ["world_size=4"], warmup_steps=1))
    assert result["spec"]["training"]["global_batch_size"] is None
    assert "training.global_batch_size" not in result["source"]["stated"]
    assert [s["tokens"] for s in result["steps"]] == [256 * 2048, *[512 * 2048] * 3]  # each step its own


def test_rank_zero_values_win_and_every_rank_time_is_kept():
    [step] = parse_text(RANKED, "megatron").steps
    assert step["loss"] == 1.0 and step["step_time_s"] == 1.0
    assert step["reported"]["step_time_s_by_rank"] == {"2": 1.002, "0": 1.0, "1": 1.001}


def test_mlperf_blocks_with_a_system_description():
    result = ingest_text(MLPERF, "result_0.txt", Meta(compose, system=SYSTEM))
    assert result["source"]["format"] == "mlperf" and [s["step"] for s in result["steps"]] == [384, 768]
    assert result["spec"]["model"]["name"] == "llama" and result["spec"]["platform"]["gpu"] == "mi355x"
    assert result["plan"]["world_size"] == 8 and result["source"]["final_eval_accuracy"] == 3.25
    # 32 sequences / (32 / 30 s) and / (32 / 32 s): tokens over time of both blocks, per GPU
    expected = 2 * 32 * 8192 / (32 / 30.0 + 32 / 32.0) / 8
    assert result["summary"]["tokens_per_s_per_device"] == pytest.approx(expected)
    assert result["summary"]["provenance"]["step_time_s"] == "computed" and validate_result(result) == []


def test_torchtitan_step_time_from_tps_when_the_tokens_are_stated():
    launcher = ("+ torchrun --nproc_per_node=2 -m torchtitan.train --training.seq_len=1024 "
                "--training.local_batch_size=4 --parallelism.tensor_parallel_degree=1 "
                "--parallelism.pipeline_parallel_degree=1 --parallelism.context_parallel_degree=1\n")
    result = ingest_text(launcher + TITAN, "t.log", Meta(compose, warmup_steps=0))
    assert result["plan"]["world_size"] == 2 and result["spec"]["training"]["global_batch_size"] == 8
    one, two = result["steps"]
    assert one["step_time_s"] == pytest.approx(8 * 1024 / (1234 * 2)) and two["step_time_s"] == pytest.approx(8 * 1024 / 4000)
    assert result["summary"]["provenance"]["step_time_s"] == "computed"


def _live(text: str, fmt: str) -> list[dict]:
    spec = build_spec(compose(["logging.wandb.mode=disabled", "platform=cpu"]))
    records = []
    live = LiveSteps(fmt, spec, 1, records.append)
    for line in text.splitlines(keepends=True):
        live.line(line)
    live.close()
    return sorted(live.steps, key=lambda s: s["step"])


def _fields(steps: list[dict]) -> list[dict]:
    """What the parser read: the live path completes its steps in place (tokens, warm-up), ingest later."""
    drop = ("step_time_s_from", "step_time_s_printed")
    derived = ("reported", "tokens", "warmup", "repeat")
    return [{**{k: v for k, v in s.items() if k not in derived},
             "reported": {k: v for k, v in s["reported"].items() if k not in drop}} for s in steps]


FIXTURES = [("megatron", MEGATRON), ("primus", PRIMUS), ("nemo", NEMO), ("torchtitan", TITAN), ("deepspeed", DEEPSPEED),
            ("megatron", RANKED), ("megatron", MEGATRON_DS), ("mlperf", MLPERF)]


@pytest.mark.parametrize("fmt,text", FIXTURES)
def test_live_replay_gives_the_records_of_ingesting_the_whole_log(fmt, text):
    assert _fields(_live(text, fmt)) == _fields(parse_text(text, fmt).steps)


@pytest.mark.skipif(not CORPUS_LOGS, reason="conformance corpus ../shared/logs not present")
@pytest.mark.parametrize("log", CORPUS_LOGS)
def test_live_replay_of_every_corpus_log(log):
    text = log.read_text(errors="replace")
    fmt = detect(text) or "megatron"  # a run that died before its first step: the backend's own format
    if fmt == "hf":  # the transformers backend runs in process: HF logs are only ingested
        pytest.skip("HF Trainer logs are never streamed live")
    assert _fields(_live(text, fmt)) == _fields(parse_text(text, fmt).steps)


def _blocks_equal_lines(path, fmt):
    with open(path, errors="replace") as f:
        by_line = parse_lines(f, fmt)
    for block_chars in (97, 4096, 1 << 20, None):  # block edges inside lines, whole files; None: 4 KB blocks read
        if block_chars is None:  # from the file by two worker processes (tprimat.logs.blocks)
            by_block = parse_file(path, fmt, block_bytes=4096, workers=2)
        else:
            with open(path, errors="replace") as f:
                by_block = parse_stream(f, fmt, block_chars)
        assert _fields(by_block.steps) == _fields(by_line.steps), block_chars
        assert (by_block.facts, by_block.error, by_block.extra) == (by_line.facts, by_line.error, by_line.extra)


SHORT_AND_ODD = """iteration 1/ 4 | lm loss: 2.0 | elapsed time per iteration (ms): 10.0 |
0: [2026-01-01 00:00:00] iteration    2/   4 | consumed samples: 64 | elapsed time per iteration (ms): 900.0 | lm loss: 1.9 |
1: [2026-01-01 00:00:00] iteration    2/   4 | consumed samples: 64 | elapsed time per iteration (ms): 950.0 | lm loss: 1.9 |
[Rank 0] (after 2 iterations) memory (MB) | allocated: 1024.0 | max allocated: 2048.0 | reserved: 3000.0
[rank1]: iteration    3/   4 | consumed samples: 96 | elapsed time per iteration (ms): 980.0 | lm loss: 1.8 |
[rank0]: iteration    3/   4 | consumed samples: 96 | elapsed time per iteration (ms): 910.0 | lm loss: 1.7 |
\x1b[32m0: iteration    4/   4 | consumed samples: 128 | elapsed time per iteration (ms): 905.0 | lm loss: 1.6 |\x1b[0m
"""


@pytest.mark.parametrize("fmt,text", [*FIXTURES, ("megatron", SHORT_AND_ODD)])
def test_reading_in_blocks_gives_the_records_of_reading_line_by_line(fmt, text, tmp_path):
    path = tmp_path / "run.log"
    path.write_text(text)
    _blocks_equal_lines(path, fmt)


@pytest.mark.skipif(not CORPUS_LOGS, reason="conformance corpus ../shared/logs not present")
@pytest.mark.parametrize("log", CORPUS_LOGS)
def test_reading_every_corpus_log_in_blocks(log):
    with open(log, errors="replace") as f:
        fmt = detect(f.read()) or "megatron"
    _blocks_equal_lines(log, fmt)


def test_rank_zero_wins_on_the_block_path(tmp_path):
    path = tmp_path / "run.log"
    path.write_text(SHORT_AND_ODD)
    with open(path) as f:
        steps = {s["step"]: s for s in parse_stream(f, "megatron").steps}
    assert steps[2]["step_time_s"] == 0.9 and steps[2]["reported"]["step_time_s_by_rank"] == {"0": 0.9, "1": 0.95}
    assert steps[2]["memory_gib"] == 1.0 and steps[2]["peak_memory_gib"] == 2.0
    assert steps[3]["step_time_s"] == 0.91 and steps[3]["loss"] == 1.7  # rank 0 printed second, and won
    assert steps[4]["loss"] == 1.6 and len(steps) == 4


def test_hf_is_not_a_live_format():
    assert parse_text(HF).format == "hf"


def test_a_parsed_step_is_the_result_step_object():
    """Parsers build steps keyed and ordered as the result's steps, so ingest completes them in place."""
    from tprimat.logs.stream import new_step
    from tprimat.results.records import FIELD_NAMES

    assert tuple(new_step(1, {})) == FIELD_NAMES


def test_a_printed_batch_size_that_is_not_positive_states_nothing():
    """Found by the fuzz test: "global batch size: -1" gave -128 tokens per step, which the schema refuses."""
    from tprimat.results.records import tokens_of

    step = {"step": 2, "reported": {"global_batch_size": -1.0, "actual_seqlen": 0.0}}
    assert tokens_of(step, None, 128, None) is None
    assert tokens_of(step, 4, 128, None) == 512  # the stated batch size is used instead
    assert tokens_of(step, 4, None, None) is None  # a printed sequence length of 0 states nothing


def test_detect_decides_from_the_first_look_only_on_one_clear_format():
    """A long Megatron-DeepSpeed log (its banner names DeepSpeed) is weighed over the whole head as before; a
    head of one format's step lines only is that format."""
    long_ds = "[INFO] [config.py:1] deepspeed config: zero stage 1\n" * 2000 + MEGATRON_DS * 400
    assert len(long_ds) > 256 << 10 and detect(long_ds) == "megatron"
    assert detect(MEGATRON * 2000) == "megatron"
    banner = "  hidden_size ..................................... 4096\n" * 6000  # longer than the first look
    assert len(banner) > 256 << 10 and detect(banner + MEGATRON * 50) == "megatron"


def test_completing_steps_at_once_equals_one_by_one():
    """The ingest's fast completion (one tokens per step, printed times) gives what ``complete_step`` gives."""
    import copy

    from tprimat.results.records import complete_step, complete_uniform

    steps = parse_text(MEGATRON * 3, "megatron").steps
    fast, slow = copy.deepcopy(steps), copy.deepcopy(steps)
    assert complete_uniform(fast, None, 4096, warmup=2)
    previous = None
    for i, s in enumerate(slow):
        complete_step(s, None, 4096, 8, previous, i < 2, [])
        previous = s
    assert fast == slow and fast[0]["tokens"] == fast[0]["reported"]["global_batch_size"] * 4096
    odd = copy.deepcopy(steps)
    odd[1]["reported"]["global_batch_size"] = 2 * odd[0]["reported"]["global_batch_size"]
    assert not complete_uniform(odd, None, 4096, warmup=2) and odd[1]["tokens"] is None  # per step, untouched


def test_parsed_steps_read_as_step_records():
    """A parsed step is the result's step object and reads as a step record: the same summary either way."""
    from tprimat.results.metrics import summarize
    from tprimat.results.records import FIELD_NAMES, as_record, complete_uniform

    steps = parse_text(MEGATRON * 3, "megatron").steps
    assert complete_uniform(steps, None, 4096, warmup=2)
    records = [as_record(s) for s in steps]
    assert all(getattr(s, name) == getattr(r, name) for s, r in zip(steps, records) for name in FIELD_NAMES)
    assert summarize(steps, 8, 1e9, 989.0, timing="reported") == summarize(records, 8, 1e9, 989.0, timing="reported")
    assert json.loads(json.dumps(steps)) == [dict(s) for s in steps]


STEP_ROWS = st.lists(st.fixed_dictionaries({
    "step_time_s": st.none() | st.sampled_from([0.0, 0.5, 1.0, 1.25, 3.0]), "tokens": st.none() | st.sampled_from([0, 64, 4096]),
    "loss": st.none() | st.floats(0, 10), "peak_memory_gib": st.none() | st.floats(0, 80), "repeat": st.integers(0, 2),
    "warmup": st.booleans(), "reported": st.none() | st.fixed_dictionaries({}, optional={
        "tflops_per_gpu": st.none() | st.floats(-1, 500), "step_time_s_from": st.just("tps")})}), max_size=12)


@settings(max_examples=300, deadline=None)
@given(rows=STEP_ROWS)
def test_the_summary_by_hand_from_records_and_from_step_objects(rows):
    """The summary read from step records, from the result's step objects and from step objects missing
    fields agrees with a by-hand reading of the rows: warm-up steps left out, tokens over time, medians."""
    import statistics

    from tprimat.results.metrics import summarize
    from tprimat.results.records import StepRecord

    records = [StepRecord(step=i, lr=None, grad_norm=None, **row) for i, row in enumerate(rows)]
    summary = summarize(records, 8, 1e9, 989.0, timing="reported")
    assert summary == summarize([r.as_dict() for r in records], 8, 1e9, 989.0, timing="reported")
    assert summary == summarize([{k: v for k, v in r.as_dict().items() if v is not None} for r in records],
                                8, 1e9, 989.0, timing="reported")
    kept = [row for row in rows if not row["warmup"]]
    timed = [row for row in kept if row["step_time_s"]]
    measured = [row for row in timed if row["tokens"]]
    printed = [row["reported"]["tflops_per_gpu"] for row in kept if row["reported"]
               and row["reported"].get("tflops_per_gpu") is not None and row["reported"]["tflops_per_gpu"] >= 0]
    if not timed and not printed:
        assert summary is None
        return
    assert summary["measured_steps"] == (len(timed) or len(kept))
    assert summary["warmup_steps"] == len(rows) - len(kept)
    assert summary["repeats"] == len({row["repeat"] for row in rows})
    assert summary["reported"].get("tflops_per_gpu") == (statistics.median(printed) if printed else None)
    peaks = [row["peak_memory_gib"] for row in kept if row["peak_memory_gib"] is not None]
    assert summary["peak_memory_gib"] == (max(peaks) if peaks else None)
    assert summary["loss_first"] == next((row["loss"] for row in rows if row["loss"] is not None), None)
    if measured:
        tokens, seconds = sum(row["tokens"] for row in measured), sum(row["step_time_s"] for row in measured)
        assert summary["tokens_per_s"] == pytest.approx(tokens / seconds)
        assert [p["repeat"] for p in summary["per_repeat"]] == sorted({row["repeat"] for row in measured})
        assert sum(p["measured_steps"] for p in summary["per_repeat"]) == len(measured)
    else:
        assert summary["tokens_per_s"] is None and summary["per_repeat"] == []
    derived = any(row["reported"] and row["reported"].get("step_time_s_from") for row in timed)
    assert summary["provenance"]["step_time_s"] == (("computed" if derived else "reported") if timed else None)
