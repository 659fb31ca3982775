"""compare never lies and never crashes: doctored repeats and summaries are flagged, implausible figures are
flagged on any device, every interval contains its estimate, and any mix of ingested results compares."""

import copy
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_ingest import CORPUS_LOGS, DEEPSPEED, DIED, HF, MEGATRON, NEMO, PRIMUS, TITAN
from tests.test_provenance import MEGATRON_DS, MLPERF, RANKED, SYSTEM
from tprimat.compare import stats
from tprimat.compare.groups import build_groups, group_summary
from tprimat.compare.load import Loaded
from tprimat.compare.report import sections
from tprimat.compare.speedups import speedups
from tprimat.compose import compose
from tprimat.ingest.build import Meta, ingest_file, ingest_text
from tprimat.results.metrics import summarize
from tprimat.results.records import StepRecord

STATED = ["training.seq_length=2048", "world_size=8"]  # as the log prints it (actual seqlen)
# what a per-device rate is a rate of (a pair that leaves either unstated is refused), at a plausible rate:
# 512 x 2048 tokens in 2 s on 64 devices, 8,192 tokens/s/device x ~50 GFLOP/token ~ 410 TFLOP/s per H100
RATE_OF = ["model=llama", "world_size=64", "platform=nvidia", "platform.gpu=h100"]


def ingested(overrides=(), text=MEGATRON_DS):
    return ingest_text(text, "run.log", Meta(compose, [*STATED, *overrides], warmup_steps=1))


def comparable(overrides=()):
    return ingested([*RATE_OF, *overrides])


def loaded(*results):
    return [Loaded(Path(f"run{i}/result.json"), r) for i, r in enumerate(results)]


def resummarise(result):
    records = [StepRecord(**s) for s in result["steps"]]
    plan = result["plan"]
    result["summary"] = summarize(records, plan["world_size"], plan["flops_per_token"], plan["peak_tflops"], "reported")
    return result


def test_a_repeat_claiming_a_million_times_the_other_is_flagged_not_merged():
    honest = ingested()
    doctored = resummarise(copy.deepcopy(honest))
    for s in doctored["steps"]:
        s["step_time_s"] /= 1e6
    [group] = build_groups(loaded(honest, resummarise(doctored)))
    flag = next(f for f in group.flags if f.startswith("inconsistent repeats"))
    assert "run0/result.json" in flag and "run1/result.json" in flag  # listed one by one
    lo, hi = group.metrics["tokens_per_s_per_device_ci"]
    assert lo <= group.metrics["tokens_per_s_per_device"] <= hi


def test_a_summary_that_disagrees_with_its_own_steps_is_inconsistent():
    doctored = copy.deepcopy(ingested())
    doctored["summary"]["tokens_per_s"] *= 1e6
    [group] = build_groups(loaded(doctored))
    assert any(f.startswith("INCONSISTENT") for f in group.flags)
    honest_rate = 512 * 2048 * 3 / (2.0 * 3) / 8  # steps 2-4: 512 x 2048 tokens in 2.0 s each, 8 devices
    assert group.metrics["tokens_per_s_per_device"] == pytest.approx(honest_rate)  # from the steps, not the claim


def test_implausible_tflops_on_an_unknown_device_is_impossible():
    # 512 x 2048 tokens in 2 s on 64 devices: 8,192 tokens/s/device x ~50 GFLOP/token ~ 410 TFLOP/s: plausible.
    honest_llama = ["model=llama", "world_size=64"]
    fast = ingested(honest_llama)
    for s in fast["steps"]:
        s["step_time_s"] /= 1000  # ~410,000 TFLOP/s
    [group] = build_groups(loaded(resummarise(fast)))
    assert group.device == "?" and any("IMPOSSIBLE" in f and "fastest device in the hardware table" in f
                                       for f in group.flags)
    [honest] = build_groups(loaded(ingested(honest_llama)))
    assert not any("IMPOSSIBLE" in f for f in honest.flags)


def test_precision_pairs_are_compared_and_by_filters_the_axis():
    bf16, fp32 = comparable(["training.precision=bf16"]), comparable(["training.precision=fp32"])
    for s in fp32["steps"]:
        s["step_time_s"] *= 2
    groups = build_groups(loaded(bf16, resummarise(fp32)))
    [pair] = speedups(groups)
    assert pair.kind == "precision"
    assert (pair.point if pair.other.precision == "bf16" else 1 / pair.point) == pytest.approx(2.0)  # bf16 twice as fast
    assert len(speedups(groups, by="precision")) == 1
    assert speedups(groups, by="layout") == []
    with pytest.raises(ValueError, match="--by"):
        speedups(groups, by="colour")


