"""Honest, cheap step timing and memory probes.

GPU: CUDA events recorded around the step and a wait on the end event, so the time is the device's time
for the whole step; CPU: perf_counter around a synchronous step. Memory: allocator statistics on GPU,
the process's resident set on CPU.
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Callable, Optional

import psutil
import torch

from tprimat.results.records import StepRecord

GIB = 2**30


class StepClock:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        if self.cuda:
            self._start.record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        """Seconds since ``start``, after the device has finished the work queued in between."""
        if self.cuda:
            self._end.record()
            self._end.synchronize()
            return self._start.elapsed_time(self._end) / 1e3
        return time.perf_counter() - self._t0


class MemoryProbe:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._process = psutil.Process()
        self._seen_gib = 0.0  # the kernel's high-water mark can lag the counters /proc reports
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(device)

    def current_gib(self) -> float:
        if self.cuda:
            return torch.cuda.memory_allocated() / GIB
        rss = self._process.memory_info().rss / GIB
        self._seen_gib = max(self._seen_gib, rss)
        return rss

    def peak_gib(self) -> float:
        if self.cuda:
            return torch.cuda.max_memory_allocated() / GIB
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        return max(peak_kib / (GIB if sys.platform == "darwin" else 2**20), self._seen_gib)


StepFn = Callable[[int], tuple[torch.Tensor, torch.Tensor, float]]


def run_measured(step_fn: StepFn, steps: int, tokens_per_step: int, warmup_steps: int, repeat: int,
                 device: torch.device, on_step: Callable[[StepRecord], None],
                 clock: Optional[StepClock] = None) -> None:
    """Run ``steps`` optimizer steps through ``step_fn(step) -> (loss, grad_norm, lr)``, one record each."""
    clock = clock or StepClock(device)
    probe = MemoryProbe(device)
    for step in range(steps):
        clock.start()
        loss, grad_norm, lr = step_fn(step)
        seconds = clock.stop()
        on_step(StepRecord(step=step + 1, step_time_s=seconds, tokens=tokens_per_step, loss=loss.item(),
                           lr=lr, grad_norm=grad_norm.item(), memory_gib=probe.current_gib(),
                           peak_memory_gib=probe.peak_gib(), repeat=repeat, warmup=step < warmup_steps))
