"""The checks that make a group's number untrustworthy. Each adds a flag to the group (``flags`` in
comparison.json, a column in report.md and the console table); none changes a number.

- ``inconsistent repeats``: repeats whose rates disagree beyond what their own within-run spread explains
  (listed one by one).
- ``IMPOSSIBLE``: TFLOP/s per device above the device's dense peak; on CPU or an unknown device, above the
  measured matmul ceiling (``tprimat preflight``) or, without one, above the fastest device in the table.
- ``INCONSISTENT``: a result whose summary throughput disagrees with its own steps' tokens and times.
- ``not steady``: the median step time moved across the measured window.
- ``unread step lines``: an ingested log of which more than 1% of the lines recognised as step lines could not
  be read (``source.unparsed_lines``): its figures may rest on a biased subset.
- ``shared machine``: a run measured while other processes took more than 10% of the machine's CPU time, or
  shared its GPUs (``contention``, tprimat.measure.contention).
- ``short warm-up``: a run (an ingested log) with too few steps to exclude the warm-up it asks for: its
  measured steps are the ones a longer run would have called warm-up.
"""

from __future__ import annotations

from itertools import combinations
from typing import Optional

from tprimat.compare import stats
from tprimat.measure.contention import shared
from tprimat.spec.hardware import DEVICES, lookup

DRIFT_WARN = 0.05  # 5% change of the median step time across the measured window
SUMMARY_TOLERANCE = 0.02  # a summary's tokens/s vs its own steps
REPEAT_GAP = 0.05  # repeats must also differ by more than this to be called inconsistent
UNTIMED_REPEAT_GAP = 0.5  # repeats without steps (reported figures only): ratio beyond 1.5x
UNREAD_SHARE = 0.01  # more than 1% of a log's step lines unread


def run_all(group, tflops: Optional[float], ceiling: Optional[float]) -> None:
    check_repeats(group)
    check_physics(group, tflops, ceiling)
    check_summaries(group)
    check_drift(group)
    check_warmup(group)
    check_unread(group)
    check_shared(group)


def check_shared(group) -> None:
    """A run measured beside other work (``contention``: CPU time of other processes, other processes on its GPUs)."""
    for run in group.runs:
        why = shared(run.result.get("contention"))
        if why:
            group.flags.append(f"shared machine: {run.path.parent.name}/{run.path.name} was measured beside other "
                               f"work ({why})")


def check_unread(group) -> None:
    for run in group.runs:
        unread = (run.result.get("source") or {}).get("unparsed_lines") or 0
        total = unread + len(run.result.get("steps") or [])
        if total and unread / total > UNREAD_SHARE:
            group.flags.append(f"unread step lines: {run.path.parent.name}/{run.path.name} left out {unread} of "
                               f"{total} lines recognised as step lines ({unread / total:.1%}; source.unparsed_lines)")


def _apart(a, b) -> bool:
    if a.tokens and b.tokens:
        ia, ib = stats.within_run_ci(a.tokens, a.seconds), stats.within_run_ci(b.tokens, b.seconds)
        overlap = ia.lo <= ib.hi and ib.lo <= ia.hi
        return not overlap and max(a.rate, b.rate) / min(a.rate, b.rate) > 1 + REPEAT_GAP
    return max(a.rate, b.rate) / min(a.rate, b.rate) > 1 + UNTIMED_REPEAT_GAP


def check_repeats(group) -> None:
    """Repeats that disagree; an MLPerf system's runs are seeds of one result (each its own convergence), not
    repeats of one measurement: never flagged."""
    from tprimat.compare.groups import mlperf_place

    if mlperf_place(group.first) is not None:
        return
    reps = [r for r in group.repeats if r.rate and r.rate > 0]
    if any(_apart(a, b) for a, b in combinations(reps, 2)):
        listed = "; ".join(f"{r.source}: {r.rate:,.4g} tokens/s/device ({r.provenance})" for r in reps)
        group.flags.append(f"inconsistent repeats: rates disagree beyond their within-run spread: {listed}")


def fastest_table_peak(precision: str) -> tuple[float, str]:
    best = max(DEVICES.values(), key=lambda d: d.peak_tflops(precision) or d.bf16_tflops or 0)
    return best.peak_tflops(precision) or best.bf16_tflops, best.name


