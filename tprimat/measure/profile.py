"""The PyTorch profiler over chosen measured steps, and the per-step breakdown that answers "why".

``StepProfiler`` wraps a backend's step function: it starts ``torch.profiler`` before step ``profile.steps[0]``
and stops it after step ``profile.steps[1]`` (1-based step numbers of the first repeat), on the ranks in
``profile.ranks``; the trace is written as Chrome/Perfetto JSON (``profile/rank<r>.json`` in the run
directory). ``breakdown`` turns the profiled events into seconds per step by category:

- on GPUs, the device's kernels (their time ranges): matmul/GEMM, attention, communication (and how much of
  it ran while compute kernels did), optimizer, other compute, and idle (the profiled steps' time in which no
  kernel ran);
- on CPUs, the operators' self time on the training thread by the same categories, data loading (the time
  inside ``tprimat/data`` ranges), and idle (the rest of the steps' time).

The profiled steps stay in the run's statistics (they are real steps): the result states their median time
beside the unprofiled measured steps' as the profiling overhead. Pure arithmetic below ``breakdown`` is
tested by hand.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Callable, Optional

CATEGORIES = ("matmul", "attention", "communication", "optimizer", "data_loading", "other_compute", "idle")
PATTERNS = (  # first match wins: attention before matmul (flash kernels hold "gemm" in their names)
    ("communication", re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|c10d|gloo|broadcast|"
                                 r"send|recv|alltoall", re.I)),
    ("attention", re.compile(r"flash|attention|fmha|sdpa|_efficient_attention|scaled_dot_product", re.I)),
    ("optimizer", re.compile(r"adam|optimizer|_foreach|multi_tensor|lerp_", re.I)),
    ("matmul", re.compile(r"gemm|matmul|\bmm\b|aten::mm|aten::addmm|aten::bmm|aten::linear|cutlass|xmma|nvjet|"
                          r"Cijk|sm\d\d_|_scaled_mm|cublas|hipblas", re.I)),
)
DATA_RANGE = "tprimat/data"
TOP_KERNELS = 10


def category(name: str) -> str:
    for label, pattern in PATTERNS:
        if pattern.search(name):
            return label
    return "other_compute"


def union_s(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of [start, end] intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def intersection_s(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of (union of a) intersected with (union of b): |A| + |B| - |A u B|."""
    return union_s(a) + union_s(b) - union_s(a + b)


def device_breakdown(kernels: list[tuple[str, float, float]], window_s: float, steps: int) -> dict:
    """GPU kernels as (name, start_s, end_s) over ``steps`` profiled steps lasting ``window_s`` in all."""
    by_category: dict[str, list[tuple[float, float]]] = {c: [] for c in CATEGORIES}
    for name, start, end in kernels:
        by_category[category(name)].append((start, end))
    compute = [iv for c in ("matmul", "attention", "optimizer", "other_compute") for iv in by_category[c]]
    seconds = {c: union_s(by_category[c]) for c in CATEGORIES if c not in ("idle", "data_loading")}
    busy = union_s([iv for ivs in by_category.values() for iv in ivs])
    seconds["data_loading"] = 0.0  # host-side: on a GPU it shows as idle device time
    seconds["idle"] = max(window_s - busy, 0.0)
    overlapped = intersection_s(by_category["communication"], compute)
    return finish(seconds, steps, window_s, overlapped, "device kernels")


def host_breakdown(ops: list[tuple[str, float, bool]], window_s: float, steps: int) -> dict:
    """CPU operators as (name, self_s, inside a data-loading range) on the training thread."""
    seconds = {c: 0.0 for c in CATEGORIES}
    for name, self_s, data in ops:
        seconds["data_loading" if data else category(name)] += self_s
    seconds["idle"] = max(window_s - sum(seconds.values()), 0.0)
    return finish(seconds, steps, window_s, None, "host operators (self time)")


def finish(seconds: dict, steps: int, window_s: float, overlapped: Optional[float], basis: str) -> dict:
    per_step = {c: seconds[c] / steps for c in CATEGORIES}
    total = sum(per_step.values())
    return {"basis": basis, "steps": steps, "step_s": window_s / steps, "seconds_per_step": per_step,
            "share": {c: (v / total if total else None) for c, v in per_step.items()},
            "communication_overlapped_s_per_step": overlapped / steps if overlapped is not None else None}


def top_kernels(rows: list[tuple[str, float]], steps: int, limit: int = TOP_KERNELS) -> list[dict]:
    """The heaviest kernels (device) or operators (host) by total time: name, calls, seconds per step."""
    totals: dict[str, list] = {}
    for name, seconds in rows:
        entry = totals.setdefault(name, [0.0, 0])
        entry[0] += seconds
        entry[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:limit]
    return [{"name": name[:160], "category": category(name), "calls_per_step": calls / steps,
             "seconds_per_step": seconds / steps} for name, (seconds, calls) in ranked]


