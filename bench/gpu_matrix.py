"""The single-GPU optimisation matrix on GPT-2 1.5B (``model=gpt2_xl``) and one profiled 8B-class run, on one
NVIDIA GPU: bf16 eager, ``torch.compile`` in its four modes (two of them with CUDA graphs), fp8 through torchao
(tensorwise and rowwise, compiled); then Llama 3.1 8B at full width with 8 layers under FSDP2, profiled over two
measured steps. Every cell is a real ``launch.py`` run; ``tprimat compare`` over them writes the report, the
throughput and breakdown plots, and ``results.tar.gz`` holds every cell's result.json (compare them elsewhere).

Usage::

    python bench/gpu_matrix.py --out gpu_matrix

Last line: ``gpu_matrix_cells_ok=<ok>/<cells>``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPT2 = ["platform=nvidia", "platform.devices_per_node=1", "model=gpt2_xl", "parallelism.fsdp=false",
        "training.activation_checkpointing=none", "training.global_batch_size=16", "training.micro_batch_size=8",
        "training.max_steps=30", "benchmark.warmup_steps=10", "logging.wandb.mode=disabled"]
CELLS = {
    "gpt2_xl_bf16_eager": [],
    "gpt2_xl_bf16_compile": ["training.compile=true"],
    "gpt2_xl_fp8_tensorwise_compile": ["training.precision=fp8", "training.fp8.recipe=tensorwise", "training.compile=true"],
    "gpt2_xl_fp8_rowwise_compile": ["training.precision=fp8", "training.fp8.recipe=rowwise", "training.compile=true"],
    "gpt2_xl_bf16_compile_reduce_overhead": ["training.compile=true", "training.compile_mode=reduce-overhead"],
    "gpt2_xl_bf16_compile_max_autotune": ["training.compile=true", "training.compile_mode=max-autotune"],
    "gpt2_xl_bf16_compile_max_autotune_no_cudagraphs": ["training.compile=true",
                                                        "training.compile_mode=max-autotune-no-cudagraphs"],
}
PROFILED = ("llama8_fsdp_profiled", ["platform=nvidia", "platform.devices_per_node=1", "model=llama",
                                     "model.num_layers=8", "training.seq_length=4096", "training.global_batch_size=4",
                                     "training.micro_batch_size=1", "parallelism.fsdp=true", "training.max_steps=16",
                                     "benchmark.warmup_steps=10", "logging.wandb.mode=disabled", "profile.enabled=true",
                                     "profile.steps=[11,12]"])


def launch(name: str, overrides: list[str], runs: Path, timeout_s: float) -> dict:
    run_dir = runs / name
    started = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), *overrides, f"hydra.run.dir={run_dir}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        tail = (proc.stdout + proc.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "error": f"over {timeout_s:.0f} s", "wall_s": time.perf_counter() - started}
    path = run_dir / "result.json"
    if not path.exists():
        return {"status": "no result", "error": tail, "wall_s": time.perf_counter() - started}
    result = json.loads(path.read_text())
    return {"status": result["status"], "error": result["error"], "summary": result.get("summary"),
            "effective": (result.get("framework") or {}).get("effective"), "profile": result.get("profile"),
            "telemetry": {k: (result.get("telemetry") or {}).get(k) for k in ("energy_per_token_j", "avg_power_w")},
            "wall_s": time.perf_counter() - started}


def line(name: str, cell: dict) -> str:
    s = cell.get("summary") or {}
    if cell["status"] != "ok" or not s:
        return f"{name}: {cell['status']}: {str(cell.get('error'))[-300:]}"
    eff = cell.get("effective") or {}
    return (f"{name}: {s['tokens_per_s_per_device']:.0f} tokens/s, {s['tflops_per_device']:.1f} TFLOP/s, MFU "
            f"{s['mfu'] if s['mfu'] is None else round(s['mfu'], 3)}, median step {s['step_time_s']['median']:.4f} s, "
            f"peak {s['peak_memory_gib']:.2f} GiB, {cell['telemetry']['energy_per_token_j']} J/token; ran "
            f"{eff.get('precision')}, fp8 {eff.get('fp8_scaling')}, {eff.get('compiled_layers')} compiled layers; "
            f"{cell['wall_s']:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("gpu_matrix"))
    ap.add_argument("--runs", type=Path, default=Path("/tmp/tprimat_gpu_matrix"))
    ap.add_argument("--cell-timeout-s", type=float, default=150)
    ap.add_argument("--budget-s", type=float, default=1e9, help="skip the cells that would start after this")
    ap.add_argument("--only", default="", help="comma-separated cell names, run in that order (default: every cell)")
    args = ap.parse_args()
    every = dict([PROFILED, *((n, [*GPT2, *o]) for n, o in CELLS.items())])
    chosen = list(filter(None, args.only.split(","))) or list(every)
    unknown = [n for n in chosen if n not in every]
    if unknown:
        ap.error(f"--only: unknown cells {unknown}; cells: {', '.join(every)}")
    args.out.mkdir(parents=True, exist_ok=True)
    cells, started = {}, time.perf_counter()
    for name in chosen:
        overrides = every[name]
        left = args.budget_s - (time.perf_counter() - started)
        if left < 30:
            cells[name] = {"status": "skipped", "error": "out of the bench's time budget", "wall_s": 0.0}
        else:
            cells[name] = launch(name, overrides, args.runs, min(args.cell_timeout_s, left))
        print(line(name, cells[name]), flush=True)
        (args.out / "matrix.json").write_text(json.dumps(cells, indent=1))
    trace = args.runs / PROFILED[0] / "profile" / "rank0.json"
    if trace.exists():
        with open(trace, "rb") as src, gzip.open(args.out / "trace_rank0.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
    report = args.runs / "report"
    subprocess.run([sys.executable, "-m", "tprimat", "compare", str(args.runs), "--out", str(report)], cwd=ROOT,
                   capture_output=True, text=True)
    for name in ("report.md", "plots/breakdown.png", "plots/throughput.png"):
        if (report / name).exists():
            shutil.copy(report / name, args.out / Path(name).name)
    with tarfile.open(args.out / "results.tar.gz", "w:gz") as tar:
        for name in cells:
            if (args.runs / name / "result.json").exists():
                tar.add(args.runs / name / "result.json", arcname=f"{name}/result.json")
    ok = sum(c["status"] == "ok" for c in cells.values())
    print(f"gpu_matrix_cells_ok={ok}/{len(cells)}")


if __name__ == "__main__":
    main()