def check_physics(group, tflops: Optional[float], ceiling: Optional[float]) -> None:
    """A TFLOP/s per device above what the device can do cannot be real: flag it, never print it as a win."""
    if tflops is None:
        return
    precision = "fp8" if group.precision == "fp8" else "bf16"
    row = lookup(group.spec["platform"].get("gpu"))
    if row is not None:
        limit, what = row.peak_tflops(precision) or row.bf16_tflops, f"the {row.name} dense {group.precision} peak"
    elif ceiling:
        limit, what = ceiling, "this device's measured matmul ceiling (tprimat preflight)"
    else:
        limit, name = fastest_table_peak(precision)
        what = f"the fastest device in the hardware table ({name}, {precision})"
    if limit and tflops > limit:
        per_device = group.metrics.get("tokens_per_s_per_device")
        tokens = f" ({per_device:,.0f} tokens/s/device)" if per_device else ""
        group.flags.append(f"IMPOSSIBLE: {tflops:,.4g} TFLOP/s per device exceeds {what} of {limit:,.0f} TFLOP/s{tokens}")


def check_summaries(group) -> None:
    for run in group.runs:
        result, summary = run.result, run.result.get("summary") or {}
        provenance = (summary.get("provenance") or {}).get("tokens_per_s", "measured")
        steps = [s for s in result["steps"] if not s["warmup"] and s.get("step_time_s") and s.get("tokens")]
        claimed = summary.get("tokens_per_s")
        if not steps or not claimed or provenance == "reported":
            continue
        actual = sum(s["tokens"] for s in steps) / sum(s["step_time_s"] for s in steps)
        if abs(claimed / actual - 1) > SUMMARY_TOLERANCE:
            group.flags.append(f"INCONSISTENT: {run.path.parent.name}/{run.path.name} claims {claimed:,.4g} tokens/s "
                               f"but its own steps give {actual:,.4g} tokens/s")


def check_drift(group) -> None:
    for run in group.runs:
        if (run.result.get("source") or {}).get("format") == "mlperf":
            continue  # MLPerf's blocks run between evals to a quality target: not a window of like steps
        times = [s["step_time_s"] for s in run.result["steps"] if not s["warmup"] and s.get("step_time_s")]
        change = stats.drift(times)
        if abs(change) > DRIFT_WARN:
            group.flags.append(f"not steady: median step time moved {change:+.1%} across the measured window of "
                               f"{run.path.parent.name}/{run.path.name} (more warm-up or longer runs)")


def check_warmup(group) -> None:
    for run in group.runs:
        wanted = ((run.result.get("spec") or {}).get("benchmark") or {}).get("warmup_steps") or 0
        by_repeat: dict = {}
        for s in run.result["steps"]:
            by_repeat.setdefault(s.get("repeat", 0), []).append(s)
        for steps in by_repeat.values():
            warm = sum(1 for s in steps if s["warmup"])
            if warm < wanted and len(steps) > warm and not past_warmup(steps, wanted):
                group.flags.append(
                    f"short warm-up: {run.path.parent.name}/{run.path.name} has {len(steps)} steps from step "
                    f"{steps[0]['step']}, so {warm} of benchmark.warmup_steps={wanted} were excluded as warm-up: its "
                    f"{len(steps) - warm} measured steps are early ones (a longer log, or --warmup-steps, says which "
                    "to keep)")
                break


def past_warmup(steps: list[dict], wanted: int) -> bool:
    """Whether the step numbers place a repeat's first printed step past its warm-up: later than ``wanted``
    printed intervals (the median gap between printed steps) into the run, as an excerpt of a long log is."""
    numbers = [s["step"] for s in steps]
    gaps = sorted(b - a for a, b in zip(numbers, numbers[1:]) if b > a)
    if not gaps:  # one printed step: it may average every iteration since the start (Megatron's log interval)
        return False
    return numbers[0] > wanted * gaps[len(gaps) // 2]


def counted(flags: list[str]) -> list[str]:
    """Each kind of flag (its text before the first ':') once, with how many of the group's runs raised it: a
    flag shared by several runs is one line, not one per run."""
    by_kind: dict[str, list[str]] = {}
    for flag in flags:
        by_kind.setdefault(flag.split(":", 1)[0], []).append(flag)
    return [found[0] if len(found) == 1 else f"{kind} ({len(found)} runs; the first: {found[0].split(':', 1)[-1].strip()})"
            for kind, found in by_kind.items()]
