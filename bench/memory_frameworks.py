"""tprimat's per-framework memory estimate against memory measured on real hardware, each case with the config that
produced it: Megatron-LM / Megatron-Bridge and Primus logs of the shared corpus (their ``memory (MB) | max
allocated`` lines), torchtitan's own ``memory: X GiB`` (its allocator's max reserved), the native trainer's
allocator peaks on an H100 recorded in docs/benchmarks.md, torchtitan's published memory (its H100 benchmark
tables), and real runs on this CPU of DeepSpeed (ZeRO 0, 2, 3) and the Transformers Trainer (DDP, and ZeRO-3
through its DeepSpeed integration) through tprimat's own launch path, each in a fresh process, their peak taken
from torch.profiler's memory events (every allocation and free of torch's CPU allocator from before the model is
built; ``--no-cpu-runs`` skips them).

Two kinds of case, printed apart with a median each: measured (the bench reads the figure from a real log of the
corpus, or measures it by running here) and quoted (a figure a publication or docs/benchmarks.md states, which the
bench cannot re-measure). Near-duplicates (one prediction set beside two measurements of the same configuration,
say eager and compiled where the estimate does not tell them apart) share a ``family`` and count once: a family's
error is the median of its members'.

The estimate is compared without its fixed runtime overhead (CUDA context, library workspaces), which the
allocator's figures do not count. A corpus case whose log is absent is skipped (``--logs`` points at the corpus).
One line per case (framework, source, estimate, measured, error); the table in Markdown with ``--markdown``; last
line ``framework_memory_median_abs_error=<x>`` (relative), over the measured cases' families.

    python bench/memory_frameworks.py [--logs ../shared/logs] [--markdown] [--no-cpu-runs]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from families import family_median  # noqa: E402

from tprimat.compose import compose  # noqa: E402
from tprimat.spec import memory  # noqa: E402
from tprimat.spec.build import build_spec  # noqa: E402
from tprimat.spec.detect import DetectedHardware  # noqa: E402
from tprimat.spec.plan import derived_dp  # noqa: E402

PLANNING_HOST = DetectedHardware("cpu", "planning host", 1, 0.0, None)
MIB = 2**20
MAX_ALLOCATED = re.compile(r"max allocated: ([0-9.]+)")  # Megatron-LM's report_memory, MiB
TITAN_MEMORY = re.compile(r"\bmemory: +([0-9.]+)GiB")  # torchtitan's step line: max reserved, GiB

# Model dimensions the corpus runs used, from the public configs named (the logs carry no argument dump).
LLAMA31_8B = ["model=llama"]
LLAMA2_7B_4L = ["model=llama", "model.num_layers=4", "model.ffn_hidden_size=11008", "model.num_kv_heads=32",
                "model.vocab_size=32000", "model.rope_scaling_factor=null", "model.rope_theta=10000"]
LLAMA32_1B = ["model=llama", "model.num_layers=16", "model.hidden_size=2048", "model.ffn_hidden_size=8192",
              "model.num_attention_heads=32", "model.num_kv_heads=8", "model.head_dim=64", "model.tie_embeddings=true"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
GPU8 = ["platform.devices_per_node=8", "training.max_steps=10", "benchmark.warmup_steps=2", "parallelism.tp=1",
        "parallelism.pp=1", "parallelism.cp=1", "parallelism.sequence_parallel=false", "parallelism.fsdp=false",
        "training.grad_reduce_in_fp32=true"]  # the logged layouts, whatever a recipe would choose


@dataclass(frozen=True)
class Case:
    name: str
    framework: str
    overrides: list
    source: str
    log: Optional[str] = None  # corpus file whose largest figure is the measurement
    measured_gib: Optional[float] = None  # or a figure recorded elsewhere (docs/benchmarks.md)
    measure: str = "max allocated"
    run_on_cpu: bool = False  # measured by running it here (``cpu_peak_gib``)
    family: Optional[str] = None  # near-duplicates share one: counted once (None: a family of its own)
    as_run: tuple = ()  # overrides the estimate adds: what the source's version of the framework did (``note``)
    note: str = ""

    @property
    def quoted(self) -> bool:
        """A figure stated elsewhere (a publication, docs/benchmarks.md), not read from a log or measured here."""
        return self.measured_gib is not None


CASES = [
    Case("primus_3 Llama 3.1 8B, 8 GPUs, TP 1, MBS 2, seq 8192", "primus",
         ["platform=amd", "platform.gpu=mi300x", "framework=primus", *LLAMA31_8B, *GPU8, "parallelism.zero_stage=1",
          "training.micro_batch_size=2", "training.seq_length=8192", "training.global_batch_size=128",
          "training.precision=bf16", "training.activation_checkpointing=none"],
         "corpus primus_3 (Primus llama3.1_8B-pretrain.yaml, distributed optimizer, bf16)", log="primus_3.log"),
    Case("primus_4 Llama 2 7B (4 layers), 8 GPUs, MBS 4, seq 4096", "primus",
         ["platform=amd", "platform.gpu=mi300x", "framework=primus", *LLAMA2_7B_4L, *GPU8, "parallelism.zero_stage=1",
          "training.micro_batch_size=4", "training.seq_length=4096", "training.global_batch_size=256",
          "training.precision=bf16", "training.activation_checkpointing=none"],
         "corpus primus_4 (Primus unit test, llama2_7B reduced to 4 layers; the distributed optimizer is what its "
         "allocated-after-step figure implies)", log="primus_4.log"),
    Case("megatron_1 Llama 3.2 1B, 8 x H100, MBS 1, seq 1024", "megatron",
         ["platform=nvidia", "platform.gpu=h100", "framework=megatron", *LLAMA32_1B, *GPU8,
          "parallelism.zero_stage=1", "training.micro_batch_size=1", "training.seq_length=1024",
          "training.global_batch_size=512", "training.precision=bf16", "training.activation_checkpointing=none"],
         "corpus megatron_1 (Megatron-Bridge llama32_1b_pretrain_config, bf16_mixed, distributed optimizer; the log's "
         "own parameter count: 1.24 B with the 128,256-row tied embedding)",
         log="megatron_1.log"),
    Case("torchtitan_3 Llama 3.1 8B (4 layers), 8 x MI300X, FSDP, local batch 3, seq 2048", "torchtitan",
         ["platform=amd", "platform.gpu=mi300x", "framework=torchtitan", *LLAMA31_8B, "model.num_layers=4", *GPU8,
          "parallelism.fsdp=true", "training.micro_batch_size=3", "training.seq_length=2048",
          "training.global_batch_size=24", "training.precision=bf16", "training.activation_checkpointing=none",
          "training.compile=true"],
         "corpus torchtitan_3 (Primus-wrapped torchtitan, FSDP bf16/fp32-reduce, blocks and loss compiled, no "
         "checkpointing logged)",
         log="torchtitan_3.log", measure="max reserved"),
]
H100_LLAMA8 = ["platform=nvidia", "platform.gpu=h100", "platform.devices_per_node=1", "model=llama",
               "model.num_layers=8", "training.seq_length=4096", "training.global_batch_size=4",
               # asked parallelism.fsdp=true, but one process ran without FSDP2 until 2026-11-26 (docs/benchmarks.md):
               # bf16 autocast over unsharded state is what these allocator peaks measured
               "training.micro_batch_size=1", "parallelism.fsdp=false", "training.activation_checkpointing=selective",
               "training.max_steps=16", "benchmark.warmup_steps=10"]
H100_GPT2XL = ["platform=nvidia", "platform.gpu=h100", "platform.devices_per_node=1", "model=gpt2_xl",
               "parallelism.fsdp=false", "training.activation_checkpointing=none", "training.global_batch_size=16",
               "training.micro_batch_size=8", "training.max_steps=30", "benchmark.warmup_steps=10"]
NATIVE = "docs/benchmarks.md, H100 80GB"
CASES += [
    Case("native Llama 3.1 8B width (8 layers), bf16 autocast (FSDP2 asked, not applied), seq 4096, eager", "native",
         H100_LLAMA8,
         f"{NATIVE} (2026-11-24, bench/gpu.py)", measured_gib=55.27, family="native 8B width, seq 4096"),
    Case("native Llama 3.1 8B width (8 layers), bf16 autocast (FSDP2 asked, not applied), seq 4096, compile", "native",
         [*H100_LLAMA8, "training.compile=true"], f"{NATIVE} (2026-11-24, bench/gpu.py)", measured_gib=53.84,
         family="native 8B width, seq 4096"),
    Case("native GPT-2 XL, MBS 8, seq 1024, bf16 eager", "native", H100_GPT2XL,
         f"{NATIVE} (2026-11-24 re-run, bench/gpu_matrix.py)", measured_gib=55.60, family="native GPT-2 XL bf16"),
    Case("native GPT-2 XL, MBS 8, seq 1024, bf16 compile", "native", [*H100_GPT2XL, "training.compile=true"],
         f"{NATIVE} (2026-11-24 re-run, bench/gpu_matrix.py)", measured_gib=52.06, family="native GPT-2 XL bf16"),
    Case("native GPT-2 XL with its head untied (the first run's model), MBS 8, seq 1024, bf16 eager", "native",
         [*H100_GPT2XL, "model.tie_embeddings=false"], f"{NATIVE} (2026-11-24, bench/gpu_matrix.py, before the tie fix)",
         measured_gib=56.81, family="native GPT-2 XL bf16"),
    Case("native GPT-2 XL, MBS 8, seq 1024, fp8 tensorwise + compile", "native",
         [*H100_GPT2XL, "training.compile=true", "training.precision=fp8"],
         f"{NATIVE} (2026-11-24 re-run, bench/gpu_matrix.py)", measured_gib=42.05),
]

# torchtitan's published memory: benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, 2024-12-26), Grand
# Teton H100s (96 GB HBM2e), seq 8192, "Memory(GiB)" as torchtitan logs it (its allocator's max reserved, the maximum
# over the GPUs). That torchtitan compiled the blocks only: its train.py (lines 137-138 at 9dec370) has the loss's
# torch.compile commented out, where the torchtitan tprimat drives (0.2.2 and 0.3: compile.components defaults to
# ["model", "loss"]) compiles the loss too. tprimat's torchtitan estimate tells compiled from eager by the loss alone
# (``memory.logits_bytes``: 2 bytes per logit compiled, 12 eager, bench/loss_memory.py), so the compiled rows are
# estimated with training.compile=false: the loss as that run held it.
# Not expressible, left out: Tables 5 and 6 (Llama 3.1 405B on 512 GPUs, PP 8): tprimat has no 405B model.
TITAN_TABLES = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, 2024-12-26)"
TITAN_H100 = ["platform=nvidia", "platform.gpu=h100_96gb", "framework=torchtitan", "training.seq_length=8192",
              "parallelism.fsdp=true", "parallelism.pp=1", "training.max_steps=10", "benchmark.warmup_steps=2"]


def titan_8b(gpus: int, extra: list) -> list:
    """Tables 1 and 3: Llama 3.1 8B, FSDP over ``gpus``, local batch 2, selective (op) checkpointing."""
    return [*TITAN_H100, "model=llama", f"platform.devices_per_node={min(gpus, 8)}",
            f"platform.nodes={max(gpus // 8, 1)}", "training.micro_batch_size=2", f"training.global_batch_size={2 * gpus}",
            "training.activation_checkpointing=selective", "training.precision=bf16", *extra]


def titan_cp(cp: int) -> list:
    """Table 2: Llama 3.1 8B, 8 GPUs, FSDP 8/cp x CP cp, local batch 1, full checkpointing, compile, Float8."""
    return [*TITAN_H100, "model=llama", "platform.devices_per_node=8", f"parallelism.cp={cp}",
            f"training.seq_length={32768 * cp}", "training.micro_batch_size=1", f"training.global_batch_size={8 // cp}",
            "training.activation_checkpointing=full", "training.compile=true", "training.precision=fp8"]


TITAN_70B = [*TITAN_H100, "model=llama70b", "platform.devices_per_node=8", "platform.nodes=32", "parallelism.tp=8",
             "parallelism.sequence_parallel=true", "training.micro_batch_size=16", "training.global_batch_size=512",
             "training.activation_checkpointing=full", "training.compile=true", "training.precision=fp8"]
TITAN = "torchtitan"
EAGER_LOSS = dict(as_run=("training.compile=false",),
                  note="estimated with the loss eager: torchtitan 9dec370 compiled the blocks only")
CASES += [
    # Tables 1 and 3 (8 and 128 GPUs): eager, compiled blocks, compiled + Float8. Eager and compiled blocks are one
    # prediction (the loss eager in both) beside two figures: one family.
    *[Case(f"torchtitan 8B, {gpus} x H100, FSDP{label} (Table {table})", TITAN, titan_8b(gpus, extra), TITAN_TABLES,
           measured_gib=gib, measure="max reserved",
           family=f"torchtitan 8B x {gpus}, bf16" if "fp8" not in " ".join(extra) else None,
           **(EAGER_LOSS if extra else {}))
      for gpus, table, figures in ((8, 1, (82.4, 77.0, 76.8)), (128, 3, (67.0, 62.0, 61.8)))
      for (label, extra), gib in zip(((", local batch 2, eager", []), (" + compile", ["training.compile=true"]),
                                      (" + compile + Float8", ["training.compile=true", "training.precision=fp8"])),
                                     figures)],
    *[Case(f"torchtitan 8B, 8 x H100, FSDP {8 // cp} x CP {cp}, seq {32768 * cp}, compile + Float8 (Table 2)", TITAN,
           titan_cp(cp), TITAN_TABLES, measured_gib=gib, measure="max reserved", **EAGER_LOSS,
           family="torchtitan 8B, CP: 32,768 tokens per rank")  # one prediction beside four figures
      for cp, gib in ((1, 83.9), (2, 84.2), (4, 84.0), (8, 84.5))],
    # 2D and 2D + AsyncTP: async TP's memory is not modelled, one prediction beside two figures
    Case("torchtitan 70B, 256 x H100, FSDP 32 x TP 8, compile + Float8 (Table 4)", TITAN, TITAN_70B, TITAN_TABLES,
         measured_gib=71.9, measure="max reserved", family="torchtitan 70B 2D", **EAGER_LOSS),
    Case("torchtitan 70B, 256 x H100, FSDP 32 x TP 8 + AsyncTP, compile + Float8 (Table 4)", TITAN, TITAN_70B,
         TITAN_TABLES, measured_gib=67.6, measure="max reserved", family="torchtitan 70B 2D", **EAGER_LOSS),
]

# A Llama-style model small enough to train on a CPU in seconds, large enough that states, activations and the
# logits each weigh: 20.2 M parameters, bf16, 4 x 512 tokens per step.
CPU_SMALL = ["platform=cpu", "model=llama", "model.num_layers=4", "model.hidden_size=512", "model.ffn_hidden_size=1408",
             "model.num_attention_heads=8", "model.num_kv_heads=4", "model.head_dim=64", "model.vocab_size=8192",
             "model.rope_scaling_factor=null", "training.seq_length=512", "training.micro_batch_size=4",
             "training.global_batch_size=4", "training.max_steps=3", "training.optimizer.warmup_steps=1",
             "benchmark.warmup_steps=1", "training.precision=bf16", "methodology=identical_config",
             "training.activation_checkpointing=none"]
CPU_RUN = "a run on this CPU (tprimat's launch path; torch.profiler memory events)"
PROFILED = "allocated (profiler)"
CASES += [
    Case("DeepSpeed ZeRO-0, 20 M Llama, bf16, MBS 4, seq 512", "deepspeed",
         [*CPU_SMALL, "framework=deepspeed", "parallelism.zero_stage=0"], CPU_RUN, measure=PROFILED, run_on_cpu=True),
    Case("DeepSpeed ZeRO-2, 20 M Llama, bf16, MBS 4, seq 512", "deepspeed",
         [*CPU_SMALL, "framework=deepspeed", "parallelism.zero_stage=2"], CPU_RUN, measure=PROFILED, run_on_cpu=True),
    Case("DeepSpeed ZeRO-3, 20 M Llama, bf16, MBS 4, seq 512", "deepspeed",
         [*CPU_SMALL, "framework=deepspeed", "parallelism.zero_stage=3"], CPU_RUN, measure=PROFILED, run_on_cpu=True),
    Case("Transformers Trainer (DDP), 20 M Llama, bf16, MBS 4, seq 512", "transformers",
         [*CPU_SMALL, "framework=transformers"], CPU_RUN, measure=PROFILED, run_on_cpu=True),
    Case("Transformers Trainer + DeepSpeed ZeRO-3, 20 M Llama, bf16, MBS 4, seq 512", "transformers",
         [*CPU_SMALL, "framework=transformers", "parallelism.zero_stage=3"], CPU_RUN, measure=PROFILED,
         run_on_cpu=True),
]


def cpu_peak_gib(overrides: list) -> float:
    """Train ``overrides`` through tprimat's launch path in this process under torch.profiler; the peak of the bytes
    live in torch's CPU allocator (allocations minus frees, in time order) since the profiler started."""
    import torch

    from tprimat.execute.run import execute

    overrides = [*overrides, "logging.wandb.mode=disabled"]
    activities = [torch.profiler.ProfilerActivity.CPU]
    with tempfile.TemporaryDirectory() as run_dir, torch.profiler.profile(activities=activities,
                                                                        profile_memory=True) as prof:
        outcome = execute(compose(overrides), Path(run_dir), overrides)
        if outcome.status != "ok":
            raise RuntimeError(f"{overrides}: {outcome.result.get('error')}")
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak / memory.GIB


