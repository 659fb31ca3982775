"""Group results by what was run and derive every headline metric from the evidence in the results.

A group is one spec identity (minus run bookkeeping); its label names model, framework, platform, device,
methodology, layout and precision (with the fp8 recipe), then the optimisations when they are not the defaults
(compile and its mode, recompute); ``?`` where an ingested log does not state a field. Results that leave the
model or the device unstated merge only with copies of the same log (its SHA-256): two such logs are no
evidence of one benchmark, so each is its own group, its label ending with its file. The unit of replication
is the repeat: each repeat's throughput is recomputed from its own measured steps (total tokens over total
time, per device), never read from a summary that could disagree with them; a result whose steps cannot
give a rate (an ingested log with printed throughput only) contributes its summary's figure, marked with
its provenance. The statistics are in ``tprimat.compare.stats``; the checks that flag a number in
``tprimat.compare.flags``.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass, field
from typing import Optional

from tprimat.compare import flags as checks
from tprimat.compare import stats
from tprimat.compare.load import Loaded
from tprimat.spec.build import IDENTITY_EXCLUDES, spec_identity
from tprimat.spec.compat import TE_SCALING
from tprimat.spec.hardware import lookup
from tprimat.spec.keeps import MEGATRON_CORE


def identity_of(result: dict) -> str:
    """The group key: the spec's identity (``tprimat.spec.build.spec_identity``, the key resume uses too), and
    the log's own identity where the spec does not say which model ran on which device (``unstated``). An MLPerf
    run's group is its system and benchmark (``mlperf_place``): the rules' runs of one result differ only in the seed."""
    place = mlperf_place(result)
    if place is not None:
        return hashlib.sha256(("mlperf " + "/".join(place)).encode()).hexdigest()[:16]
    identity = spec_identity(result.get("spec") or {})
    if scaling_unrecorded(result):
        identity = hashlib.sha256(f"{identity} {BEFORE_FP8_RECIPE}".encode()).hexdigest()[:16]
    if not unstated(result):
        return identity
    evidence = (result.get("source") or {}).get("sha256") or result.get("run_id") or ""
    return hashlib.sha256(f"{identity} {evidence}".encode()).hexdigest()[:16]


BEFORE_FP8_RECIPE = "Transformer Engine's delayed scaling, launched before training.fp8.recipe reached the launch"


def scaling_unrecorded(result: dict) -> bool:
    """A Megatron-core fp8 launch recorded before ``training.fp8.recipe`` reached it (2026-11-29): its command and
    generated files name no fp8 recipe, and it ran delayed scaling whatever the spec said, so it is no repeat of a
    run of the same spec launched since (``tensorwise`` and ``current`` run current scaling there)."""
    spec = result.get("spec") or {}
    training = spec.get("training") or {}
    if (spec.get("framework") or {}).get("name") not in MEGATRON_CORE or training.get("precision") != "fp8" or \
            TE_SCALING.get((training.get("fp8") or {}).get("recipe", "tensorwise")) != "current":
        return False  # a delayed spec ran delayed then as now: a true repeat
    plan = result.get("plan")
    launch = plan.get("backend_config") if isinstance(plan, dict) else None
    if not isinstance(launch, dict) or not launch.get("argv"):
        return False  # no launch recorded (a log read by tprimat ingest): nothing to tell
    text = " ".join(map(str, launch["argv"])) + " ".join(map(str, (launch.get("file_contents") or {}).values()))
    return "fp8-recipe" not in text and "fp8_recipe" not in text


def mlperf_place(result: dict) -> Optional[tuple[str, ...]]:
    """(submitter, system, benchmark) of a run ``tprimat ingest`` read from an MLPerf results repository, else None;
    led by its round (``v5.0``) where the repository states one: one system name in two rounds is two results."""
    source = result.get("source")
    place = source.get("mlperf") if isinstance(source, dict) else None
    if not isinstance(place, dict):
        return None
    found = tuple(place.get(k) for k in ("submitter", "system", "benchmark"))
    if not all(isinstance(v, str) and v for v in found):
        return None
    return (f"v{place['round']}", *found) if isinstance(place.get("round"), str) and place["round"] else found


def unstated(result: dict) -> list[str]:
    """What a per-device rate is a rate of that the result leaves unstated: ``model``, ``device`` or both."""
    spec = result.get("spec") or {}
    platform = spec.get("platform") or {}
    stated = {"model": (spec.get("model") or {}).get("name"), "device": platform.get("gpu") or platform.get("name")}
    return [axis for axis, value in stated.items() if value is None]


def device_of(result: dict) -> str:
    plat = result["spec"]["platform"]
    return plat.get("gpu") or plat.get("name") or "?"


def shown(value) -> str:
    return "?" if value is None else str(value)


def layout_of(result: dict) -> str:
    plan, par = result.get("plan") or {}, result["spec"]["parallelism"]
    shard = "fsdp" if par.get("fsdp") else (f"zero{par['zero_stage']}" if par.get("zero_stage") else "")
    parts = [f"{axis}{shown(plan.get(axis, par.get(axis)))}" for axis in ("tp", "pp", "cp", "dp")]
    return " ".join(parts + ([shard] if shard else []))


@dataclass
class Repeat:
    """One measurement: a repeat of a run, its measured steps and its per-device rate."""

    source: str  # run file and repeat index
    rate: float  # tokens/s per device
    tokens: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    provenance: str = "measured"


@dataclass
class Group:
    identity: str
    runs: list[Loaded]
    aggregate: str = "median"
    metrics: dict = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    distinction: str = ""  # what tells this group from neighbours that would print the same label (build_groups)
    repeats: list[Repeat] = field(default_factory=list)

    @property
    def first(self) -> dict:
        return self.runs[0].result

    @property
    def spec(self) -> dict:
        return self.first["spec"]

    @property
    def model(self) -> str:
        return shown(self.spec["model"].get("name"))

    @property
    def framework(self) -> str:
        return shown(self.spec["framework"].get("name"))

    @property
    def platform(self) -> str:
        return shown(self.spec["platform"].get("name"))

    @property
    def device(self) -> str:
        return device_of(self.first)

    @property
    def methodology(self) -> str:
        return shown(self.spec["methodology"].get("name"))

    @property
    def precision(self) -> str:
        return shown(self.spec["training"].get("precision"))

    @property
    def numerics(self) -> str:
        """The precision with its fp8 recipe (``fp8 rowwise``): what the precision axis compares."""
        recipe = (self.spec["training"].get("fp8") or {}).get("recipe")
        return f"fp8 {recipe}" if self.precision == "fp8" and recipe else self.precision

    @property
    def compile(self) -> str:
        """``eager``, ``compile <mode>``, or ``?`` where the result does not state it."""
        tr = self.spec["training"]
        if tr.get("compile") is None:
            return "?"
        return f"compile {tr.get('compile_mode') or 'default'}" if tr["compile"] else "eager"

    @property
    def recompute(self) -> str:
        """``no recompute``, ``full recompute``, ``full recompute of N layers`` (the first N of each stage),
        ``selective recompute 1/k`` (every k-th layer), or ``?``."""
        tr = self.spec["training"]
        ac = tr.get("activation_checkpointing")
        if ac is None:
            return "?"
        if ac == "selective":
            k = str(tr.get("ac_frequency"))
            return f"selective recompute {k if '/' in k else '1/' + k}"
        if ac == "full" and tr.get("recompute_num_layers"):
            return f"full recompute of {tr['recompute_num_layers']} layers"
        return "no recompute" if ac == "none" else f"{ac} recompute"

    @property
    def optimisations(self) -> str:
        """The compile and recompute settings that differ from the defaults (eager, none), as the label shows them."""
        return ", ".join(v for v in (self.compile, self.recompute) if v not in ("eager", "no recompute", "?"))

    @property
    def world_size(self) -> Optional[int]:
        return (self.first.get("plan") or {}).get("world_size")

    @property
    def label(self) -> str:
        base = (f"{self.model} | {self.framework} | {self.device} x{shown(self.world_size)} | {self.methodology} | "
                f"{layout_of(self.first)} | {self.numerics}")
        base = f"{base} | {self.optimisations}" if self.optimisations else base
        log, place = (self.first.get("source") or {}).get("file"), mlperf_place(self.first)
        if place is not None:
            base = f"{base} | {'/'.join(place)}"  # MLPerf's unit of a result: the system and benchmark
        elif log and unstated(self.first):
            base = f"{base} | {log}"  # that log alone: name it
        return f"{base} | {self.distinction}" if self.distinction else base

    @property
    def logs(self) -> str:
        """The ingested logs' file names (``, ``-joined; empty for tprimat's own runs): which row is which log; past
        three, the first and a count; an MLPerf system by its submitter and system and its runs (seeds of one result)."""
        place = mlperf_place(self.first)
        if place is not None:
            return f"{place[-3]} {place[-2]} ({len(self.runs)} runs)"
        names = list(dict.fromkeys(f for run in self.runs if (f := (run.result.get("source") or {}).get("file"))))
        return ", ".join(names) if len(names) <= 3 else f"{names[0]} and {len(names) - 1} more logs"

    def axes(self) -> dict:
        return {"platform": self.platform, "device": self.device, "framework": self.framework,
                "precision": self.numerics, "layout": layout_of(self.first), "model": self.model,
                "methodology": self.methodology, "compile": self.compile, "recompute": self.recompute}

    def measured(self) -> list[dict]:
        """The steps a throughput is measured over: past warm-up, with a step time and tokens."""
        return [s for s in self.kept() if s.get("step_time_s") and s.get("tokens")]

    def kept(self) -> list[dict]:
        """Every step past warm-up (a printed step time or peak memory counts where the tokens are unknown)."""
        return [s for run in self.runs for s in run.result["steps"] if not s["warmup"]]

    def samples(self) -> tuple[list[float], list[float]]:
        """(tokens, seconds) of every measured step of every repeat, per device."""
        world = self.world_size or 1
        steps = self.measured()
        return [s["tokens"] / world for s in steps], [s["step_time_s"] for s in steps]

    @property
    def repeats_share_process(self) -> bool:
        return any(len({s.get("repeat", 0) for s in run.result["steps"]}) > 1 for run in self.runs)


def repeats_of(run: Loaded) -> list[Repeat]:
    result = run.result
    world = (result.get("plan") or {}).get("world_size")
    by_repeat: dict[int, list[dict]] = {}
    for s in result["steps"]:
        if not s["warmup"] and s.get("step_time_s") and s.get("tokens"):
            by_repeat.setdefault(s.get("repeat", 0), []).append(s)
    name = f"{run.path.parent.name}/{run.path.name}"
    if world and by_repeat:
        out = []
        for index, steps in sorted(by_repeat.items()):
            tokens, seconds = [s["tokens"] / world for s in steps], [s["step_time_s"] for s in steps]
            out.append(Repeat(f"{name} repeat {index}", sum(tokens) / sum(seconds), tokens, seconds,
                              ((result.get("summary") or {}).get("provenance") or {}).get("tokens_per_s") or "measured"))
        return out
    summary = result.get("summary") or {}
    rate = summary.get("tokens_per_s_per_device")
    source = (summary.get("provenance") or {}).get("tokens_per_s_per_device") or "reported"
    return [Repeat(name, rate, provenance=source)] if rate else []


def build_groups(loaded: list[Loaded], aggregate: str = "median", ceilings: Optional[dict] = None) -> list[Group]:
    by_identity: dict[str, Group] = {}
    for item in loaded:
        ident = identity_of(item.result)
        by_identity.setdefault(ident, Group(ident, [], aggregate)).runs.append(item)
    distinguish(list(by_identity.values()))
    groups = sorted(by_identity.values(), key=lambda g: g.label)
    for group in groups:
        derive(group, ceilings or {})
    return groups


def flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def distinguish(groups: list[Group], shown: int = 4) -> None:
    """Groups of different workloads that print one label get the spec keys whose values tell them apart
    (``training.seq_length=128``), so that no table or line shows two workloads as one."""
    by_label: dict[str, list[Group]] = {}
    for group in groups:
        by_label.setdefault(group.label, []).append(group)
    for same in by_label.values():
        if len(same) < 2:
            continue
        specs = [flat({k: v for k, v in (g.first.get("spec") or {}).items() if k not in IDENTITY_EXCLUDES})
                 for g in same]
        keys = sorted({k for spec in specs for k in spec if len({json.dumps(s.get(k), sort_keys=True)
                                                                  for s in specs}) > 1})
        for group, spec in zip(same, specs):
            parts = [f"{k}={spec.get(k)}" for k in keys[:shown]] + ([f"+{len(keys) - shown} keys"] if len(keys) > shown else [])
            group.distinction = ", ".join(parts) if keys else f"spec {group.identity}"


def estimate(group: Group) -> tuple[Optional[float], stats.Interval]:
    """The group's tokens/s/device and the interval about that same estimator."""
    reps = group.repeats
    if not reps:
        return None, stats.Interval(float("nan"), float("nan"), "none")
    rates = [r.rate for r in reps]
    if len(reps) >= 2:
        return stats.aggregate(rates, group.aggregate), stats.repeats_ci(rates, group.aggregate)
    if reps[0].tokens:
        return rates[0], stats.within_run_ci(reps[0].tokens, reps[0].seconds)
    return rates[0], stats.Interval(rates[0], rates[0], "none")