def test_a_pair_whose_model_or_device_is_unstated_is_refused_and_other_unstated_axes_are_named():
    """Two ingested logs that never name their model (or device) are not shown to share it: a ratio of their
    rates would be no framework or precision speedup at all. Other axes a side leaves unstated ride along, named."""
    unnamed = [o for o in RATE_OF if not o.startswith("model=")]
    [pair] = speedups(build_groups(loaded(ingested([*unnamed, "training.precision=bf16"]),
                                          ingested([*unnamed, "training.precision=fp32"]))))
    assert pair.point is None and pair.refused.startswith("the model is not stated for ? | megatron")
    assert "--model" in pair.refused and pair.wording().startswith("refused: ")
    no_device = ["model=llama", "world_size=64"]
    [pair] = speedups(build_groups(loaded(ingested([*no_device, "training.precision=bf16"]),
                                          ingested([*no_device, "training.precision=fp32"]))))
    assert pair.refused.startswith("the device is not stated for llama | megatron | ? x64")
    assert "--gpu or --system" in pair.refused

    stated = ["methodology=maximum_performance", "training.compile=false", "training.activation_checkpointing=none",
              "parallelism.tp=2", "parallelism.pp=1", "parallelism.cp=1", "parallelism.dp=32",
              "training.global_batch_size=512", "training.micro_batch_size=1"]  # the log states its sequence length
    [pair] = speedups(build_groups(loaded(comparable([*stated[1:], "training.precision=bf16"]),
                                          comparable([*stated[1:], "training.precision=fp32"]))))
    assert pair.kind == "precision" and pair.refused is None and pair.unverified == ["methodology"]
    assert pair.wording().endswith("(unverified: a side does not state its methodology)")
    assert pair.as_dict()["unverified_axes"] == ["methodology"]
    [pair] = speedups(build_groups(loaded(comparable([*stated[:-1], "training.precision=bf16"]),
                                          comparable([*stated[:-1], "training.precision=fp32"]))))
    assert pair.unverified == ["training.micro_batch_size"]
    [pair] = speedups(build_groups(loaded(comparable([*stated, "training.precision=bf16"]),
                                          comparable([*stated, "training.precision=fp32"]))))
    assert pair.unverified == [] and "unverified" not in pair.wording()


def test_logs_that_do_not_say_what_ran_are_not_merged_as_repeats():
    """Two different logs that state neither their model nor their device are not evidence of one benchmark: each
    is its own group, named by its file. The same log twice is one group; logs that state both are repeats."""
    other_run = MEGATRON_DS + "[INFO] one more line: another log, the same settings\n"
    first = ingest_text(MEGATRON_DS, "a.log", Meta(compose, STATED, warmup_steps=1))
    second = ingest_text(other_run, "b.log", Meta(compose, STATED, warmup_steps=1))
    assert first["spec"] == second["spec"]  # nothing the logs state tells them apart
    groups = build_groups(loaded(first, second, copy.deepcopy(first)))
    assert sorted(len(g.runs) for g in groups) == [1, 2]  # a.log twice: one group of two runs; b.log alone
    assert sorted(g.label.rsplit(" | ", 1)[1] for g in groups) == ["a.log", "b.log"]
    assert sorted(group_summary(g)["logs"] for g in groups) == ["a.log", "b.log"]

    def named(text, name):
        return ingest_text(text, name, Meta(compose, [*STATED, *RATE_OF], warmup_steps=1))

    [group] = build_groups(loaded(named(MEGATRON_DS, "a.log"), named(other_run, "b.log")))
    assert len(group.runs) == 2 and group.logs == "a.log, b.log" and not group.label.endswith(".log")


