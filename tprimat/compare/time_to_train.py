"""Time to train, scored as MLPerf Training scores it, from results ``tprimat ingest`` wrote of a results repository.

Each run: ``run_stop - run_start`` (the MLLOG records' ``time_ms``) in minutes, its ``run_stop`` status
(``success`` is converged), and whether its last eval reached the benchmark's quality target. Each system and
benchmark, by MLPerf Training's rules (training_policies training_rules.adoc, "Benchmark results"; the same
arithmetic as MLCommons' ``mlperf-logging`` ``result_summarizer._compute_strong_score_standalone``): the runs sorted,
the fastest and the slowest dropped, the rest averaged (the olympic mean); one run that did not converge counts as
the slowest and is the one dropped at that end; with more than one there is no valid score; the mean times the
folder's ``scaling.json`` factor where the review set one. A system with fewer runs than the rules require is shown
and flagged, never scored as if complete.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tprimat.results.readfile import UnreadableFile, read_json

# Runs per result and quality targets (lower is better), MLPerf Training v5.1 rules (training_rules.adoc: "Benchmark
# results" and the quality-target table): Llama 3.1 8B pretraining to eval log perplexity 3.3, Llama 2 70B LoRA to
# eval loss 0.925; ten runs each.
REQUIRED_RUNS = {"llama31_8b": 10, "llama2_70b_lora": 10}
TARGETS = {"llama31_8b": 3.3, "llama2_70b_lora": 0.925}
MAX_NOT_CONVERGED = 1
RULE = ("Each run: run_stop - run_start in minutes. Each system and benchmark: the converged runs sorted, the fastest "
        "and the slowest dropped, the rest averaged; one run that did not converge is the slowest and the one dropped; "
        "more than one: no valid score; times the folder's scaling.json factor (MLPerf Training rules, "
        "training_rules.adoc, Benchmark results; mlperf-logging's result_summarizer). Fewer runs than the rules "
        "require: flagged, no score.")


@dataclass(frozen=True)
class RunTime:
    path: str
    minutes: Optional[float]  # None: run_start or run_stop not logged
    converged: bool
    status: Optional[str]
    last_eval: Optional[float]
    samples_to_target: Optional[float]
    target: Optional[float] = None
    target_source: str = "not stated"

    def as_dict(self) -> dict:
        return {"path": self.path, "minutes": self.minutes, "status": self.status, "converged": self.converged,
                "last_eval": self.last_eval, "samples_to_target": self.samples_to_target, "target": self.target,
                "target_source": self.target_source}


@dataclass
class Score:
    submitter: str
    system: str
    benchmark: str
    runs: list[RunTime]
    scaling_factor: Optional[float]
    minutes: Optional[float] = None  # the score; None where the rules give none
    unscaled_minutes: Optional[float] = None
    flags: list[str] = field(default_factory=list)
    accelerator: Optional[str] = None
    devices: Optional[int] = None
    nodes: Optional[int] = None
    stated: dict = field(default_factory=dict)  # what the runs' results state: ``STATED``'s keys, None where none does
    price_per_device_hour_usd: Optional[float] = None
    price_source: str = "no price stated (platform.price_per_device_hour_usd at ingest, or compare --price GPU=USD)"

    @property
    def gpu_hours(self) -> Optional[float]:
        return self.minutes * self.devices / 60 if self.minutes and self.devices else None

    @property
    def samples_to_target(self) -> Optional[float]:
        """The median over converged runs of the samples trained when an eval first reached the target."""
        reached = sorted(r.samples_to_target for r in self.runs if r.converged and r.samples_to_target is not None)
        return statistics.median(reached) if reached else None

    @property
    def cost_usd(self) -> Optional[float]:
        hours = self.gpu_hours
        return hours * self.price_per_device_hour_usd if hours and self.price_per_device_hour_usd else None

    def as_dict(self) -> dict:
        return {"submitter": self.submitter, "system": self.system, "benchmark": self.benchmark,
                "score_minutes": self.minutes, "olympic_mean_minutes": self.unscaled_minutes,
                "scaling_factor": self.scaling_factor, "runs": len(self.runs),
                "converged": sum(r.converged for r in self.runs), "accelerator": self.accelerator,
                "devices": self.devices, "nodes": self.nodes, "gpu_hours": self.gpu_hours,
                "samples_to_target": self.samples_to_target, **self.stated,
                "price_per_device_hour_usd": self.price_per_device_hour_usd, "price_source": self.price_source,
                "cost_to_train_usd": self.cost_usd, "flags": self.flags, "run_minutes": [r.minutes for r in self.runs],
                "run_details": [r.as_dict() for r in self.runs]}


def number(value) -> Optional[float]:
    """A finite real from JSON (bools, strings, non-finite and out-of-range values are not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def run_time(result: dict, path: str, benchmark: str) -> RunTime:
    """One run: a run converged when its run_stop says ``success`` and, where the benchmark's target is known and
    the log has evals, one reached it (mlperf-logging's compliance check asks both)."""
    source = result.get("source") if isinstance(result.get("source"), dict) else {}
    start, stop = number(source.get("run_start_ms")), number(source.get("run_stop_ms"))
    minutes = (stop - start) / 60_000 if start is not None and stop is not None and stop >= start else None
    evals = [(e.get("samples_count"), number(e.get("value"))) for e in source.get("eval_accuracy") or []
             if isinstance(e, dict)] if isinstance(source.get("eval_accuracy"), list) else []
    evals = [(samples, value) for samples, value in evals if value is not None]
    logged = number(source.get("target_accuracy"))
    target = logged if logged is not None else TARGETS.get(benchmark)
    target_source = ("log: MLLOG target_accuracy" if logged is not None else
                     "MLPerf Training rules' quality target" if target is not None else "not stated")
    reached = next((samples for samples, value in evals if target is not None and value <= target), None)
    status = source.get("status") if isinstance(source.get("status"), str) else None
    hit = target is None or not evals or any(value <= target for _, value in evals)
    return RunTime(path, minutes, status == "success" and minutes is not None and hit, status,
                   evals[-1][1] if evals else None, number(reached), target, target_source)


def olympic(minutes: list[float], not_converged: int) -> Optional[float]:
    """mlperf-logging's olympic mean: sorted, one dropped from the fast end, and from the slow end one less for each
    run that did not converge (it was the slowest, already out)."""
    kept = sorted(minutes)[MAX_NOT_CONVERGED:len(minutes) - (MAX_NOT_CONVERGED - not_converged)]
    return sum(kept) / len(kept) if kept else None


def score(submitter: str, system: str, benchmark: str, runs: list[RunTime], scaling_factor: Optional[float]) -> Score:
    s = Score(submitter, system, benchmark, runs, scaling_factor)
    converged = [r.minutes for r in runs if r.converged]
    not_converged = len(runs) - len(converged)
    required = REQUIRED_RUNS.get(benchmark)
    if required is None:
        s.flags.append(f"runs required for {benchmark}: not stated in tprimat's table of the rules")
    elif len(runs) < required:
        s.flags.append(f"{len(runs)} runs of the {required} the rules require: no complete result")
    if not_converged > MAX_NOT_CONVERGED:
        s.flags.append(f"{not_converged} runs did not converge (the rules allow {MAX_NOT_CONVERGED}): no valid score")
        return s
    if not_converged:
        s.flags.append(f"{not_converged} run did not converge: dropped as the slowest")
    s.unscaled_minutes = olympic(converged, not_converged)
    if s.unscaled_minutes is None:
        s.flags.append("no run left after dropping the fastest and the slowest")
    elif required is None or len(runs) >= required:
        s.minutes = s.unscaled_minutes * (scaling_factor or 1.0)
    return s


def from_results(items: list[tuple[str, dict]]) -> list[Score]:
    """(path, result) pairs -> one Score per (submitter, system, benchmark) of the results that carry MLPerf's
    layout (``source.mlperf``), whatever their status; the others are not MLPerf runs and are left alone. A log
    ingested twice (the same ``source.sha256``) counts once."""
    runs: dict[tuple, dict] = {}
    first: dict[tuple, dict] = {}
    results: dict[tuple, list] = {}
    for path, result in items:
        source = result.get("source") if isinstance(result.get("source"), dict) else {}
        place = source.get("mlperf")
        if not isinstance(place, dict) or not all(isinstance(place.get(k), str) for k in ("submitter", "system", "benchmark")):
            continue
        key = (place["submitter"], place["system"], place["benchmark"])
        once = source.get("sha256") if isinstance(source.get("sha256"), str) else path
        runs.setdefault(key, {}).setdefault(once, run_time(result, path, place["benchmark"]))
        first.setdefault(key, place)
        results.setdefault(key, []).append(result)
    return [system_score(key, by_log, first[key], results[key]) for key, by_log in sorted(runs.items())]


def system_score(key: tuple, by_log: dict, place: dict, results: list[dict]) -> Score:
    """One system and benchmark's score, with what its ``source.mlperf`` place and its results state."""
    factor = number(place.get("scaling_factor"))
    s = score(*key, sorted(by_log.values(), key=lambda r: r.path), factor if factor and factor > 0 else None)
    s.accelerator = place.get("accelerator") if isinstance(place.get("accelerator"), str) else None
    s.devices, s.nodes = (v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
                          for v in (place.get("devices"), place.get("nodes")))
    if place.get("scaling_factor") is not None and s.scaling_factor is None:
        s.flags.append(f"scaling_factor {place.get('scaling_factor')!r} is not a positive number: not applied")
    flags = place.get("flags")
    s.flags += [f for f in flags if isinstance(f, str)] if isinstance(flags, list) else []
    s.stated = stated_by(results, place)
    return s


# What a system's runs state beside the score: (result path, how many runs may disagree before it reads "varies")
STATED = {"gpu": ("spec", "platform", "gpu"), "framework": None, "precision": ("spec", "training", "precision"),
          "price_per_device_hour_usd": ("spec", "platform", "price_per_device_hour_usd"),
          "global_batch_size": ("spec", "training", "global_batch_size"),
          "tokens_per_s_per_device": ("summary", "tokens_per_s_per_device")}


def dig(data, path: tuple):
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def stated_by(results: list[dict], place: dict) -> dict:
    """Each ``STATED`` value the runs state: their one value, the median of a number that differs between runs
    (throughput), "varies" for a text that does; None where none states it. The framework is the systems JSON's."""
    out = {"framework": place.get("framework") if isinstance(place.get("framework"), str) else None}
    said = place.get("precision") if isinstance(place.get("precision"), str) else None
    for key, path in STATED.items():
        if path is None:
            continue
        values = [v for r in results if (v := dig(r, path)) is not None and not isinstance(v, (dict, list))]
        numbers = [number(v) for v in values if number(v) is not None]
        if key in ("tokens_per_s_per_device", "price_per_device_hour_usd"):
            out[key] = statistics.median(numbers) if numbers else None
        else:
            distinct = set(map(str, values))
            out[key] = values[0] if len(distinct) == 1 else ("varies" if distinct else None)
    if out["precision"] is None and said:
        out["precision"] = said  # the systems JSON's words (``source.mlperf.precision``)
    return out


def read_all(paths: list[str]) -> list[tuple[str, dict]]:
    """Every result.json under ``paths`` that parses as a JSON object (status and schema not required: a run that
    did not converge still counts in the score)."""
    found = []
    for raw in paths:
        root = Path(raw)
        files = [root] if root.is_file() else sorted(root.rglob("result.json"))
        for file in files:
            try:  # the reader every compare path shares: regular files, strict JSON (load() says why it skips)
                data = read_json(file)
            except UnreadableFile:
                continue
            if isinstance(data, dict):
                found.append((str(file), data))
    return found