def projected(group: Group, per_device: Optional[float]) -> dict:
    """The runs' own projection (``tprimat.spec.projection``) beside the measurement: median over the runs that
    carry one, and measured / projected."""
    rates = [p["tokens_per_s_per_device"] for run in group.runs
             if (p := run.result.get("projection")) and p.get("available") and p.get("tokens_per_s_per_device")]
    value = statistics.median(rates) if rates else None
    return {"projected_tokens_per_s_per_device": value,
            "measured_vs_projected": per_device / value if value and per_device else None}


def derive(group: Group, ceilings: dict) -> None:
    group.repeats = [r for run in group.runs for r in repeats_of(run)]
    per_device, interval = estimate(group)
    world = group.world_size
    plan = group.first.get("plan") or {}
    flops_per_token, peak = plan.get("flops_per_token"), plan.get("peak_tflops")
    tflops = flops_per_token * per_device / 1e12 if flops_per_token and per_device else None
    tflops_source = "computed" if tflops is not None else None
    if tflops is None:
        tflops = (group.first.get("summary") or {}).get("tflops_per_device")
        tflops_source = ((group.first.get("summary") or {}).get("provenance") or {}).get("tflops_per_device")
    kept = group.kept()
    seconds = [s["step_time_s"] for s in kept if s.get("step_time_s")]
    m = group.metrics
    m.update({
        "runs": len(group.runs), "repeats": len(group.repeats), "measured_steps": len(group.measured()),
        "tokens_per_s_per_device": per_device, "tokens_per_s": per_device * world if per_device and world else None,
        "tokens_per_s_per_device_ci": (interval.lo, interval.hi) if interval.kind != "none" else (None, None),
        "ci_kind": interval.kind, "ci_coverage": interval.coverage,
        "provenance": sorted({r.provenance for r in group.repeats}),
        "repeats_share_process": group.repeats_share_process,
        "step_time_s": stats.summarise_spread(seconds), "tflops_per_device": tflops, "tflops_provenance": tflops_source,
        "flops_convention": plan.get("flops_convention"),
        "mfu": tflops / peak if tflops is not None and peak else None, "peak_tflops": peak,
        "peak_source": plan.get("peak_source"),
    })
    ceiling = ceilings.get((ceiling_key(group.first), group.precision))
    m["mfu_vs_measured"] = tflops / ceiling if tflops is not None and ceiling else None
    m["measured_ceiling_tflops"] = ceiling
    m.update(projected(group, per_device))
    peaks_mem = [s["peak_memory_gib"] for s in kept if s.get("peak_memory_gib") is not None]
    m["peak_memory_gib"] = max(peaks_mem) if peaks_mem else None
    capacity = plan.get("device_memory_gib")
    m["memory_utilisation"] = m["peak_memory_gib"] / capacity if m["peak_memory_gib"] and capacity else None
    derive_cost_energy(group, m["tokens_per_s"], lookup(group.spec["platform"].get("gpu")))
    m["days_to_train_1t"] = 1e12 / m["tokens_per_s"] / 86400 if m["tokens_per_s"] else None
    m["days_to_train_15t"] = 15e12 / m["tokens_per_s"] / 86400 if m["tokens_per_s"] else None
    checks.run_all(group, tflops, ceiling)