class StepProfiler:
    """``torch.profiler`` around steps ``first..last`` (1-based) of one repeat, on this rank if it is chosen."""

    def __init__(self, steps: tuple[int, int], rank: int, ranks: tuple[int, ...], device, out_dir: Optional[Path]):
        self.first, self.last = steps
        self.active = rank in ranks
        self.rank, self.device, self.out_dir = rank, device, out_dir
        self.profiler = None
        self.step_times: dict[int, float] = {}
        self.memory_modules: tuple = ()  # tracked by category over the first profiled step (``track_memory``)
        self.memory: dict = {"tracked": False, "reason": "not requested"}

    def track_memory(self, *modules, unsupported: Optional[str] = None) -> None:
        """Track ``modules`` (model, optimizer) by memory category over the first profiled step; ``unsupported``:
        why this run's layout cannot be followed (recorded instead)."""
        if unsupported:
            self.memory = {"tracked": False, "reason": unsupported}
        else:
            self.memory_modules = modules

    def wrap(self, step_fn: Callable) -> Callable:
        if not self.active:
            return step_fn

        def profiled(step: int):
            number = step + 1
            if number == self.first:
                self._start()
            if number == self.first and self.memory_modules:
                from tprimat.measure.memory_profile import CategoryTracker

                with CategoryTracker(self.device, *self.memory_modules) as tracker:
                    out = step_fn(step)
                self.memory = tracker.result
            else:
                out = step_fn(step)
            if number == self.last and self.profiler is not None:
                if self.device.type == "cuda":
                    import torch

                    torch.cuda.synchronize(self.device)
                self.profiler.stop()
            return out

        return profiled

    def _start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.profiler = profile(activities=activities, record_shapes=False, with_stack=False)
        self.profiler.start()

    def section(self, records: list) -> dict:
        """The result's ``profile`` section from the finished profiler and the step records of its repeat."""
        profiled = [r.step_time_s for r in records if self.first <= r.step <= self.last and r.step_time_s]
        others = [r.step_time_s for r in records if not r.warmup and not self.first <= r.step <= self.last
                  and r.step_time_s]
        overhead = {"profiled_step_s_median": statistics.median(profiled) if profiled else None,
                    "unprofiled_step_s_median": statistics.median(others) if others else None}
        if profiled and others:
            overhead["ratio"] = overhead["profiled_step_s_median"] / overhead["unprofiled_step_s_median"]
        from tprimat.measure.memory_profile import allocator_peaks

        out = {"tool": "torch", "steps": [self.first, self.last], "rank": self.rank, "overhead": overhead,
               "memory": {"by_category": self.memory, "allocator": allocator_peaks(self.device)}}
        if self.profiler is None:
            return {**out, "trace": None, "breakdown": None, "top": []}
        trace = None
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            trace = self.out_dir / f"rank{self.rank}.json"
            self.profiler.export_chrome_trace(str(trace))
        breakdown, top = analyse(self.profiler.events(), sum(profiled), len(profiled) or 1, self.device.type == "cuda")
        return {**out, "trace": str(trace.name) if trace else None, "breakdown": breakdown, "top": top}


def analyse(events, window_s: float, steps: int, cuda: bool) -> tuple[dict, list[dict]]:
    """Categorise a finished profiler's events (``profiler.events()``)."""
    if cuda:
        kernels = [(e.name, e.time_range.start / 1e6, e.time_range.end / 1e6) for e in events
                   if str(e.device_type).endswith("CUDA") and e.time_range.end > e.time_range.start
                   and not annotation(e)]
        return device_breakdown(kernels, window_s, steps), top_kernels([(n, b - a) for n, a, b in kernels], steps)
    threads = [e.thread for e in events if e.cpu_parent is None and e.name == DATA_RANGE] or \
        [e.thread for e in events if e.cpu_parent is None]
    main = statistics.mode(threads) if threads else None
    ops = [(e.name, e.self_cpu_time_total / 1e6, inside_data(e)) for e in events
           if e.thread == main and e.name != DATA_RANGE and not e.name.startswith("ProfilerStep")]
    return host_breakdown(ops, window_s, steps), top_kernels([(n, s) for n, s, _ in ops], steps)


def annotation(event) -> bool:
    """A ``record_function`` range mirrored on the device timeline (``Optimizer.step#AdamW.step``, tprimat's data
    range, ``ProfilerStep``): it spans kernels, it is not one."""
    return bool(getattr(event, "is_user_annotation", False)) or event.name == DATA_RANGE or "#" in event.name \
        or event.name.startswith("ProfilerStep")


def inside_data(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name == DATA_RANGE:
            return True
        parent = parent.cpu_parent
    return False
