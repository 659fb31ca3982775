"""The projection of a spec on its target device (``tprimat project``, and the ``projection`` section of dry
runs and runs): the fake-tensor trace of the native model's operations, the target's ceilings (hardware table
or a ``tprimat preflight`` file), and ``tprimat.spec.projection``'s arithmetic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from tprimat.spec import record
from tprimat.spec.plan import Plan
from tprimat.spec.projection import ceilings, project, unavailable
from tprimat.spec.schema import TprimatConf


def read_preflight(path: Optional[str]) -> Optional[dict]:
    if not path:
        return None
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("kind") != "tprimat_preflight":
        raise ValueError(f"{path}: not a tprimat preflight file (kind: tprimat_preflight)")
    return data


def projection_of(spec: TprimatConf, plan: Plan, preflight: Optional[dict] = None) -> dict:
    """Never raises: what cannot be projected says why (``available: false``, ``reason``)."""
    try:
        preflight = preflight if preflight is not None else read_preflight(spec.benchmark.preflight_file)
    except (OSError, ValueError) as exc:
        return unavailable(f"benchmark.preflight_file: {exc}")
    found, why = ceilings(spec, preflight)
    if found is None:
        return unavailable(why)
    try:
        from tprimat.backends.native.opcount import trace_work

        work = trace_work(spec)
    except Exception as exc:  # noqa: BLE001 - a model the tracer cannot follow has no projection, and says so
        return unavailable(f"the operation trace failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    projected = project(spec, work, found, plan.dp, plan.grad_accum_steps, plan.peak_tflops)
    if projected["available"] and spec.platform.name != "cpu":  # a CPU's projection is judged by its own slices
        projected["interval"] = record.interval(spec.framework.name, spec.platform.gpu)
    return projected


def print_projection(label: str, p: dict) -> None:
    if not p["available"]:
        print(f"{label}: no projection: {p['reason']}")
        return
    mfu = f", MFU {p['mfu']:.1%}" if p["mfu"] is not None else ""
    print(f"{label}: step {p['step_time_s']:.4g} s, {p['tokens_per_s_per_device']:,.0f} tokens/s/device, "
          f"{p['tflops_per_device']:,.1f} TFLOP/s/device{mfu}")
    if "interval" in p:
        print(f"  {record.phrase(p['interval'])}")
    parts = ", ".join(f"{k.removesuffix('_s')} {v:.3g} s" for k, v in p["breakdown_s"].items() if v)
    print(f"  where the time goes: {parts}")
    if p.get("method") == "measured-slice":
        print_measured(p)
        return
    for name, value in p["ceilings"].items():
        print(f"  ceiling {name}: {value}  ({p['sources'].get(source_key(name), '')})")


def source_key(ceiling: str) -> str:
    """A ceiling's name without its unit: the key its source is kept under (``intra_node_gb_s``: ``intra_node``)."""
    for unit in ("_tflops", "_gb_s", "_s"):
        if ceiling.endswith(unit):
            return ceiling.removesuffix(unit)
    return ceiling


def print_measured(p: dict) -> None:
    """The runs behind a measured-slice projection, each round's step and, with --verify, the spec's own run."""
    runs = ", ".join(f"{r['layers_per_stage']} layer(s) x {r['micro_batches']} micro batch(es): "
                     f"{r['step_time_s']:.4g} s" for r in p["measurements"])
    print(f"  measured slice ({p['measure_time_s']:.1f} s of measuring): {runs}")
    if p.get("step_time_s_per_round"):
        rounds = ", ".join(f"{s:.4g}" for s in p["step_time_s_per_round"])
        print(f"  the step from each round alone: {rounds} s (the spread is this machine's noise)")
    if p.get("verified"):
        v = p["verified"]
        print(f"  verified: the spec itself, in the same rounds: step {v['step_time_s']:.4g} s, "
              f"{v['tokens_per_s_per_device']:,.0f} tokens/s/device; the projection's error {v['error']:+.1%}")
