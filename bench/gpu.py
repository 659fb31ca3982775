"""Evidence that needs a GPU: real native runs of an 8B-class model on one CUDA device, with three consistency
checks. Only the energy check reads a source outside tprimat (NVML's own cumulative counter, in another
process); the timing and ingest checks compare tprimat with itself (CUDA-event step times against the wall clock
of the same steps, tprimat's log read back by tprimat's parser): they catch a broken clock or parser, not a
shared error.

For each run (FSDP2 on one GPU in bf16, eager and with ``training.compile=true``) it prints tokens/s/device,
TFLOP/s/device, MFU, peak memory (allocator, and tprimat's deep-check measurement and estimate before the
run), energy, and the projection's error, then three checks:

- energy: tprimat's sampler (NVML, every ``benchmark.telemetry_interval_s``) against NVML's own cumulative
  energy counter polled here, in another process, every 10 ms and read at the edges of the result's measured
  window (``telemetry.window_monotonic_s``; CLOCK_MONOTONIC is one clock for every process of a host);
- timing: the sum of the measured steps' CUDA-event step times against the wall-clock length of the same
  steps (the window runs from the end of the last warm-up step to the end of the last measured step, so it
  holds exactly those steps plus the host's work between them);
- ingest: the run's own printed log (``launch.log``), ingested back with ``tprimat ingest``, against the
  result's summary.

Usage (on a machine with one NVIDIA GPU, nvidia-ml-py installed)::

    python bench/gpu.py --steps 200 --out gpu_evidence

Last line: ``gpu_checks_passed=<passed>/<checks>``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODEL = ["model=llama", "model.num_layers=8"]  # Llama 3.1 8B at full width, 8 of its 32 layers (fits 80 GB)
COMMON = ["platform=nvidia", "platform.devices_per_node=1", *MODEL, "training.seq_length=4096",
          "training.global_batch_size=4", "training.micro_batch_size=1", "parallelism.fsdp=true",
          "logging.wandb.mode=disabled", "benchmark.warmup_steps=10"]
RUNS = {"fsdp_bf16_eager": ["training.compile=false"], "fsdp_bf16_compile": ["training.compile=true"]}
ENERGY_TOLERANCE = 0.02  # the sampler's energy within 2% of NVML's counter over the same window
TIMING_TOLERANCE = 0.03  # CUDA-event step times sum to within 3% of the wall clock over the same steps
INGEST_TOLERANCE = 0.001  # the ingested log's median step time and tokens/s within 0.1% (printed to 1 us)


class NvmlPoller(threading.Thread):
    """NVML's total-energy counter (mJ) and power (mW) of GPU 0, read every ``interval_s`` with
    ``time.monotonic()`` stamps."""

    def __init__(self, interval_s: float = 0.01):
        super().__init__(daemon=True)
        import pynvml

        pynvml.nvmlInit()
        self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        self.interval_s, self.rows, self.stopping = interval_s, [], threading.Event()

    def run(self) -> None:
        nv, h = self.nvml, self.handle
        while not self.stopping.is_set():
            self.rows.append((time.monotonic(), nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3,
                              nv.nvmlDeviceGetPowerUsage(h) / 1e3))
            self.stopping.wait(self.interval_s)

    def window(self, start: float, end: float) -> dict:
        t, joules, watts = (np.array(column) for column in zip(*self.rows))
        inside = (t >= start) & (t <= end)
        counter_j = float(np.interp(end, t, joules) - np.interp(start, t, joules))
        power_j = float(np.trapezoid(watts[inside], t[inside])) if inside.sum() > 1 else None
        return {"nvml_counter_j": counter_j, "nvml_power_integral_j": power_j, "polls": int(inside.sum())}


def launch(name: str, extra: list[str], steps: int, runs: Path) -> dict:
    run_dir = runs / name
    cmd = [sys.executable, str(ROOT / "launch.py"), *COMMON, *extra, f"training.max_steps={steps}",
           f"hydra.run.dir={run_dir}"]
    print("$", " ".join(cmd[1:]), flush=True)
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    print(proc.stdout[-2000:] + proc.stderr[-3000:], flush=True)
    result = json.loads((run_dir / "result.json").read_text())
    result["_wall_s"] = time.perf_counter() - started
    return result


def deep_check(extra: list[str], runs: Path) -> dict:
    """The memory tprimat predicts for the layout before any GPU time: estimate and deep-check trace."""
    run_dir = runs / "deep"
    subprocess.run([sys.executable, str(ROOT / "launch.py"), *COMMON, *extra, "dry_run=deep",
                    f"hydra.run.dir={run_dir}"], cwd=ROOT, capture_output=True, text=True, check=True)
    plan = json.loads((run_dir / "result.json").read_text())["plan"]
    return {"estimated_gib": plan["memory_estimate_gib"], "measured_gib": plan["memory_measured_gib"]}


def ingest_back(run_dir: Path, runs: Path) -> dict:
    out = runs / f"{run_dir.name}_ingested"
    proc = subprocess.run([sys.executable, "-m", "tprimat", "ingest", str(run_dir / "launch.log"), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    found = sorted(out.rglob("result.json"))
    if not found:
        return {"error": (proc.stdout + proc.stderr)[-1500:]}
    return json.loads(found[0].read_text())


def relative(a, b) -> float:
    return abs(a / b - 1) if a is not None and b else float("inf")


def report(name: str, result: dict, poller: NvmlPoller, runs: Path) -> list[tuple[str, bool, str]]:
    s, t, p = result["summary"], result["telemetry"], result["projection"]
    measured = [r for r in result["steps"] if not r["warmup"]]
    start, end = t["window_monotonic_s"]
    nvml = poller.window(start, end)
    events_s = sum(r["step_time_s"] for r in measured)
    print(f"{name}: {s['tokens_per_s_per_device']:.0f} tokens/s/device, {s['tflops_per_device']:.1f} TFLOP/s/device, "
          f"MFU {s['mfu']:.3f}, median step {s['step_time_s']['median']:.4f} s, peak memory "
          f"{s['peak_memory_gib']:.2f} GiB, energy {t['energy_j']:.0f} J ({t['energy_per_token_j']:.4f} J/token, "
          f"{t['avg_power_w']:.0f} W), {len(measured)} measured steps, run {result['_wall_s']:.0f} s")
    error = p["step_time_s"] / s["step_time_s"]["median"] - 1 if p.get("available") else None
    print(f"{name}: projection {p.get('step_time_s')} s/step vs measured {s['step_time_s']['median']:.4f}: "
          f"error {error:+.3f}" if error is not None else f"{name}: projection unavailable: {p.get('reason')}")
    print(f"{name}: energy over the window ({t['window_s']:.2f} s): sampler {t['energy_j']:.1f} J "
          f"({t['samples']} samples), NVML counter {nvml['nvml_counter_j']:.1f} J, NVML power integral "
          f"{nvml['nvml_power_integral_j']:.1f} J ({nvml['polls']} polls)")
    print(f"{name}: CUDA-event step times {events_s:.3f} s vs wall clock {t['window_s']:.3f} s over the same steps "
          f"(ratio {events_s / t['window_s']:.4f})")
    ingested = ingest_back(runs / name, runs)
    checks = [(f"{name} energy", relative(t["energy_j"], nvml["nvml_counter_j"]) <= ENERGY_TOLERANCE,
               f"{relative(t['energy_j'], nvml['nvml_counter_j']):.4f}"),
              (f"{name} timing", relative(events_s, t["window_s"]) <= TIMING_TOLERANCE,
               f"{relative(events_s, t['window_s']):.4f}")]
    if "summary" in ingested and ingested["summary"]:
        si = ingested["summary"]
        d_step = relative(si["step_time_s"]["median"], s["step_time_s"]["median"])
        d_rate = relative(si["tokens_per_s_per_device"], s["tokens_per_s_per_device"])
        print(f"{name}: ingested back: median step {si['step_time_s']['median']:.6f} s, "
              f"{si['tokens_per_s_per_device']:.1f} tokens/s/device, TFLOP/s/device {si.get('tflops_per_device')}")
        checks.append((f"{name} ingest", max(d_step, d_rate) <= INGEST_TOLERANCE, f"{max(d_step, d_rate):.6f}"))
    else:
        print(f"{name}: ingest failed: {ingested.get('error') or ingested.get('status')}")
        checks.append((f"{name} ingest", False, "no summary"))
    return checks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path("gpu_evidence"))
    ap.add_argument("--runs", type=Path, default=Path("/tmp/tprimat_gpu_runs"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    poller = NvmlPoller()
    poller.start()
    checks, summary = [], {}
    for name, extra in RUNS.items():
        memory = deep_check(extra, args.runs)
        result = launch(name, extra, args.steps, args.runs)
        if result["status"] != "ok":
            print(f"{name}: {result['status']}: {result['error']}")
            checks.append((name, False, result["status"]))
            continue
        print(f"{name}: memory before the run: estimated {memory['estimated_gib']:.2f} GiB, deep check "
              f"{memory['measured_gib']:.2f} GiB; allocator peak {result['summary']['peak_memory_gib']:.2f} GiB")
        checks += report(name, result, poller, args.runs)
        summary[name] = {"summary": result["summary"], "telemetry": result["telemetry"],
                         "projection": result["projection"], "memory_before": memory,
                         "device": result["environment"]["gpu"]}
        (args.out / f"{name}.json").write_text(json.dumps(result, indent=1))
    poller.stopping.set()
    (args.out / "summary.json").write_text(json.dumps({"checks": checks, "runs": summary}, indent=1))
    for label, ok, value in checks:
        print(f"check {label}: {'ok' if ok else 'FAILED'} ({value})")
    print(f"gpu_checks_passed={sum(ok for _, ok, _ in checks)}/{len(checks)}")


if __name__ == "__main__":
    main()
