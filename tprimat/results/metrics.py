"""Step records -> summary. Warm-up steps are kept in the records and never enter these statistics.

Rates are total tokens over total time (never a mean of per-step rates), as pyperf and MLPerf do. Every
headline figure carries its provenance (``summary.provenance``):

- ``measured``: tprimat's own timing of the steps (live runs);
- ``computed``: from stated facts (tokens per step, FLOPs per token, the device's peak) and step times;
- ``reported``: printed by the framework (median over the measured steps), used when tprimat cannot compute
  the figure itself;
- absent (null): neither.
"""

from __future__ import annotations

import itertools
import math
import operator
import statistics
from functools import partial
from itertools import compress, repeat
from operator import attrgetter, itemgetter, methodcaller
from typing import AbstractSet, Callable, Iterable, Optional, Sequence

import numpy as np

from tprimat.logs.stepcolumns import StepColumns
from tprimat.results.records import FIELD_NAMES, StepRecord

# Figures frameworks print per step (StepRecord.reported) -> summarised as their median over measured steps.
REPORTED = ("tokens_per_s_per_gpu", "tflops_per_gpu", "samples_per_s", "mfu_pct", "it_per_s", "tokens_per_s")


def step_time_stats(timed: "Columns") -> dict:
    times = timed.step_time_s
    return {
        "mean": statistics.fmean(times),
        "median": timed.median("step_time_s"),
        "min": min(times),
        "max": max(times),
        "std": sample_std(times) if len(times) > 1 else 0.0,
    }


NUMPY_MEDIAN_MIN = 4096  # values from which numpy's partition (and its import) beats sorting them all


def median(values: Iterable[float]) -> float:
    """The median as ``statistics.median`` gives it (the middle value, or the mean of the two middle ones); a
    long step column by numpy's partition rather than a sort of all of it (a 300k-step log: 5 ms, not 40)."""
    values = values if isinstance(values, (list, tuple)) else list(values)
    if len(values) < NUMPY_MEDIAN_MIN:
        return statistics.median(values)
    return partition_median(np.asarray(values, dtype=float))


def median_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """The median of the ratios of two columns of numbers, each ratio as Python divides it (a long column
    divided by numpy: the same IEEE division)."""
    if len(numerators) < NUMPY_MEDIAN_MIN:
        return median(list(map(operator.truediv, numerators, denominators)))
    return partition_median(np.asarray(numerators, dtype=float) / np.asarray(denominators, dtype=float))


def partition_median(array: np.ndarray) -> float:
    """``statistics.median`` of an array of numbers (no NaN) by numpy's partition: the middle value, or the mean
    of the two middle ones (``np.median`` does the same, after a NaN check that imports ``numpy.ma``)."""
    middle = len(array) // 2
    if len(array) % 2:
        return float(np.partition(array, middle)[middle])
    low, high = np.partition(array, (middle - 1, middle))[middle - 1:middle + 1]
    return (float(low) + float(high)) / 2


def sample_std(values: Sequence[float]) -> float:
    """The sample standard deviation, two passes over the differences from the first value (exact for close
    values: equal times give exactly 0), with exactly rounded sums (a long column: numpy's pairwise sums, within
    a few units in the last place): within rounding of ``statistics.stdev``, whose exact rationals cost about 1 us
    a value (a second on a 300k-step log)."""
    first = values[0]
    if len(values) >= NUMPY_MEDIAN_MIN:
        shifted = np.asarray(values, dtype=float) - first
        deviations = shifted - shifted.sum() / len(shifted)
        return math.sqrt(float(np.dot(deviations, deviations)) / (len(shifted) - 1))
    shifted = [v - first for v in values]
    mean = math.fsum(shifted) / len(shifted)
    return math.sqrt(math.fsum([(d - mean) ** 2 for d in shifted]) / (len(shifted) - 1))


NOT_NONE = partial(operator.is_not, None)


def _mean_or_none(values: Iterable[Optional[float]]) -> Optional[float]:
    present = list(filter(NOT_NONE, values))
    return statistics.fmean(present) if present else None


