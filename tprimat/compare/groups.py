"""Group results by what was run, merge repeats of the same spec, and derive every headline metric.

A group is one resolved spec (minus run bookkeeping); its label names model, framework, platform, device,
methodology, layout and precision. Derived metrics: throughput (per device, with a bootstrap CI), step
time (median, IQR), TFLOP/s and MFU, memory, cost, energy (measured or a labelled TDP estimate), time to
train, and the flags that make a number untrustworthy.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Optional

from tprimat.compare import stats
from tprimat.compare.load import Loaded
from tprimat.spec.build import spec_identity
from tprimat.spec.hardware import lookup

DRIFT_WARN = 0.05  # 5% change of the median step time across the measured window


def identity_of(result: dict) -> str:
    """The group key: the spec's identity (``tprimat.spec.build.spec_identity``, the key resume uses too)."""
    return spec_identity(result.get("spec") or {})


def device_of(result: dict) -> str:
    plat = result["spec"]["platform"]
    return plat.get("gpu") or plat["name"]


def layout_of(result: dict) -> str:
    plan, par = result.get("plan") or {}, result["spec"]["parallelism"]
    shard = "fsdp" if par.get("fsdp") else (f"zero{par['zero_stage']}" if par.get("zero_stage") else "")
    parts = [f"tp{plan.get('tp', par['tp'])}", f"pp{plan.get('pp', par['pp'])}", f"cp{plan.get('cp', par['cp'])}",
             f"dp{plan.get('dp', par.get('dp'))}"]
    return " ".join(parts + ([shard] if shard else []))


@dataclass
class Group:
    identity: str
    runs: list[Loaded]
    aggregate: str = "median"
    metrics: dict = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)

    @property
    def first(self) -> dict:
        return self.runs[0].result

    @property
    def spec(self) -> dict:
        return self.first["spec"]

    @property
    def model(self) -> str:
        return self.spec["model"]["name"]

    @property
    def framework(self) -> str:
        return self.spec["framework"]["name"]

    @property
    def platform(self) -> str:
        return self.spec["platform"]["name"]

    @property
    def device(self) -> str:
        return device_of(self.first)

    @property
    def methodology(self) -> str:
        return self.spec["methodology"]["name"]

    @property
    def precision(self) -> str:
        return self.spec["training"]["precision"]

    @property
    def label(self) -> str:
        return (f"{self.model} | {self.framework} | {self.device} x{self.world_size} | {self.methodology} | "
                f"{layout_of(self.first)} | {self.precision}")

    @property
    def world_size(self) -> int:
        return int((self.first.get("plan") or {}).get("world_size") or 1)

    def measured(self) -> list[dict]:
        return [s for run in self.runs for s in run.result["steps"]
                if not s["warmup"] and s.get("step_time_s") and s.get("tokens")]

    def samples(self) -> tuple[list[float], list[float]]:
        """(tokens, seconds) of every measured step of every repeat: the bootstrap's unit."""
        steps = self.measured()
        return [s["tokens"] for s in steps], [s["step_time_s"] for s in steps]

    def repeat_rates(self) -> list[float]:
        rates = []
        for run in self.runs:
            per_repeat = (run.result.get("summary") or {}).get("per_repeat") or []
            rates += [r["tokens_per_s"] for r in per_repeat] or [run.result["summary"]["tokens_per_s"]]
        return rates


def build_groups(loaded: list[Loaded], aggregate: str = "median", ceilings: Optional[dict] = None) -> list[Group]:
    by_identity: dict[str, Group] = {}
    for item in loaded:
        ident = identity_of(item.result)
        by_identity.setdefault(ident, Group(ident, [], aggregate)).runs.append(item)
    groups = sorted(by_identity.values(), key=lambda g: g.label)
    for group in groups:
        derive(group, ceilings or {})
    return groups


def price_per_device_hour(group: Group) -> tuple[Optional[float], str]:
    configured = group.spec["platform"].get("price_per_device_hour_usd")
    if configured is not None:
        return configured, "platform.price_per_device_hour_usd"
    device = lookup(group.spec["platform"].get("gpu"))
    if device and device.price_per_hour_usd is not None:
        return device.price_per_hour_usd, device.price_source
    return None, "no price: set platform.price_per_device_hour_usd"