def test_refused_pairs_are_counted_by_reason_on_the_console_and_listed_in_the_report():
    """Six devices of logs that never name their model: 6 x 5 / 2 = 15 device or platform pairs, each refused for
    the unstated model. Past ten refusals the console counts them by reason; report.md counts them too and lists the
    first five (REFUSED_EXAMPLES) as examples; comparison.json likewise, with the count by reason."""
    from rich.console import Console

    from tprimat.compare.report import sections
    from tprimat.compare.speedups import bounded
    from tprimat.compare.table import print_console

    devices = [("nvidia", "h100"), ("nvidia", "h200"), ("nvidia", "b200"), ("amd", "mi300x"), ("amd", "mi325x"),
               ("amd", "mi355x")]
    results = [ingested([f"platform={p}", f"platform.gpu={g}"]) for p, g in devices]
    groups = build_groups(loaded(*results))
    found = speedups(groups)
    assert len(found) == 15 and {s.refused_because for s in found} == {"model"}
    assert {s.as_dict()["refused_because"] for s in found} == {"model"}
    console = Console(record=True, width=260)
    print_console(groups, found, [], console)
    text = console.export_text()
    assert "refused 15 pairs" in text and "15: a side does not state its model (tprimat ingest --model)" in text
    assert "speedup," not in text  # no refused pair one by one
    lines = sections(groups, found, [], [], "median")
    listed = lines[lines.index("## Refused pairs"):]
    assert sum(line.startswith("- ") and "refused: the model is not stated" in line for line in listed) == 5
    assert "### A side does not state its model (tprimat ingest --model) (15)" in listed
    assert "- ... and 10 more pairs refused for the same reason" in listed
    written = bounded(found)
    assert len(written["speedups"]) == 5 and written["refused_pairs"] == [
        {"reason": "model", "text": "a side does not state its model (tprimat ingest --model)", "count": 15}]

    print_console(groups, found[:3], [], console := Console(record=True, width=260))
    assert console.export_text().count("refused: the model is not stated") == 3  # few: each one as it is


def test_a_log_too_short_for_its_warm_up_is_flagged_unless_it_starts_past_it():
    """Four printed steps (iterations 1-4) with benchmark.warmup_steps=5: three are excluded, the one measured
    step is the fourth of the run, which a longer run would have called warm-up. The same four lines printed at
    iterations 1001-1004 (an excerpt of a long run, 1,000 steps past any warm-up) are not flagged; nor is the
    short log when the user asks for one warm-up step."""
    def flags_of(text, warmup=None):
        result = ingest_text(text, "run.log", Meta(compose, STATED, warmup_steps=warmup))
        return [f for g in build_groups(loaded(result)) for f in g.flags]

    [flag] = [f for f in flags_of(MEGATRON_DS) if f.startswith("short warm-up")]
    assert "has 4 steps from step 1, so 3 of benchmark.warmup_steps=5 were excluded" in flag
    assert "its 1 measured steps are early ones" in flag
    late = MEGATRON_DS
    for i in (4, 3, 2, 1):
        late = late.replace(f"iteration {i:>8}/     100", f"iteration {1000 + i:>8}/    2000")
    assert "iteration     1004/    2000" in late
    assert not [f for f in flags_of(late) if f.startswith("short warm-up")]
    assert not [f for f in flags_of(MEGATRON_DS, warmup=1) if f.startswith("short warm-up")]


def test_compile_and_fp8_recipe_are_axes_and_a_pair_differing_in_two_is_not_put_down_to_one():
    """The GPT-2 XL matrix on an H100 grouped eager, compiled and fp8 runs under one label and called compile + fp8
    vs eager a precision speedup; each optimisation is now an axis, and its groups are labelled apart."""
    graphs = ["training.compile=true", "training.compile_mode=reduce-overhead"]
    eager = comparable(["training.precision=bf16", "training.compile=false"])
    compiled = comparable(["training.precision=bf16", *graphs])
    fp8 = comparable(["training.precision=fp8", "training.fp8.recipe=rowwise", *graphs])
    for s in compiled["steps"]:
        s["step_time_s"] /= 1.25
    groups = build_groups(loaded(eager, resummarise(compiled), fp8))
    assert len({g.label for g in groups}) == 3
    found = {s.kind: s for s in speedups(groups)}
    assert set(found) == {"compile", "precision"}  # eager bf16 vs compiled fp8 differ in two: no pair
    pair = found["compile"]
    assert {pair.baseline.compile, pair.other.compile} == {"eager", "compile reduce-overhead"}
    assert (pair.point if pair.other.compile != "eager" else 1 / pair.point) == pytest.approx(1.25)
    assert {found["precision"].baseline.numerics, found["precision"].other.numerics} == {"bf16", "fp8 rowwise"}
    assert len(speedups(groups, by="compile")) == 1


