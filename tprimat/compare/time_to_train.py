"""Time to train, scored as MLPerf Training scores it, from results ``tprimat ingest`` wrote of a results repository.

Each run: ``run_stop - run_start`` (the MLLOG records' ``time_ms``) in minutes, and whether it converged as
mlperf-logging's compliance check judges it (``run_time``: an eval met the round's quality target). Each system and
benchmark, by MLPerf Training's rules (training_policies training_rules.adoc, "Benchmark results"; the same
arithmetic as MLCommons' ``mlperf-logging`` ``result_summarizer._compute_strong_score_standalone``): the runs sorted,
the fastest and the slowest dropped, the rest averaged (the olympic mean); one run that did not converge counts as
the slowest and is the one dropped at that end; with more than one there is no valid score; the mean times the
folder's ``scaling.json`` factor where the review set one. A system with fewer runs than the rules require is shown
and flagged, never scored as if complete. The rules are each round's, as data with their sources
(``mlperf_rounds.json``). Where the runs' MLPerf Power readings gave each run's energy (``tprimat ingest``), the
system's energy score is the olympic mean of those energies in the order of the runs' times, times the same factor
(``_index_olympic_average``), in kWh and kWh per accelerator.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Optional

from tprimat.results.readfile import UnreadableFile, read_json

JOULES_PER_KWH = 3.6e6
RULE = ("Each run: run_stop - run_start in minutes. Each system and benchmark: the converged runs sorted, the fastest "
        "and the slowest dropped, the rest averaged; one run that did not converge is the slowest and the one dropped; "
        "more than one: no valid score; times the folder's scaling.json factor (MLPerf Training rules of the round, "
        "training_rules.adoc, Benchmark results; mlperf-logging's result_summarizer). Fewer runs than the rules "
        "require: flagged, no score. Energy (MLPerf Power): each run's readings over its time to train, the same "
        "olympic mean in the order of the runs' times, times the same factor.")


@cache
def rounds() -> dict:
    """``mlperf_rounds.json``: each round's runs required, quality targets and their sources."""
    return json.loads((Path(__file__).with_name("mlperf_rounds.json")).read_text())