def derive(group: Group, ceilings: dict) -> None:
    tokens, seconds = group.samples()
    rates = group.repeat_rates()
    world = group.world_size
    tokens_per_s = stats.aggregate(rates, group.aggregate)
    ci_lo, ci_hi = stats.bootstrap_ci(tokens, seconds)
    plan = group.first.get("plan") or {}
    flops_per_token = plan.get("flops_per_token")
    per_device = tokens_per_s / world
    tflops = flops_per_token * per_device / 1e12 if flops_per_token else None
    peak = plan.get("peak_tflops")
    device_row = lookup(group.spec["platform"].get("gpu"))
    m = group.metrics
    m.update({
        "runs": len(group.runs), "repeats": len(rates), "measured_steps": len(seconds),
        "tokens_per_s": tokens_per_s, "tokens_per_s_per_device": per_device,
        "tokens_per_s_per_device_ci": (ci_lo / world, ci_hi / world),
        "step_time_s": stats.summarise_spread(seconds), "tflops_per_device": tflops,
        "flops_convention": plan.get("flops_convention"),
        "mfu": tflops / peak if tflops is not None and peak else None, "peak_tflops": peak,
        "peak_source": plan.get("peak_source"),
    })
    ceiling = ceilings.get((ceiling_key(group.first), group.precision))
    m["mfu_vs_measured"] = tflops / ceiling if tflops is not None and ceiling else None
    m["measured_ceiling_tflops"] = ceiling
    peaks_mem = [s["peak_memory_gib"] for s in group.measured() if s.get("peak_memory_gib") is not None]
    m["peak_memory_gib"] = max(peaks_mem) if peaks_mem else None
    capacity = plan.get("device_memory_gib")
    m["memory_utilisation"] = m["peak_memory_gib"] / capacity if m["peak_memory_gib"] and capacity else None
    derive_cost_energy(group, tokens_per_s, device_row)
    m["days_to_train_1t"] = 1e12 / tokens_per_s / 86400
    m["days_to_train_15t"] = 15e12 / tokens_per_s / 86400
    check_physics(group, tflops, device_row)
    check_drift(group)


def derive_cost_energy(group: Group, tokens_per_s: float, device_row) -> None:
    m, world = group.metrics, group.world_size
    price, price_source = price_per_device_hour(group)
    m["price_per_device_hour_usd"], m["price_source"] = price, price_source
    m["usd_per_1t_tokens"] = price * world / 3600 / tokens_per_s * 1e12 if price is not None else None
    m["tokens_per_usd"] = tokens_per_s * 3600 / (price * world) if price else None
    measured = [((run.result.get("telemetry") or {}).get("energy_per_token_j")) for run in group.runs]
    measured = [v for v in measured if v is not None]
    if measured:
        m["energy_j_per_token"], m["energy_source"] = statistics.median(measured), "measured (telemetry)"
    elif device_row is not None:
        m["energy_j_per_token"] = device_row.tdp_w * world / tokens_per_s
        m["energy_source"] = f"estimate: TDP {device_row.tdp_w:.0f} W x {world} devices"
    else:
        m["energy_j_per_token"], m["energy_source"] = None, "unavailable: no telemetry and no TDP for this device"
    j = m["energy_j_per_token"]
    m["energy_kwh_per_1m_tokens"] = j * 1e6 / 3.6e6 if j is not None else None
    m["energy_is_estimate"] = m["energy_source"].startswith("estimate")


def check_physics(group: Group, tflops: Optional[float], device_row) -> None:
    """A TFLOP/s per device above the device's dense peak cannot be real: flag it, never print it as a win."""
    if tflops is None or device_row is None:
        return
    peak = device_row.peak_tflops("fp8" if group.precision == "fp8" else "bf16") or device_row.bf16_tflops
    if peak and tflops > peak:
        group.flags.append(f"IMPOSSIBLE: {tflops:,.0f} TFLOP/s per device exceeds the {device_row.name} dense "
                           f"{group.precision} peak of {peak:,.0f} TFLOP/s "
                           f"({group.metrics['tokens_per_s_per_device']:,.0f} tokens/s/device)")


def check_drift(group: Group) -> None:
    for run in group.runs:
        times = [s["step_time_s"] for s in run.result["steps"] if not s["warmup"]]
        change = stats.drift(times)
        if abs(change) > DRIFT_WARN:
            group.flags.append(f"not steady: median step time moved {change:+.1%} across the measured window of "
                               f"{run.path.parent.name}/{run.path.name} (more warm-up or longer runs)")


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
            **{k: (list(v) if isinstance(v, tuple) else v) for k, v in m.items() if k != "step_time_s"},
            "step_time_s_median": m["step_time_s"]["median"], "step_time_s_iqr": m["step_time_s"]["iqr"],
            "flags": list(group.flags)}