def _max_or_none(values: Iterable[Optional[float]]) -> Optional[float]:
    present = list(filter(NOT_NONE, values))
    return max(present) if present else None


def reported_medians(records: list[StepRecord]) -> dict:
    """Median of each figure the framework printed, over the non-warm-up steps that print it (a negative rate,
    which no throughput can be, is left out)."""
    return _reported_medians(Columns.of(records).kept())


def _reported_medians(kept: "Columns") -> dict:
    medians = {}
    for name in filter(kept.prints, REPORTED):
        values = list(filter(NOT_NONE, kept.printed(name)))
        if values and min(values) < 0:  # a negative rate, which no throughput can be, is a timer artefact
            values = [v for v in values if v >= 0]
        if values:
            medians[name] = median(values)
    return medians


class Columns:
    """Step records read a field at a time (``columns.step_time_s``: that field of every record, in order, read
    once, in a C-level pass; ``columns.printed(name)``: what each printed for ``name``): the summary reads each
    field it needs once, not each record's attributes once per figure (300k steps of an ingested log). Steps
    held as columns (``StepColumns``) are read as they are held."""

    def __init__(self, field: Callable[[str], Iterable], printed: Callable[[str], Iterable], count: int,
                 names: Optional[AbstractSet[str]] = None) -> None:
        self.field, self.printed_of, self.count, self.cache = field, printed, count, {}
        self.names = names  # the names any record printed, when known (else None)

    @classmethod
    def of(cls, records) -> "Columns":
        if isinstance(records, StepColumns):
            return cls(records.column, records.printed, len(records), frozenset(records.names()))
        dicts = all(map(isinstance, records, repeat(dict)))  # parsed steps, result step objects
        getter = itemgetter if dicts else attrgetter

        def field(name: str) -> Iterable:
            try:
                return tuple(map(getter(name), records))
            except KeyError:  # a step object without the field: null
                return tuple(map(methodcaller("get", name), records))

        def printed(name: str) -> Iterable:
            return tuple(p.get(name) if p else None for p in field("reported"))

        return cls(field, printed, len(records))

    def __getattr__(self, name: str) -> Sequence:
        if name not in FIELD_NAMES:
            raise AttributeError(name)
        if name not in self.cache:
            self.cache[name] = held(self.field(name))
        return self.cache[name]

    def printed(self, name: str) -> Sequence:
        """What each record printed for ``name`` (None: not printed)."""
        key = ("printed", name)
        if key not in self.cache:
            self.cache[key] = held(self.printed_of(name))
        return self.cache[key]

    def __len__(self) -> int:
        return self.count

    def median(self, name: str) -> float:
        """The median of a field (``median``), taken once."""
        key = ("median", name)
        if key not in self.cache:
            self.cache[key] = median(getattr(self, name))
        return self.cache[key]

    def prints(self, name: str) -> bool:
        """Whether any record may have printed ``name`` (True where that is not known)."""
        return self.names is None or name in self.names

    def where(self, keep: Iterable) -> "Columns":
        """The records whose ``keep`` is true: one run of them (the steps after a warm-up) sliced out of each
        column, any others picked."""
        if isinstance(keep, (list, tuple)) and all(keep):  # a column with a value on every record: a C-level look
            return self
        keep = list(map(bool, keep))
        count = keep.count(True)
        if count == len(keep):
            return self
        first = keep.index(True) if count else 0
        if keep[first:first + count].count(True) == count:
            return self.sliced(slice(first, first + count))
        return Columns(lambda name: compress(getattr(self, name), keep),
                       lambda name: compress(self.printed(name), keep), count, self.names)

    def kept(self) -> "Columns":
        """The records that are not warm-up."""
        warmup = self.warmup
        first = warmup.count(True)
        if isinstance(warmup, (list, tuple)) and not any(warmup[first:]):  # the warm-up steps first: one slice
            return self.sliced(slice(first, len(warmup))) if first else self
        return self.where(map(operator.not_, warmup))

    def sliced(self, rows: slice) -> "Columns":
        """The records ``rows`` (a slice of step 1)."""
        return Columns(lambda name: getattr(self, name)[rows], lambda name: self.printed(name)[rows],
                       len(range(self.count)[rows]), self.names)


