"""A real 2-stage pipeline under torch's own 1F1B schedule on CPU (two processes over gloo), whose stages sleep a
known time forward and twice that backward: its step times are the schedule's own timeline, not a formula's, and
sleeping keeps them steady on a busy machine. ``python -m tests.pipeline_timeline PORT LAYERS,MICRO ...`` prints
one JSON line: the median step time in seconds of each (layers per stage, micro batches)."""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PER_LAYER_FORWARD_S = 0.010  # a stage's forward per layer; its backward is twice that
PER_STAGE_FORWARD_S = 0.005  # and per micro batch, whatever the layers (its share of head and hand-offs)
STEPS = 4  # measured after one warm-up step


class Sleep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, forward_s: float):
        time.sleep(forward_s)
        ctx.backward_s = 2 * forward_s
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.backward_s)
        return grad, None


class SleepingStage(torch.nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4))
        self.forward_s = PER_LAYER_FORWARD_S * layers + PER_STAGE_FORWARD_S

    def forward(self, x):
        return Sleep.apply(x * self.weight, self.forward_s)


def step_time_s(rank: int, layers: int, micro: int) -> float:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    stage = PipelineStage(SleepingStage(layers), rank, 2, torch.device("cpu"))
    schedule = Schedule1F1B(stage, n_microbatches=micro, loss_fn=lambda out, target: (out - target).pow(2).sum())
    batch = torch.ones(2 * micro, 4)
    times = []
    for _ in range(STEPS + 1):
        dist.barrier()
        started = time.perf_counter()
        schedule.step(batch) if rank == 0 else schedule.step(target=torch.zeros(2 * micro, 4))
        dist.barrier()
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def worker(rank: int, port: int, points: list, queue) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        measured = {f"{layers},{micro}": step_time_s(rank, layers, micro) for layers, micro in points}
        if rank == 0:
            queue.put(measured)
    finally:
        dist.destroy_process_group()


def main(port: int, points: list) -> dict:
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    mp.start_processes(worker, args=(port, points, queue), nprocs=2, start_method="spawn")
    return queue.get()


if __name__ == "__main__":
    wanted = [tuple(int(v) for v in p.split(",")) for p in sys.argv[2:]]
    print(json.dumps(main(int(sys.argv[1]), wanted)))