def rule_of(round_: Optional[str], benchmark: str) -> tuple[Optional[dict], str]:
    """(the benchmark's rule, where it comes from): the round's own, else, for a round not stated, the rule every
    round with that benchmark states alike; (None, why) where there is none."""
    table = rounds()["rounds"]
    if round_ in table:
        found = table[round_]["benchmarks"].get(benchmark)
        return (found, f"MLPerf Training v{round_} rules") if found else (
            None, f"{benchmark} is not an LLM benchmark of MLPerf Training v{round_} in tprimat's table of the rules")
    same = [(r, b[benchmark]) for r, b in ((r, t["benchmarks"]) for r, t in table.items()) if benchmark in b]
    facts = {(b["runs_required"], b["target"], b.get("floor")) for _, b in same}
    where = f"round v{round_} not in tprimat's table of the rules" if round_ else "round not stated"
    if len(facts) == 1:
        return same[0][1], f"{where}: scored by the rules of v{', v'.join(r for r, _ in same)}, which state it alike"
    return None, f"{where}: runs required for {benchmark} not stated in tprimat's table of the rules" + (
        " (its rounds differ)" if same else "")


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
    energy_j: Optional[float] = None  # MLPerf Power: the run's energy to train, where its readings gave one
    energy_why: Optional[str] = None  # why its power readings gave none
    seq_length: Optional[float] = None  # tokens per sample (the result's training.seq_length)

    @property
    def kwh_per_1m_tokens(self) -> Optional[float]:
        """The run's energy over the tokens it trained until an eval first reached the target."""
        if self.energy_j is None or not self.samples_to_target or not self.seq_length:
            return None
        return self.energy_j / JOULES_PER_KWH / (self.samples_to_target * self.seq_length / 1e6)

    def as_dict(self) -> dict:
        return {"path": self.path, "minutes": self.minutes, "status": self.status, "converged": self.converged,
                "last_eval": self.last_eval, "samples_to_target": self.samples_to_target, "target": self.target,
                "target_source": self.target_source, "energy_j": self.energy_j}


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
    round: Optional[str] = None
    energy_j: Optional[float] = None  # the energy score (MLPerf Power), joules; None where the runs have none
    per_node: Optional[int] = None  # accelerators per node (systems JSON)

    @property
    def accelerator_row(self) -> Optional[str]:
        """The accelerator as its row of the hardware table names it (two spellings of one GPU are one row); None
        where no row matches its name."""
        from tprimat.spec.hardware import DEVICES, device_key_from_name

        key = device_key_from_name(self.accelerator) if self.accelerator else None
        return DEVICES[key].name if key else None

    @property
    def energy_kwh(self) -> Optional[float]:
        return self.energy_j / JOULES_PER_KWH if self.energy_j is not None else None

    @property
    def energy_kwh_per_1m_tokens(self) -> Optional[float]:
        """The median over converged runs of each run's energy per million tokens trained to the target (the
        unit of tprimat's own runs' ``energy_kwh_per_1m_tokens``)."""
        each = [v for r in self.runs if r.converged and (v := r.kwh_per_1m_tokens) is not None]
        return statistics.median(each) if each else None

    @property
    def energy_kwh_per_device(self) -> Optional[float]:
        return self.energy_kwh / self.devices if self.energy_kwh is not None and self.devices else None

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
        return {"submitter": self.submitter, "system": self.system, "benchmark": self.benchmark, "round": self.round,
                "score_minutes": self.minutes, "energy_kwh": self.energy_kwh,
                "energy_kwh_per_device": self.energy_kwh_per_device,
                "energy_kwh_per_1m_tokens": self.energy_kwh_per_1m_tokens, "olympic_mean_minutes": self.unscaled_minutes,
                "scaling_factor": self.scaling_factor, "runs": len(self.runs),
                "converged": sum(r.converged for r in self.runs), "accelerator": self.accelerator,
                "accelerator_row": self.accelerator_row, "per_node": self.per_node,
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


def run_time(result: dict, path: str, benchmark: str, rule: Optional[dict] = None) -> RunTime:
    """One run, judged as mlperf-logging's compliance check judges it before ``result_summarizer`` scores it: a run
    converged when its log has run_start and run_stop and at least one eval met the round's quality target (at or
    below it, above its floor: ``ATLEAST_ONE_CHECK``), whatever run_stop's status says; a target the log states
    where the round's rules state one is kept beside it, not judged by. With no rule known, the log's own target,
    else run_stop's ``success``, decides."""
    source = result.get("source") if isinstance(result.get("source"), dict) else {}
    start, stop = number(source.get("run_start_ms")), number(source.get("run_stop_ms"))
    minutes = (stop - start) / 60_000 if start is not None and stop is not None and stop >= start else None
    evals = [(e.get("samples_count"), number(e.get("value"))) for e in source.get("eval_accuracy") or []
             if isinstance(e, dict)] if isinstance(source.get("eval_accuracy"), list) else []
    evals = [(samples, value) for samples, value in evals if value is not None]
    logged, ruled = number(source.get("target_accuracy")), (rule or {}).get("target")
    target = ruled if ruled is not None else logged
    floor = (rule or {}).get("floor")
    target_source = ("MLPerf Training rules' quality target" if ruled is not None else
                     "log: MLLOG target_accuracy" if logged is not None else "not stated")
    if ruled is not None and logged is not None and logged != ruled:
        target_source += f" (the log states {logged:g}, not judged by)"
    if (rule or {}).get("higher_is_better"):  # qwen35_397b_grpo: an eval reward above the log's own target
        meets = lambda value: target is not None and value > target  # noqa: E731
    else:
        meets = lambda value: target is not None and value <= target and (floor is None or value > floor)  # noqa: E731
    reached = next((samples for samples, value in evals if meets(value)), None)
    status = source.get("status") if isinstance(source.get("status"), str) else None
    hit = any(meets(value) for _, value in evals) if target is not None else status == "success"
    place = source.get("mlperf") if isinstance(source.get("mlperf"), dict) else {}
    power = place.get("power") if isinstance(place.get("power"), dict) else {}
    return RunTime(path, minutes, minutes is not None and hit, status, evals[-1][1] if evals else None,
                   number(reached), target, target_source, number(power.get("energy_j")),
                   power.get("why") if isinstance(power.get("why"), str) else None,
                   number(dig(result, ("spec", "training", "seq_length"))))


def olympic(minutes: list[float], not_converged: int, by: Optional[list[float]] = None) -> Optional[float]:
    """mlperf-logging's olympic mean: sorted, one dropped from the fast end, and from the slow end one less for each
    run that did not converge (it was the slowest, already out). ``by``: sort ``minutes`` (energies) in the order of
    these (the runs' times), as its ``_index_olympic_average`` does."""
    dropped = rounds()["dropped_each_end"]
    order = sorted(range(len(minutes)), key=lambda i: (by or minutes)[i])
    kept = [minutes[i] for i in order][dropped:len(minutes) - (dropped - not_converged)]
    return sum(kept) / len(kept) if kept else None


def score(submitter: str, system: str, benchmark: str, runs: list[RunTime], scaling_factor: Optional[float],
          round_: Optional[str] = None) -> Score:
    s = Score(submitter, system, benchmark, runs, scaling_factor, round=round_)
    converged = [r.minutes for r in runs if r.converged]
    not_converged = len(runs) - len(converged)
    rule, said = rule_of(round_, benchmark)
    required = rule["runs_required"] if rule else None
    allowed = rounds()["max_not_converged"]
    if required is None or (round_ is not None and round_ not in rounds()["rounds"]):
        s.flags.append(said)
    elif len(runs) < required:
        s.flags.append(f"{len(runs)} runs of the {required} the rules require: no complete result")
    if not_converged > allowed:
        s.flags.append(f"{not_converged} runs did not converge (the rules allow {allowed}): no valid score")
        return s
    if not_converged:
        s.flags.append(f"{not_converged} run did not converge: dropped as the slowest")
    s.unscaled_minutes = olympic(converged, not_converged)
    if s.unscaled_minutes is None:
        s.flags.append("no run left after dropping the fastest and the slowest")
    elif required is None or len(runs) >= required:
        s.minutes = s.unscaled_minutes * (scaling_factor or 1.0)
    energy(s, not_converged)
    return s


def energy(s: Score, not_converged: int) -> None:
    """The energy score where every converged run has its energy (MLPerf Power), scored as its time is."""
    done = [r for r in s.runs if r.converged]
    why = next((r.energy_why for r in s.runs if r.energy_why), None)
    if why:
        s.flags.append(f"MLPerf Power: {why}")
    if not any(r.energy_j is not None for r in s.runs) or s.minutes is None:
        return
    if any(r.energy_j is None for r in done):
        s.flags.append("MLPerf Power: not every converged run has readings: no energy score")
        return
    joules = olympic([r.energy_j for r in done], not_converged, by=[r.minutes for r in done])
    s.energy_j = joules * (s.scaling_factor or 1.0) if joules is not None else None


def from_results(items: list[tuple[str, dict]]) -> list[Score]:
    """(path, result) pairs -> one Score per (round, submitter, system, benchmark) of the results that carry
    MLPerf's layout (``source.mlperf``), whatever their status; the others are not MLPerf runs and are left alone. A
    log ingested twice (the same ``source.sha256``) counts once."""
    runs: dict[tuple, dict] = {}
    first: dict[tuple, dict] = {}
    results: dict[tuple, list] = {}
    for path, result in items:
        source = result.get("source") if isinstance(result.get("source"), dict) else {}
        place = source.get("mlperf")
        if not isinstance(place, dict) or not all(isinstance(place.get(k), str) for k in ("submitter", "system", "benchmark")):
            continue
        round_ = place.get("round") if isinstance(place.get("round"), str) else None
        key = (round_ or "", place["submitter"], place["system"], place["benchmark"])
        once = source.get("sha256") if isinstance(source.get("sha256"), str) else path
        rule, _ = rule_of(round_, place["benchmark"])
        runs.setdefault(key, {}).setdefault(once, run_time(result, path, place["benchmark"], rule))
        first.setdefault(key, place)
        results.setdefault(key, []).append(result)
    return [system_score(key, by_log, first[key], results[key]) for key, by_log in sorted(runs.items())]


def system_score(key: tuple, by_log: dict, place: dict, results: list[dict]) -> Score:
    """One system and benchmark's score, with what its ``source.mlperf`` place and its results state."""
    factor = number(place.get("scaling_factor"))
    s = score(*key[1:], sorted(by_log.values(), key=lambda r: r.path), factor if factor and factor > 0 else None,
              key[0] or None)
    s.accelerator = place.get("accelerator") if isinstance(place.get("accelerator"), str) else None
    s.devices, s.nodes = (v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
                          for v in (place.get("devices"), place.get("nodes")))
    s.per_node = s.devices // s.nodes if s.devices and s.nodes and s.devices % s.nodes == 0 else None
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