def test_under_maximum_performance_a_frameworks_own_sharding_and_recompute_go_with_it():
    """maximum_performance runs the tuned settings as each framework can (conf/methodology): FSDP2 with selective
    recompute for one, ZeRO-3 with full recompute for another is one framework comparison, not three axes."""
    tuned = comparable(["methodology=maximum_performance", "training.activation_checkpointing=selective",
                        "parallelism.fsdp=true"])
    other = copy.deepcopy(tuned)
    other["spec"]["framework"]["name"] = "deepspeed"
    other["spec"]["training"]["activation_checkpointing"] = "full"
    other["spec"]["parallelism"].update(fsdp=False, zero_stage=3)
    [pair] = speedups(build_groups(loaded(tuned, other)))
    assert pair.kind == "framework" and pair.refused is None
    other["spec"]["parallelism"]["tp"] = other["plan"]["tp"] = 2  # another mesh is not the framework's own tuning
    assert speedups(build_groups(loaded(tuned, other))) == []
    other["spec"]["parallelism"]["tp"] = other["plan"]["tp"] = None
    identical = [copy.deepcopy(r) for r in (tuned, other)]
    for r in identical:
        r["spec"]["methodology"]["name"] = "identical_config"
    assert speedups(build_groups(loaded(*identical))) == []  # there the settings must match: three axes differ


def test_a_pair_that_also_differs_in_batch_or_sequence_is_refused_naming_the_key():
    a = ingested(["training.precision=bf16", "training.global_batch_size=512"])
    b = ingested(["training.precision=fp32", "training.global_batch_size=256"])
    [pair] = speedups(build_groups(loaded(a, b)))
    assert pair.kind == "precision" and pair.point is None
    assert pair.refused == ("the groups also differ in training.global_batch_size (512 vs 256): the ratio would "
                            "measure that too") or "(256 vs 512)" in pair.refused


def test_intervals_cover_the_true_rate_at_their_stated_level():
    """Simulation with a known truth: steps of log-normal time (true rate = tokens / E[time]) and repeats of
    log-normal rate (true median known). The within-run interval covers the true rate and the order-statistics
    interval of the median covers the true median at about their stated levels (95%; the median's achieved
    coverage where few repeats allow less), never far below."""
    rng = np.random.default_rng(5)
    trials, sigma = 300, 0.1
    true_rate = 1000.0 / np.exp(sigma ** 2 / 2)  # E[time] of a log-normal(0, sigma) step
    covered = 0
    for _ in range(trials):
        times = np.exp(rng.normal(0, sigma, 60))
        interval = stats.within_run_ci([1000.0] * 60, list(times), seed=int(rng.integers(1 << 30)))
        covered += interval.lo <= true_rate <= interval.hi
    assert covered / trials >= 0.88
    hits, stated = 0, stats.median_ci(list(range(9)))[2]
    for _ in range(trials):
        rates = list(5000.0 * np.exp(rng.normal(0, 0.05, 9)))  # true median 5000
        interval = stats.repeats_ci(rates, "median")
        hits += interval.lo <= 5000.0 <= interval.hi
    assert hits / trials >= stated - 0.04 and interval.coverage == pytest.approx(stated)


def test_median_interval_from_order_statistics():
    lo, hi, coverage = stats.median_ci(list(range(1, 11)))  # n=10: [x(2), x(9)], 1 - 2 * 11/1024
    assert (lo, hi) == (2, 9) and coverage == pytest.approx(1 - 22 / 1024)
    assert stats.median_ci([3.0, 1.0])[2] == pytest.approx(0.5)  # two repeats: [min, max] covers 50%


def all_ingested() -> list[dict]:
    texts = [MEGATRON, PRIMUS, NEMO, TITAN, DEEPSPEED, HF, DIED, MEGATRON_DS, RANKED, MLPERF]
    results = [ingest_text(t, f"fixture{i}.log", Meta(compose)) for i, t in enumerate(texts)]
    results.append(ingest_text(MLPERF, "mlperf.log", Meta(compose, system=SYSTEM)))
    results += [ingest_file(p.values[0], Meta(compose)) for p in CORPUS_LOGS]
    return [r for r in results if r["status"] == "ok"]


INGESTED = all_ingested()


