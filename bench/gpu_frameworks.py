"""The frameworks trained under tprimat on one lent GPU: an 8B-width proxy (Llama 3.1 8B at full width, a few of
its layers, the layout of ``bench/gpu.py``) trained for ``--steps`` steps through ``launch.py`` by each backend the
device kit allows (docs/frameworks.md): native, torchtitan, Megatron-LM (``--transformer-impl local``, mock data),
DeepSpeed and the Transformers Trainer. A framework that fails is reported with why and does not stop the others.

Each run's result is checked against the framework's own printed log: the per-step loss, the median step time and
tokens/s read from it (Megatron-LM's and torchtitan's ``framework.log`` through their parsers; the Trainer's own
``{'loss': ...}`` lines; DeepSpeed and native print tprimat's step lines, read back with ``tprimat ingest``), each
within 1%. It prints one table (tokens/s/device, MFU, peak memory against tprimat's estimate, status and why) and
``frameworks_trained=<n>`` last.

    python bench/gpu_frameworks.py --kit .device_kit --steps 30   # on the lent GPU: installs the kit, then trains
    python bench/gpu_frameworks.py --cpu --steps 6                          # the rehearsal: llama_tiny on CPU

On ``--cpu`` the proxy is llama_tiny on one process and the CUDA-only frameworks (torchtitan, Megatron-LM) are
reported as not run, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts.device_kit import WHEELS, release_for, restore_datasets_makefile, wheels_for  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GPU = ["platform=nvidia", "platform.devices_per_node=1", "model=llama", "model.num_layers=4",
       "training.seq_length=4096", "training.global_batch_size=4", "training.micro_batch_size=1",
       "methodology=identical_config", "training.precision=bf16"]
CPU = ["platform=cpu", "model=llama_tiny", "methodology=identical_config", "training.precision=fp32"]
COMMON = ["logging.wandb.mode=disabled", "benchmark.warmup_steps=2", "training.optimizer.warmup_steps=2"]
FRAMEWORKS = {  # name -> (overrides, needs CUDA)
    "native": ([], False),
    "deepspeed": (["parallelism.zero_stage=2"], False),
    "transformers": ([], False),
    "torchtitan": ([], True),  # TORCHTITAN: the release the kit installed beside this torch
    # without Transformer Engine or apex: the local layers, and none of the fusions that need their kernels
    "megatron": (["framework.extra_args=[--transformer-impl,local,--no-gradient-accumulation-fusion,"
                  "--no-rope-fusion,--no-masked-softmax-fusion,--no-persist-layer-norm]"], True),
}
# torchtitan 0.3 (registry flavour) or, beside an older torch, 0.2 (its TOML): the kit's test tokenizer either way
TORCHTITAN = {"registry": ["framework.flavour=registry", "framework.extra_args=[--hf_assets_path,./tests/assets/tokenizer]"],
              "toml": ["framework.flavour=toml", "framework.extra_args=[--model.hf_assets_path,./tests/assets/tokenizer]"]}
KIT_PATH = {"megatron": "megatron-lm", "torchtitan": "torchtitan"}  # the run's directory: scripts, tokenizer, corpus
UNSHARDED_RETRY = ("torchtitan", "megatron")
PRINTS_STEP_TIME = ("megatron", "tprimat")
INGEST_FORMAT = {"megatron": "megatron", "torchtitan": "torchtitan"}
TOLERANCE = 0.01
TRAINER_LOSS = re.compile(r"\{'loss': '([0-9.]+)'")


def install_kit(kit: Path) -> str:
    """The kit's wheels for this Python, installed offline into ``<kit>/installed`` (no index, no dependencies:
    the device's image brings torch and the rest), which this process and every run it starts import first."""
    wheels = [str(w) for w in wheels_for(kit / "wheels", f"cp{sys.version_info.major}{sys.version_info.minor}")]
    if not wheels:
        return f"no device kit at {kit} (python scripts/device_kit.py builds it)"
    site = (kit / "installed").resolve()
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--upgrade",
                           "--target", str(site), *wheels], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"pip install failed: {proc.stderr.strip()[-300:]}"
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    return f"installed {len(wheels)} wheels; Megatron's datasets Makefile: {restore_datasets_makefile(kit, sys.executable)}"


