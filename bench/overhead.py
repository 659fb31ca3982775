"""Overhead of tprimat's instrumentation: the same model trained with and without it, in one process.

Bare: ``trainer.step`` in a loop, one device sync at the end. Instrumented: the same steps through
``tprimat.measure.step.run_measured`` (device-synchronised clock, memory probe, loss/grad-norm reads, step
records, a formatted log line per step) with the telemetry sampler running on its thread, started for this arm
and stopped after it, so that the bare arm runs without it. Rounds alternate their order; the ratio is the median
of the per-round ratios. Last line: ``overhead_ratio=<x>`` (target: at most 1.01).

    python bench/overhead.py [--rounds 7] [--steps 8] [hydra overrides, e.g. model=qwen_tiny]
"""

from __future__ import annotations

import argparse
import io
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tprimat.backends.common import pick_device  # noqa: E402
from tprimat.backends.native.train import NativeTrainer  # noqa: E402
from tprimat.compose import compose  # noqa: E402
from tprimat.measure.devices import detect  # noqa: E402
from tprimat.measure.step import run_measured  # noqa: E402
from tprimat.measure.telemetry import Sampler, open_source  # noqa: E402
from tprimat.spec.build import build_spec  # noqa: E402
from tprimat.spec.plan import make_plan  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare(trainer: NativeTrainer, first: int, steps: int, device: torch.device) -> float:
    sync(device)
    t0 = time.perf_counter()
    for s in range(first, first + steps):
        loss, _, _ = trainer.step(s)
    loss.item()
    sync(device)
    return time.perf_counter() - t0


def instrumented(trainer: NativeTrainer, first: int, steps: int, device: torch.device, log: logging.Logger,
                 tokens: int, source, interval_s: float) -> float:
    records = []
    sampler = Sampler(source, interval_s).start() if source else None  # this arm's own sampler thread

    def on_step(r):
        records.append(r)
        if sampler:
            sampler.mark(measured=True)
        log.info("step %d | loss %.4f | lr %.3e | grad_norm %.3f | step_time %.3f s | %.0f tokens/s",
                 r.step, r.loss, r.lr, r.grad_norm, r.step_time_s, r.tokens / r.step_time_s)

    sync(device)
    t0 = time.perf_counter()
    run_measured(lambda s: trainer.step(first + s), steps, tokens, 0, 0, device, on_step)
    sync(device)
    elapsed = time.perf_counter() - t0
    if sampler:
        sampler.stop()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=8)
    args, overrides = parser.parse_known_args()
    cfg = compose(["logging.wandb.mode=disabled", "training.max_steps=100000", *overrides])
    hw = detect()
    spec = build_spec(cfg, hw)
    plan = make_plan(spec, hw)
    device = pick_device(spec)
    trainer = NativeTrainer(spec, plan, device)
    log = logging.getLogger("tprimat.bench")
    log.addHandler(logging.StreamHandler(io.StringIO()))  # format every line, as a real run does
    log.setLevel(logging.INFO)
    log.propagate = False

    source, _ = open_source(spec.platform.name)
    bare(trainer, 0, 2, device)  # burn-in: allocator, kernels, autotuning
    step, ratios, bare_s, inst_s = 2, [], [], []
    for r in range(args.rounds):
        order = ("bare", "inst") if r % 2 == 0 else ("inst", "bare")
        times = {}
        for kind in order:
            if kind == "bare":
                times[kind] = bare(trainer, step, args.steps, device)
            else:
                times[kind] = instrumented(trainer, step, args.steps, device, log, plan.tokens_per_step, source,
                                           spec.benchmark.telemetry_interval_s)
            step += args.steps
        ratios.append(times["inst"] / times["bare"])
        bare_s.append(times["bare"] / args.steps)
        inst_s.append(times["inst"] / args.steps)
    print(f"model={spec.model.name} device={device} steps/round={args.steps} rounds={args.rounds} "
          f"telemetry={source.name if source else 'unavailable'}")
    print(f"median step time: bare {statistics.median(bare_s) * 1e3:.2f} ms, "
          f"instrumented {statistics.median(inst_s) * 1e3:.2f} ms")
    print(f"per-round ratios: {' '.join(f'{x:.4f}' for x in ratios)}")
    print(f"overhead_ratio={statistics.median(ratios):.4f}")


if __name__ == "__main__":
    main()