def price_per_device_hour(group: Group) -> tuple[Optional[float], str]:
    configured = group.spec["platform"].get("price_per_device_hour_usd")
    if configured is not None:
        return configured, "platform.price_per_device_hour_usd"
    device = lookup(group.spec["platform"].get("gpu"))
    if device and device.price_per_hour_usd is not None:
        return device.price_per_hour_usd, device.price_source
    return None, "no price: set platform.price_per_device_hour_usd"


def measured_energy_per_token_j(result: dict) -> Optional[float]:
    """Telemetry's energy per token, or None when it cannot stand for the run: results written before
    telemetry sampled every device (no ``devices_sampled``) divided device 0's energy by every device's
    tokens, understating it about world-size times, so they count only for single-device runs."""
    telemetry = result.get("telemetry") or {}
    world = (result.get("plan") or {}).get("world_size")
    if "devices_sampled" not in telemetry and world != 1:
        return None
    return telemetry.get("energy_per_token_j")


def derive_cost_energy(group: Group, tokens_per_s: Optional[float], device_row) -> None:
    m, world = group.metrics, group.world_size
    price, price_source = price_per_device_hour(group)
    m["price_per_device_hour_usd"], m["price_source"] = price, price_source
    known = tokens_per_s and world
    m["usd_per_1t_tokens"] = price * world / 3600 / tokens_per_s * 1e12 if price is not None and known else None
    m["tokens_per_usd"] = tokens_per_s * 3600 / (price * world) if price and known else None
    measured = [v for v in (measured_energy_per_token_j(run.result) for run in group.runs) if v is not None]
    if measured:
        m["energy_j_per_token"], m["energy_source"] = sorted(measured)[len(measured) // 2], "measured (telemetry)"
    elif device_row is not None and known:
        m["energy_j_per_token"] = device_row.tdp_w * world / tokens_per_s
        m["energy_source"] = f"estimate: TDP {device_row.tdp_w:.0f} W x {world} devices"
    else:
        m["energy_j_per_token"], m["energy_source"] = None, "unavailable: no telemetry, or no TDP or throughput"
    j = m["energy_j_per_token"]
    m["energy_kwh_per_1m_tokens"] = j * 1e6 / 3.6e6 if j is not None else None
    m["energy_is_estimate"] = m["energy_source"].startswith("estimate")


def ceiling_key(result: dict) -> str:
    env = result.get("environment") or {}
    gpu = (env.get("gpu") or {}).get("name")
    return gpu or (env.get("cpu") or {}).get("model") or "unknown"


def ceilings_from(preflights: list[dict]) -> dict:
    """{(device name, precision): measured matmul TFLOP/s} from ``tprimat preflight`` files."""
    table = {}
    for pf in preflights:
        for precision, value in (pf.get("matmul_tflops") or {}).items():
            table[(pf["device_name"], precision)] = value
    return table


def group_summary(group: Group) -> dict:
    m = group.metrics
    return {"label": group.label, "identity": group.identity, "model": group.model, "framework": group.framework,
            "platform": group.platform, "device": group.device, "world_size": group.world_size,
            "methodology": group.methodology, "precision": group.precision, "layout": layout_of(group.first),
            "numerics": group.numerics, "compile": group.compile, "recompute": group.recompute,
            "optimisations": group.optimisations, "logs": group.logs, "distinction": group.distinction,
            **{k: (list(v) if isinstance(v, tuple) else v) for k, v in m.items() if k != "step_time_s"},
            "step_time_s_median": m["step_time_s"]["median"], "step_time_s_iqr": m["step_time_s"]["iqr"],
            "repeat_rates": [{"source": r.source, "tokens_per_s_per_device": r.rate, "provenance": r.provenance}
                             for r in group.repeats],
            "flags": list(group.flags)}