def compare_all(results: list[dict]) -> list[str]:
    groups = build_groups(loaded(*results))
    found = speedups(groups)
    [group_summary(g) for g in groups]
    [s.wording() for s in found]
    return sections(groups, found, [], [], "median")


def test_compare_reads_every_ingested_log_together():
    """Every ingested log with a throughput of its own reaches compare as its own group (no log states a model and
    device that would merge it with another's), carrying the figure its own summary states, and the report
    lists every group."""
    groups = build_groups(loaded(*INGESTED))
    assert len(INGESTED) >= 8
    figures = sorted(r["summary"]["tokens_per_s_per_device"] for r in INGESTED
                     if (r.get("summary") or {}).get("tokens_per_s_per_device"))
    grouped = sorted(g.metrics["tokens_per_s_per_device"] for g in groups if g.metrics.get("tokens_per_s_per_device"))
    assert grouped == pytest.approx(figures) and len(figures) >= 3  # the fixtures' own; the corpus adds more
    text = "\n".join(compare_all(INGESTED))
    assert "## Performance" in text and all(g.label.replace("|", "\\|") in text for g in groups)  # as tables escape it


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(range(len(INGESTED))), min_size=1, max_size=8))
def test_compare_never_crashes_on_random_subsets(indices):
    compare_all([INGESTED[i] for i in indices])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=1e-6, max_value=1e4, allow_nan=False), min_size=2, max_size=400))
def test_the_step_time_std_is_statistics_stdev(times):
    """The summary's fast sample standard deviation within rounding (of the data) of the standard library's
    exact one; equal times give exactly 0."""
    import math
    import statistics

    from tprimat.results.metrics import sample_std

    assert math.isclose(sample_std(times), statistics.stdev(times), rel_tol=1e-9, abs_tol=1e-13 * max(times))
    assert sample_std([times[0]] * len(times)) == 0.0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10**6, 10**6), min_size=1, max_size=60),
       st.lists(st.floats(min_value=1e-6, max_value=1e6), min_size=60, max_size=60))
def test_the_long_column_median_is_statistics_median(values, times):
    """The median a long step column takes by numpy's partition is exactly ``statistics.median``: the middle
    value, or the mean of the two middle ones; and a median of ratios, exactly that of Python's own divisions."""
    import operator
    import statistics

    import numpy as np

    from tprimat.results import metrics

    assert metrics.partition_median(np.asarray(values, dtype=float)) == statistics.median(map(float, values))
    ratios = statistics.median(map(operator.truediv, values, times))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metrics, "NUMPY_MEDIAN_MIN", 1)  # the numpy path on a short column
        assert metrics.median_ratio(values, times[:len(values)]) == ratios
        assert metrics.median(values) == statistics.median(map(float, values))


def test_a_log_without_tokens_still_shows_its_printed_step_times_and_memory():
    """A log that states no sequence length has no throughput of tprimat's own, but the step times and the peak
    memory it prints are measurements all the same: the group shows them (past warm-up), not n/a."""
    result = ingest_text(MEGATRON, "m.log", Meta(compose, warmup_steps=1))
    [group] = build_groups(loaded(result))
    assert group.metrics["measured_steps"] == 0 and group.metrics["tokens_per_s_per_device"] is None
    assert group.metrics["step_time_s"]["median"] == pytest.approx((4.0 + 4.1005) / 2)  # steps 2, 3 (step 1 warm-up)
    assert group.metrics["peak_memory_gib"] == 4.0  # "(after 2 iterations) ... max allocated: 4096.0" MB


def test_two_workloads_that_print_alike_are_told_apart_in_every_table():
    """One model and device at two sequence lengths: two groups, and the console table and report.md's table carry
    a "differs in" column naming the sequence length of each (the rows were identical in every column shown)."""
    from rich.console import Console

    from tprimat.compare.report import sections
    from tprimat.compare.table import print_console

    groups = build_groups(loaded(comparable(["training.seq_length=2048"]), comparable(["training.seq_length=4096"])))
    assert len(groups) == 2 and {g.distinction for g in groups} == {"training.seq_length=2048",
                                                                     "training.seq_length=4096"}
    console = Console(record=True, width=400)
    print_console(groups, [], [], console)
    text = console.export_text()
    assert "differs in" in text and "training.seq_length=2048" in text and "training.seq_length=4096" in text
    report = "\n".join(sections(groups, [], [], [], "median"))
    assert "| differs in |" in report and "training.seq_length=4096" in report