def run_here(case: Case) -> float:
    """Each run in a fresh process (this script, ``--peak-of OVERRIDES``): one framework's globals and allocator
    state never meet another's."""
    proc = subprocess.run([sys.executable, __file__, "--peak-of", *case.overrides], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{case.name}: {proc.stderr[-2000:]}")
    return float(proc.stdout.strip().splitlines()[-1].removeprefix("peak_gib="))


def measured(case: Case, logs: Path, cpu_runs: bool = True) -> Optional[float]:
    if case.run_on_cpu:
        return run_here(case) if cpu_runs else None
    if case.measured_gib is not None:
        return case.measured_gib
    path = logs / case.log
    if not path.exists():
        return None
    text = ANSI.sub("", path.read_text(errors="replace"))
    if case.measure == "max reserved":
        return max(float(v) for v in TITAN_MEMORY.findall(text))
    return max(float(v) for v in MAX_ALLOCATED.findall(text)) * MIB / memory.GIB


def estimated(case: Case) -> memory.MemoryEstimate:
    spec = build_spec(compose([*case.overrides, *case.as_run, "dry_run=true", "logging.wandb.mode=disabled"]),
                      PLANNING_HOST)
    dp = derived_dp(spec)
    return memory.estimate(spec, dp, spec.training.global_batch_size // (spec.training.micro_batch_size * dp))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", default=str(Path(__file__).resolve().parent.parent.parent / "shared" / "logs"))
    parser.add_argument("--markdown", action="store_true", help="also print the table in Markdown")
    parser.add_argument("--no-cpu-runs", action="store_true", help="skip the cases measured by running them here")
    parser.add_argument("--peak-of", nargs="+", metavar="OVERRIDE", help=argparse.SUPPRESS)  # one run, its peak
    args = parser.parse_args()
    if args.peak_of:
        print(f"peak_gib={cpu_peak_gib(args.peak_of)}")
        return
    rows = []
    for case in CASES:
        got = measured(case, Path(args.logs), not args.no_cpu_runs)
        if got is None:
            print(f"skipped {case.name}: " + ("--no-cpu-runs" if case.run_on_cpu else
                                              f"{case.log} not found under {args.logs}"))
            continue
        est = estimated(case)
        allocated = est.total_gib - est.overhead_gib  # the allocator does not count the context and workspaces
        rows.append((case, allocated, got, allocated / got - 1, est))
    medians = {}
    for quoted, title in ((False, "measured: read from a real log of the corpus, or run here"),
                          (True, "quoted: a figure a publication or docs/benchmarks.md states")):
        part = [r for r in rows if r[0].quoted is quoted]
        print(f"\n{title} ({len(part)} cases)")
        for case, allocated, got, error, est in part:
            print(f"{case.framework:10s} {case.name}: estimate {allocated:.2f} GiB (states "
                  f"{est.weights_gib + est.grads_gib + est.optimizer_gib:.2f}, activations {est.activations_gib:.2f}), "
                  f"measured {got:.2f} GiB ({case.measure}), error {error:+.1%}; source: {case.source}"
                  + (f"; {case.note}" if case.note else ""))
        medians[quoted] = family_median([(case.family or case.name, error) for case, _, _, error, _ in part])
        families = len({case.family or case.name for case, *_ in part})
        print(f"{'quoted' if quoted else 'measured'}: median |error| {medians[quoted]:.4f} over {families} families "
              f"(near-duplicates once) of {len(part)} cases, "
              f"{len({case.framework for case, *_ in part})} frameworks")
    if args.markdown:
        print("\n| framework | case | kind | source | estimate GiB | measured GiB | error |\n|---|---|---|---|---|---|---|")
        for case, allocated, got, error, _ in rows:
            print(f"| {case.framework} | {case.name} | {'quoted' if case.quoted else 'measured'} | {case.source}"
                  f"{'; ' + case.note if case.note else ''} | "
                  f"{allocated:.2f} | {got:.2f} ({case.measure}) | {error:+.1%} |")
    print(f"cases={len(rows)} frameworks={len({case.framework for case, *_ in rows})}")
    print(f"framework_memory_median_abs_error={medians[False]:.4f}")



if __name__ == "__main__":
    main()