def launch(name: str, overrides: list[str], run_dir: Path, timeout_s: float) -> tuple[dict | None, str]:
    cmd = [sys.executable, str(ROOT / "launch.py"), *overrides, f"hydra.run.dir={run_dir}"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        console = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        console = f"timed out after {timeout_s:.0f} s\n" + str(exc.stdout or "")[-2000:]
    (run_dir / "console.log").write_text(console)
    from tprimat.results.result import read_result  # orjson: from the kit on the device

    result_path = run_dir / "result.json"
    return (read_result(result_path) if result_path.exists() else None), console


def ingested(log: Path, fmt: str, out: Path) -> dict | None:
    subprocess.run([sys.executable, "-m", "tprimat", "ingest", str(log), "--format", fmt, "--out", str(out)],
                   cwd=ROOT, capture_output=True, text=True)
    from tprimat.results.result import read_result

    found = sorted(out.rglob("result.json"))
    return read_result(found[0]) if found else None


def relative(a, b) -> float:
    return abs(a / b - 1) if a is not None and b else float("inf")


def own_log_check(name: str, result: dict, run_dir: Path, console: str) -> tuple[bool, str]:
    """The run's loss at each measured step, and its median tokens/s/device and step time over those steps, against
    the framework's own printed log read back by ``tprimat ingest``, within 1%."""
    losses = [s["loss"] for s in result["steps"]]
    if name == "transformers":
        printed = [float(x) for x in TRAINER_LOSS.findall(console)]
        worst = max((relative(a, b) for a, b in zip(printed, losses)), default=float("inf"))
        ok = len(printed) == len(losses) and worst <= TOLERANCE
        return ok, f"Trainer's own loss lines: {len(printed)} of {len(losses)} steps, worst {worst:.4f}"
    log, fmt = (run_dir / "framework.log", INGEST_FORMAT[name]) if name in INGEST_FORMAT else \
        (run_dir / "launch.log", "tprimat")
    other = ingested(log, fmt, run_dir / "own_log")
    if not other or not other.get("summary"):
        return False, f"{log.name} could not be read back"
    mine, theirs = by_step(result), by_step(other)
    measured = [n for n, step in mine.items() if not step["warmup"] and n in theirs]
    if not measured:
        return False, f"{log.name} ({fmt}): no measured step of the run is in the log"
    world = result["plan"]["world_size"]
    differences = [relative(median_of(theirs, measured, tokens_per_s_per_device, world),
                            median_of(mine, measured, tokens_per_s_per_device, world)),
                   *(relative(theirs[n]["loss"], mine[n]["loss"]) for n in measured)]
    if fmt in PRINTS_STEP_TIME:  # torchtitan prints tokens/s, no step time
        if not all(theirs[n]["step_time_s"] for n in measured):
            return False, f"{log.name} ({fmt}): a measured step has no printed step time"
        differences.append(relative(median_of(theirs, measured, lambda st, w: st["step_time_s"], world),
                                    median_of(mine, measured, lambda st, w: st["step_time_s"], world)))
    worst = max(differences)
    return worst <= TOLERANCE, f"{log.name} ({fmt}): {len(measured)} steps, worst relative difference {worst:.4f}"


def by_step(result: dict) -> dict[int, dict]:
    return {step["step"]: step for step in result["steps"] if step.get("repeat", 0) == 0}


def tokens_per_s_per_device(step: dict, world: int) -> float | None:
    """A step's tokens/s/device: its tokens over its time, or the framework's own printed figure."""
    if step.get("tokens") and step.get("step_time_s"):
        return step["tokens"] / step["step_time_s"] / world
    return (step.get("reported") or {}).get("tokens_per_s_per_gpu")


def median_of(steps: dict[int, dict], numbers: list[int], value, world: int) -> float | None:
    values = [v for v in (value(steps[n], world) for n in numbers) if v is not None]
    return statistics.median(values) if values else None


def row(name: str, result: dict | None, console: str, run_dir: Path, skipped: str | None) -> dict:
    if skipped:
        return {"framework": name, "status": "not run", "why": skipped}
    if result is None:
        return {"framework": name, "status": "no result", "why": console.strip().splitlines()[-1][:160] if console else ""}
    if result["status"] != "ok":
        return {"framework": name, "status": result["status"], "why": (result.get("error") or "")[:160]}
    s, plan = result["summary"], result["plan"]
    ok, why = own_log_check(name, result, run_dir, console)
    return {"framework": name, "model": result["spec"]["model"]["name"], "status": "trained" if ok else "log mismatch",
            "why": why,
            "tokens_per_s_per_device": s["tokens_per_s_per_device"], "mfu": s.get("mfu"),
            "peak_memory_gib": s.get("peak_memory_gib"), "estimate_gib": plan.get("memory_estimate_gib"),
            "version": (result.get("framework") or {}).get("version")}


def table(rows: list[dict]) -> str:
    def cell(value, fmt):
        return "n/a" if value is None else format(value, fmt)

    lines = ["| framework | model | status | tokens/s/device | MFU | peak memory GiB | estimate GiB | why |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['framework']} | {r.get('model', 'n/a')} | {r['status']} | "
                     f"{cell(r.get('tokens_per_s_per_device'), ',.0f')} | "
                     f"{cell(r.get('mfu'), '.3f')} | {cell(r.get('peak_memory_gib'), '.2f')} | "
                     f"{cell(r.get('estimate_gib'), '.2f')} | {r['why']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--cpu", action="store_true", help="rehearse on this CPU with llama_tiny")
    ap.add_argument("--kit", type=Path, default=ROOT / ".device_kit", help="the device kit (Megatron-LM's scripts)")
    ap.add_argument("--runs", type=Path, default=Path("gpu_frameworks_runs"))
    ap.add_argument("--budget-s", type=float, default=450.0, help="the whole bench's time (8 minutes with margin)")
    ap.add_argument("--only", default=None, help="comma-separated frameworks to run (default: every one)")
    ap.add_argument("--per-run-s", type=float, default=150.0, help="one framework's run at most (a hang costs no more)")
    args = ap.parse_args(argv)
    import torch

    cuda = torch.cuda.is_available() and not args.cpu
    base = [*(GPU if cuda else CPU), *COMMON, f"training.max_steps={args.steps}"]
    if cuda:
        print(f"device kit: {install_kit(args.kit)}", flush=True)
    started, rows = time.monotonic(), []
    titan_flavour = "registry" if release_for("torchtitan", torch.__version__) == WHEELS["torchtitan"] else "toml"

    def run(label: str, name: str, extra: list[str], needs_cuda: bool) -> dict:
        left = args.budget_s - (time.monotonic() - started)
        skipped = ("needs a CUDA device" if needs_cuda and not cuda else
                   "no time left in the budget" if left < 20 else None)
        # torchtitan >= 0.3 carries the proxy (its 8B flavour's first layers); 0.2's TOML cannot, and is refused by key
        overrides = [*base, f"framework={name}", *FRAMEWORKS[name][0], *extra]
        if name == "torchtitan":
            overrides += TORCHTITAN[titan_flavour]
        if name in KIT_PATH:
            overrides.append(f"framework.path={(args.kit / KIT_PATH[name]).resolve()}")
        run_dir = args.runs / label
        run_dir.mkdir(parents=True, exist_ok=True)
        result, console = (None, "") if skipped else launch(name, overrides, run_dir, min(left, args.per_run_s))
        try:
            made = row(name, result, console, run_dir, skipped)
        except Exception as exc:  # noqa: BLE001 - one framework's failure is its row, never the bench's end
            made = {"framework": name, "status": "bench error", "why": f"{type(exc).__name__}: {exc}"[:160]}
        made["framework"] = label
        print(f"{label}: {made['status']} ({made['why']})", flush=True)
        return made

    # the external frameworks first: they are what only a GPU can show; a sharded run that fails is tried once
    # more unsharded (on one GPU FSDP shards nothing), so a failure of the sharding is told apart from the trainer's
    chosen = args.only.split(",") if args.only else list(FRAMEWORKS)
    for name in sorted(chosen, key=lambda n: not FRAMEWORKS[n][1]):
        rows.append(run(name, name, [], FRAMEWORKS[name][1]))
        if name in UNSHARDED_RETRY and rows[-1]["status"] not in ("trained", "not run"):
            rows.append(run(f"{name}-unsharded", name, ["parallelism.fsdp=false"], True))
    rows.sort(key=lambda r: list(FRAMEWORKS).index(r["framework"].split("-")[0]))
    print(table(rows))
    (args.runs / "table.json").write_text(json.dumps(rows, indent=1))
    trained = {r["framework"].split("-")[0] for r in rows if r["status"] == "trained"}
    print(f"frameworks_trained={len(trained)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
