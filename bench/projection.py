"""How close ``tprimat project`` comes to published throughput, and to tprimat's own CPU runs.

Every row of the tables the bench cites (per-GPU tokens/s of Llama 2 / 3 / 3.1 and GPT-3 models on H100, H200,
B200 and MI355X, from Megatron-Bridge, NeMo, torchtitan and MLPerf results) that the spec can express (the GPU,
model, precision, GPU count, batch and layout, and the hardware the source states: torchtitan's H100s are the
96 GB HBM2e part) is projected from the hardware table's published ceilings and the stacks' published kernel
figures (``tprimat.spec.kernels``), and one learned term, the per-operation gap on a GPU (``tprimat.spec.op_gap``,
learned by ``bench/op_gap.py`` from the development rows alone: this bench scores each development family at the
gap learned without it, leave-one-family-out, and the held-out sets at the gap learned from every development
family); nothing else is fitted to these rows. Each row is scored (``bench/projection_rows.py``:
the rows the method was developed against) or was held out (``bench/held_out_3.py`` and 4, MLPerf v5.0, v4.1 and
v4.0: each committed on its own before it was first scored, scored once, and re-scored since as the method changed:
their figures now are re-scores, not held-out scores); near-duplicates (one configuration at another GPU count or
software version) share a family and count once; the rows it cannot express are listed with why. Each median is
printed again with each modelled effect taken away (the stacks' attention kernels, torchtitan's op SAC, Transformer
Engine's FP8 quantize kernels, the learned gap). Then configs of tprimat's native trainer on
this CPU (tiny to 100 M parameters, seq 256-1024, 1 and 2 ranks, DDP, FSDP, TP, PP, recompute off, full and
selective) are each projected from their measured slice (four short runs at one recompute unit or half the stage's
layers x pp or half the step's micro batches) and run for real, whole, in the same three to five interleaved
rounds of 12 steps (10 measured), each run's fastest round against the spec's: ``tprimat project --measure
--verify``.

Prints one line per row (predicted, published or measured, error = predicted / reference - 1),
``mlperf_{amd,nvidia,}_median_abs_error=<x>`` over MLPerf v5.1's LLM submissions (the development rows),
``held_out_{amd,nvidia,}_median_abs_error=<x>`` over v5.0's (held out and scored once at 8ab792b; a re-score now),
``held_out_v4_{amd,nvidia,}_median_abs_error=<x>`` over v4.1's and v4.0's (held out and scored once at 6480e6d; a
re-score now), ``held_out_v51_405b_{amd,nvidia,}_median_abs_error=<x>`` over v5.1's llama31_405b submissions (held
out: committed alone at a220f8f, scored once at 5fe5a92, a re-score now; its two expressible rows are byte-identical
logs of v5.0's Nebius submissions, so not new evidence),
``cpu_median_abs_error=<x>`` over the CPU configs
(measured slice against the full run), ``cpu_held_out_median_abs_error=<x>`` over the second CPU set (scored three
times while the method changed: a development set, the name kept as an interface), and last
``projection_median_abs_error=<x>`` over the development families (the published tables and MLPerf v5.1, each at
the gap learned without it).

    python bench/projection.py [--no-cpu] [--only N] [--cpu-set bench|held-out|all]
    python bench/projection.py --held-out-2   # bench/held_out_2.py alone, scored once: held_out_2_cpu_median_abs_error=<x>
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import op_gap as op_gap_bench  # noqa: E402
from families import family_median  # noqa: E402
from mlperf_projection_rows import load  # noqa: E402
from projection_rows import NOT_EXPRESSIBLE, SCORED, row  # noqa: E402

from tprimat.execute.project import projection_of  # noqa: E402
from tprimat.spec import kernels, op_gap, record  # noqa: E402
from tprimat.spec.detect import cpu_precision  # noqa: E402

# Published rows held out: each file committed on its own before it was first scored (its docstring says which)
HELD_OUT_SETS = ("held_out_3", "held_out_4")
MLPERF_SCORED = "mlperf_rows_v51.json"  # MLPerf Training v5.1's llama31_8b and llama2_70b_lora submissions
# held out: v5.0's llama2_70b_lora and llama31_405b submissions, committed alone (a9159d6, its sha256 in the message)
# before this code read them
MLPERF_HELD_OUT = "mlperf_rows_v50.json"
# held out: v4.1's and v4.0's llama2_70b_lora and gpt3 submissions, committed alone (897bcd5, their sha256 in the
# message) before this code read them, after the attention-per-call change (feae29f)
MLPERF_HELD_OUT_V4 = ("mlperf_rows_v41.json", "mlperf_rows_v40.json")
# held out: v5.1's llama31_405b submissions, committed alone (a220f8f, its sha256 in the message) before this code read
# them, with nothing under tprimat/ changed since, and scored once at 5fe5a92 (bench/evidence/projection_5fe5a92.txt).
# Its two expressible rows (Nebius's H200 n64 and n128) are byte-identical logs of v5.0's Nebius 405B submissions, which
# v5.0's held-out set holds: a re-score of rows read since 8ab792b, not new evidence
MLPERF_HELD_OUT_V51_405B = "mlperf_rows_v51_405b.json"
TWO = ["platform.devices_per_node=2"]
M100 = ["model=llama_tiny", "model.name=llama_100m", "model.num_layers=8", "model.hidden_size=768",
        "model.ffn_hidden_size=2048", "model.num_attention_heads=12", "model.num_kv_heads=4", "model.vocab_size=32000",
        "model.rope_original_max_position=1024"]  # 100.4 M parameters (49.2 M of them the two embeddings)
CPU_RUNS = [
    ["model=llama_tiny"],
    ["model=qwen_tiny", "training.micro_batch_size=2"],
    ["model=mistral_tiny", "training.seq_length=512", "training.global_batch_size=4", "training.micro_batch_size=2"],
    ["model=qwen_tiny", "training.seq_length=1024", "training.global_batch_size=4", "training.micro_batch_size=1"],
    [*M100, "training.global_batch_size=4", "training.micro_batch_size=2"],
    ["model=llama_tiny", "training.activation_checkpointing=full"],
    ["model=llama_tiny", "training.activation_checkpointing=selective", "training.ac_frequency=1/2"],
    ["model=llama_tiny", *TWO],
    ["model=llama_tiny", *TWO, "parallelism.fsdp=true"],
    ["model=llama_tiny", *TWO, "parallelism.tp=2"],
    ["model=llama_tiny", *TWO, "parallelism.pp=2", "training.global_batch_size=16", "training.micro_batch_size=2"],
]
# The precision ``auto`` does not pick here, where both run at speed: fp32 where this CPU multiplies bf16 natively;
# where it emulates bf16 (99x slower, docs/benchmarks.md), a width, depth and recompute period the bench never ran
FIFTH_HELD_OUT = (["model=llama_tiny", "training.precision=fp32"] if cpu_precision() == "bf16" else
                   ["model=llama_tiny", "model.hidden_size=512", "model.ffn_hidden_size=1408", "model.num_layers=6",
                    *TWO, "training.seq_length=512", "training.activation_checkpointing=selective",
                    "training.global_batch_size=4", "training.micro_batch_size=1"])
# Configs the slice was never developed against: another architecture (GPT-2: learned positions, LayerNorm, GELU,
# biases), FSDP with full recompute, TP at another width and sequence, GPipe, and the fifth above
CPU_HELD_OUT = [
    ["model=gpt2_tiny"],
    ["model=mistral_tiny", *TWO, "parallelism.fsdp=true", "training.activation_checkpointing=full"],
    ["model=qwen_tiny", *TWO, "parallelism.tp=2", "training.seq_length=512", "training.global_batch_size=4",
     "training.micro_batch_size=2"],
    ["model=llama_tiny", *TWO, "parallelism.pp=2", "parallelism.pp_schedule=gpipe", "training.global_batch_size=16",
     "training.micro_batch_size=2"],
    FIFTH_HELD_OUT,
]
CPU = ["platform=cpu", "logging.wandb.mode=disabled"]


def project_row(overrides: list[str], preflight=None) -> dict:
    spec, plan, over_counts, why = op_gap_bench.planned(overrides)
    if plan is None:
        return {"available": False, "reason": why}
    projected = projection_of(spec, plan, preflight)
    return {**projected, "note": "memory estimate over-counts"} if over_counts else projected


def cpu_anchor(overrides: list[str], tmp: Path) -> tuple[str, float, float, float]:
    """(name, projected from the measured slice, the spec's own run, seconds of measuring): ``tprimat project
    --measure --verify`` runs the spec itself in the same interleaved rounds as its four slices, so a slow spell
    of this shared machine hits both sides alike."""
    name = " ".join(overrides)
    target = tmp / "projection.json"
    subprocess.run([sys.executable, "-m", "tprimat", "project", "--measure", "--verify", *CPU, *overrides,
                    "--json", str(target)], check=True, capture_output=True, cwd=ROOT)
    (point,) = json.loads(target.read_text())
    p = point["projection"]
    return name, p["tokens_per_s_per_device"], p["verified"]["tokens_per_s_per_device"], p["measure_time_s"]


@contextmanager
def gap_of(seconds: float | None):
    """The projection with this per-operation gap in place of the learned one (None: the learned one)."""
    if seconds is None:
        yield
        return
    stand_in = op_gap.Gap(seconds, 0, 0, float("nan"), "leave-one-family-out (bench/op_gap.py)")
    with mock.patch.object(op_gap, "learned", lambda: stand_in):
        yield


def published(rows: list[dict], quiet: bool = False, kept: list | None = None,
              gaps: dict | None = None) -> list[tuple[str, float]]:
    """Each row's projection against its published figure (printed unless ``quiet``): (family, error) pairs;
    ``kept``: each scored row and its error appended (the record's input); ``gaps``: each development family's
    per-operation gap learned without it (leave-one-family-out), else the learned gap."""
    errors = []
    for published_row in rows:
        with gap_of((gaps or {}).get(published_row["family"])):
            p = project_row(published_row["overrides"])
        if not p["available"]:
            if not quiet:
                print(f"{published_row['name']}: not projected: {p['reason']}")
            continue
        error = p["tokens_per_s_per_device"] / published_row["published"] - 1
        errors.append((published_row["family"], error))
        if kept is not None:
            kept.append((published_row, error))
        note = f" ({p['note']})" if p.get("note") else ""
        if not quiet:
            print(f"{published_row['name']}: predicted {p['tokens_per_s_per_device']:,.0f} tokens/s/GPU, published "
                  f"{published_row['published']:,}, error {error:+.1%}{note}  [{published_row['source']}]")
    return errors


@contextmanager
def attention_at_the_matmul_ceiling():
    mamf = kernels.H100_MAMF_TFLOPS
    flat = {key: dataclasses.replace(k, by_seq=((8192, mamf, mamf),)) for key, k in kernels.KERNELS.items()}
    with mock.patch.dict(kernels.KERNELS, flat):
        yield


@contextmanager
def megatron_style_selective_recompute():
    with mock.patch.object(kernels, "OP_SAC_FRAMEWORKS", ()):
        yield


@contextmanager
def no_fp8_quantize_kernels():
    with mock.patch.object(kernels, "TE_FP8_FRAMEWORKS", ()):
        yield


@contextmanager
def no_op_gap():
    with mock.patch.object(op_gap, "learned", lambda: None):
        yield


# Each modelled effect, and what the projection does in its place when it is taken away
EFFECTS = {"the stacks' attention kernels (attention at the matmul ceiling instead)": attention_at_the_matmul_ceiling,
           "torchtitan's op SAC (its selective recompute as Megatron's instead)": megatron_style_selective_recompute,
           "Transformer Engine's FP8 quantize kernels (FP8 GEMMs alone)": no_fp8_quantize_kernels,
           "the learned per-operation gap (the roofline alone instead)": no_op_gap}


def without(effect, rows: list[dict], gaps: dict | None) -> float:
    """The rows' median with one modelled effect taken away (taking the learned gap away takes its folds' too)."""
    taken_away = EFFECTS[effect]
    with taken_away():
        return family_median(published(rows, quiet=True, gaps=None if taken_away is no_op_gap else gaps))


def scored_set(label: str, rows: list[dict], quiet: bool = False, kept: list | None = None,
               gaps: dict | None = None) -> float:
    """Print a set's rows (unless ``quiet``: printed already), its median over families, and that median with each
    modelled effect taken away; ``gaps``: a development set's leave-one-family-out gaps."""
    errors = published(rows, quiet, kept, gaps)
    median = family_median(errors)
    print(f"{label}: median |error| {median:.3f} over {len({f for f, _ in errors})} families (near-duplicates "
          f"once) of {len(errors)} rows")
    for effect in EFFECTS:
        print(f"  without {effect}: {without(effect, rows, gaps):.3f}")
    print(f"  power cap: not modelled ({kernels.POWER_CAP_NOTE})")
    return median


def cpu(runs: list[list[str]], label: str = "cpu_median_abs_error") -> None:
    cpu_errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for overrides in runs:
            name, predicted, measured, took = cpu_anchor(overrides, Path(tmp))
            cpu_errors.append(abs(predicted / measured - 1))
            print(f"CPU {name}: measured-slice {predicted:,.0f} tokens/s ({took:.0f} s of measuring, the spec's own "
                  f"runs included), full run {measured:,.0f}, error {predicted / measured - 1:+.1%}", flush=True)
    print(f"{label}={statistics.median(cpu_errors):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-cpu", action="store_true", help="published rows only")
    parser.add_argument("--only", type=int, help="the N-th config only (0-based) of each CPU set run")
    parser.add_argument("--cpu-set", choices=("bench", "held-out", "all"), default="all",
                        help="which CPU configs: the bench's, the held-out ones, or both (default)")
    parser.add_argument("--held-out-2", action="store_true",
                        help="score bench/held_out_2.py (its published rows and CPU configs) and nothing else")
    parser.add_argument("--write-record", action="store_true",
                        help="write every scored and held-out row's error into tprimat/spec/projection_record.json")
    args = parser.parse_args()
    if args.held_out_2:
        held_out_2()
        return
    kept: list = []
    gaps = learned_gaps()
    scored_set("scored (the rows the method was developed against, bench/projection_rows.py)", SCORED, kept=kept,
               gaps=gaps)
    scored = [(r["family"], error) for r, error in kept]
    for name, why in NOT_EXPRESSIBLE:
        print(f"{name}: not expressed: {why}")
    mlperf = mlperf_sets(kept, MLPERF_SCORED, "mlperf", "MLPerf v5.1", gaps)
    held = []
    for module in HELD_OUT_SETS:
        rows = [row(**r) for r in importlib.import_module(module).PUBLISHED]
        print(f"held out once, re-scored: bench/{module}.py")
        scored_set(f"re-scored (held out once), bench/{module}.py", rows, kept=kept)
        held += rows
    both = scored_set("re-scored (held out once), bench/held_out_3.py and 4", held, quiet=True)
    print(f"held_out_3_4_median_abs_error={both:.3f}")
    mlperf_sets(kept, MLPERF_HELD_OUT, "held_out", "re-scored (held out once, scored once at 8ab792b), MLPerf v5.0")
    mlperf_sets(kept, MLPERF_HELD_OUT_V4, "held_out_v4",
                "re-scored (held out once, scored once at 6480e6d), MLPerf v4.1 and v4.0")
    # not in the record: its rows repeat v5.0's, which the record holds
    mlperf_sets([], MLPERF_HELD_OUT_V51_405B, "held_out_v51_405b", "re-scored (held out once, scored once at 5fe5a92; "
                "its expressible rows are v5.0's Nebius logs, byte-identical), MLPerf v5.1 llama31_405b")
    if args.write_record:
        write_record(kept)

    def chosen(runs: list) -> list:
        return runs if args.only is None else [runs[args.only]]

    if not args.no_cpu and args.cpu_set != "held-out":
        cpu(chosen(CPU_RUNS))
    if not args.no_cpu and args.cpu_set != "bench":
        cpu(chosen(CPU_HELD_OUT), "cpu_held_out_median_abs_error")
    print(f"projection_median_abs_error={family_median(scored + mlperf):.3f}")


def learned_gaps() -> dict:
    """Each development family's per-operation gap learned without it (bench/op_gap.py); says whether the gap the
    projection carries (tprimat/spec/op_gap.json) is the one the development rows give."""
    curves, chosen, held = op_gap_bench.learn()
    committed = op_gap.learned()
    learned_us = op_gap_bench.GRID_US[chosen]
    print(f"per-operation gap: {learned_us:g} us learned from {len(held)} development families "
          f"(leave-one-family-out median |error| {op_gap_bench.cross_validated(curves, held):.3f}); "
          + ("the committed op_gap.json agrees" if committed and committed.seconds * 1e6 == learned_us else
             f"op_gap.json holds {committed.seconds * 1e6:g} us: rerun bench/op_gap.py --write" if committed else
             "no op_gap.json: run bench/op_gap.py --write"))
    return {family: op_gap_bench.GRID_US[i] / 1e6 for family, i in held.items()}


def mlperf_sets(kept: list, names: str | tuple, prefix: str, label: str,
                gaps: dict | None = None) -> list[tuple[str, float]]:
    """Rows files' MLPerf rows: each expressed or listed with why not, scored, then by vendor (``<prefix>_amd``,
    ``<prefix>_nvidia``, then ``<prefix>_median_abs_error``); their (family, error); ``gaps``: a development set's
    leave-one-family-out gaps."""
    rows, not_expressed = [], []
    for name in (names,) if isinstance(names, str) else names:
        expressed, listed = load(name)
        rows, not_expressed = rows + expressed, not_expressed + listed
    for name, why in not_expressed:
        print(f"{name}: not expressed: {why}")
    these: list = []
    errors = published(rows, kept=these, gaps=gaps)
    kept += these
    print(f"{label}: {len(rows)} rows expressed, {len(not_expressed)} not")
    for vendor in ("amd", "nvidia"):
        chosen = [(r["family"], error) for r, error in these if r["vendor"] == vendor]
        figure = f"{family_median(chosen):.3f}" if chosen else "none"  # none: the rounds hold no such submission
        print(f"{prefix}_{vendor}_median_abs_error={figure} ({len(chosen)} rows, {len({f for f, _ in chosen})} families)")
    print(f"{prefix}_median_abs_error={family_median(errors):.3f} ({len(errors)} rows, {len({f for f, _ in errors})} "
          "families)")
    by_attention_and_cp(these)
    for effect in EFFECTS:
        print(f"  without {effect}: {without(effect, rows, gaps):.3f}")
    return errors


def by_attention_and_cp(these: list) -> None:
    """The rows whose attention ran in FP8 (FP8_DPA: training.fp8.attention, at cuDNN's FP8 figure where the GPU has
    one) beside the other FP8 rows, and the context-parallel rows by their exchange: signed median errors, a
    diagnostic (nothing is fitted to it)."""
    fp8 = [(r, e) for r, e in these if "training.precision=fp8" in r["overrides"]]
    for label, chosen in (("FP8 attention", [e for r, e in fp8 if r.get("fp8_attention") is True]),
                          ("FP8 GEMMs alone", [e for r, e in fp8 if r.get("fp8_attention") is False])):
        if chosen:
            print(f"  {label}: {len(chosen)} rows, signed median error {statistics.median(chosen):+.3f}")
    unknown = sum(r.get("fp8_attention") is None for r, _ in fp8)
    if unknown:
        print(f"  FP8 attention unknown (a sourced config file absent): {unknown} rows")
    cp = [(r, e) for r, e in these if not any(o == "parallelism.cp=1" for o in r["overrides"])]
    for label, kind in (("CP all-to-all", "a2a"), ("CP ring", "p2p"), ("CP exchange unknown (projected as a ring)", None)):
        chosen = [e for r, e in cp if r.get("cp_comm_type") == kind]
        if chosen:
            print(f"  {label}: {len(chosen)} rows, signed median error {statistics.median(chosen):+.3f}")


def write_record(kept: list) -> None:
    """Per group (stack on GPU class, stack on every GPU, every row): rows, families, lowest and highest family
    error (a family's error the median of its members')."""
    members: dict = {}
    for published_row, error in kept:
        setting = dict(o.split("=", 1) for o in published_row["overrides"] if "=" in o)
        framework, gpu = setting.get("framework", "native"), setting.get("platform.gpu")
        for group in (record.group_of(framework, gpu), f"{record.stack_of(framework)} stacks on every GPU",
                      "every stack on every GPU"):
            members.setdefault(group, {}).setdefault(published_row["family"], []).append(error)
    groups = {group: {"rows": sum(len(v) for v in families.values()), "families": len(families),
                      "low": round(min(statistics.median(v) for v in families.values()), 4),
                      "high": round(max(statistics.median(v) for v in families.values()), 4),
                      "source": "bench/projection.py --write-record"}
              for group, families in sorted(members.items())}
    record.RECORD.write_text(json.dumps({"groups": groups}, indent=1) + "\n")
    print(f"wrote {record.RECORD.relative_to(ROOT)}: {len(groups)} groups")


def held_out_2() -> None:
    """bench/held_out_2.py, committed before it was scored: its published rows, then its CPU configs."""
    import held_out_2 as second

    errors = published([row(**r) for r in second.PUBLISHED])
    print(f"held_out_2_published_median_abs_error={family_median(errors):.3f}" if errors else
          "held_out_2_published_median_abs_error=nan (no row expressible)")
    cpu(second.CPU, "held_out_2_cpu_median_abs_error")


if __name__ == "__main__":
    main()