def held(values: Iterable) -> Sequence:
    """A column as the summary holds it: a list or tuple as it is (only read), anything else read into a tuple."""
    return values if isinstance(values, (list, tuple)) else tuple(values)


def summarize(records: list[StepRecord], world_size: Optional[int], flops_per_token: Optional[float],
              peak_tflops: Optional[float], timing: str = "measured") -> Optional[dict]:
    """Summary of the non-warm-up steps; None when no figure at all can be given.

    ``timing``: the provenance of the step times (``measured`` live, ``reported`` when printed by a framework).
    """
    every = Columns.of(records)
    kept = every.kept()
    timed = kept.where(kept.step_time_s)
    measured = timed.where(timed.tokens)
    reported = _reported_medians(kept)
    if not len(timed) and not reported:
        return None
    summary = {
        "measured_steps": len(timed) or len(kept),
        "warmup_steps": len(every) - len(kept),
        "repeats": len(set(every.repeat)),
        "step_time_s": step_time_stats(timed) if len(timed) else None,
        "peak_memory_gib": _max_or_none(kept.peak_memory_gib),
        "avg_memory_gib": _mean_or_none(kept.memory_gib),
        "loss_first": next(filter(NOT_NONE, every.loss), None),
        "loss_final": kept.loss[-1] if len(kept) else None,
        "per_repeat": [per_repeat(measured, rep) for rep in sorted(set(measured.repeat))],
        "reported": reported,
    }
    summary.update(headline(measured, world_size, flops_per_token, peak_tflops, reported, timing))
    summary["provenance"]["step_time_s"] = step_time_source(timed, timing)
    return summary


def step_time_source(timed: Columns, timing: str) -> Optional[str]:
    if not len(timed):
        return None
    return "computed" if any(timed.printed("step_time_s_from")) else timing


def headline(measured: Columns, world: Optional[int], flops_per_token: Optional[float],
             peak_tflops: Optional[float], reported: dict, timing: str) -> dict:
    """tokens/s, tokens/s/device, TFLOP/s/device and MFU, each computed when the facts allow, else reported."""
    rate_source = "measured" if timing == "measured" else "computed"
    tokens_per_s = sum(measured.tokens) / sum(measured.step_time_s) if len(measured) else None
    per_device = tokens_per_s / world if tokens_per_s and world else None
    source = {"tokens_per_s": rate_source if tokens_per_s else None,
              "tokens_per_s_per_device": rate_source if per_device else None}
    if per_device is None and reported.get("tokens_per_s_per_gpu"):
        per_device, source["tokens_per_s_per_device"] = reported["tokens_per_s_per_gpu"], "reported"
        if tokens_per_s is None and world:
            tokens_per_s, source["tokens_per_s"] = per_device * world, "reported"
    tflops = flops_per_token * per_device / 1e12 if flops_per_token and per_device else None
    source["tflops_per_device"] = "computed" if tflops is not None else None
    if tflops is None and reported.get("tflops_per_gpu") is not None:
        tflops, source["tflops_per_device"] = reported["tflops_per_gpu"], "reported"
    mfu = tflops / peak_tflops if tflops is not None and peak_tflops else None
    source["mfu"] = "computed" if mfu is not None else None
    if mfu is None and reported.get("mfu_pct") is not None:
        mfu, source["mfu"] = reported["mfu_pct"] / 100, "reported"
    return {"tokens_per_s": tokens_per_s, "tokens_per_s_per_device": per_device,
            "steps_per_s": len(measured) / sum(measured.step_time_s) if len(measured) else None,
            "tflops_per_device": tflops, "mfu": mfu, "provenance": source}


def per_repeat(measured: Columns, repeat: int) -> dict:  # measured: steps with a time and tokens
    mine = measured if set(measured.repeat) == {repeat} else measured.where(map(operator.eq, measured.repeat,
                                                                                  itertools.repeat(repeat)))
    total_s = sum(mine.step_time_s)
    return {"repeat": repeat, "measured_steps": len(mine),
            "step_time_s_median": mine.median("step_time_s"),
            "tokens_per_s": sum(mine.tokens) / total_s}
