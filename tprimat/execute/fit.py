"""Layouts that fit: every parallel layout of a spec's model on its platform that validates (memory included),
ranked by projected throughput, as NeMo's auto-configurator ranks its candidates, from tprimat's own estimate
and projection. ``tprimat plan --best`` lists them; a memory refusal names the nearest ones."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from itertools import product
from typing import Iterator, Optional

from tprimat import backends
from tprimat.execute.project import projection_of
from tprimat.spec import memory
from tprimat.spec.build import SpecError, build_spec, set_dotted, spec_to_dict
from tprimat.spec.compat import get
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.keeps import MEGATRON_CORE
from tprimat.spec.plan import derived_dp, make_plan
from tprimat.spec.schema import TprimatConf
from tprimat.spec.validate import validate

# (parallelism.fsdp, parallelism.zero_stage) each framework can run
SHARDINGS = {"native": ((False, 0), (True, 0)), "torchtitan": ((False, 0), (True, 0)),
             "deepspeed": ((False, 1), (False, 2), (False, 3)), "megatron_deepspeed": ((False, 0), (False, 1)),
             "transformers": ((False, 0), (False, 1), (False, 2), (False, 3)),
             **{name: ((False, 0), (False, 1), (True, 0)) for name in MEGATRON_CORE}}
FIXED = ("parallelism.dp", "parallelism.vp", "parallelism.sequence_parallel")  # set, not varied (SP follows tp)
ENVIRONMENT = "framework.path"  # a backend's complaint about this machine, not about the layout
RECOMPUTE = {"transformers": ("none", "full")}  # the others: none, selective, full


@dataclass(frozen=True)
class Fit:
    settings: dict  # dotted key -> value: the whole layout
    changed: tuple  # the keys whose value differs from the spec's
    memory_gib: float
    tokens_per_s_per_device: Optional[float]

    def text(self, keys: Optional[tuple] = None) -> str:
        shown = ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                          for k, v in self.settings.items() if (keys is None and k not in FIXED) or k in (keys or ()))
        speed = (f", projected ~{self.tokens_per_s_per_device:,.0f} tokens/s/device" if self.tokens_per_s_per_device
                 else ", no projection")
        return f"{shown} ({self.memory_gib:.1f} GiB{speed})"


def layouts(spec: TprimatConf) -> Iterator[dict]:
    name, plat = spec.framework.name, spec.platform
    world = plat.devices_per_node * plat.nodes
    for tp, pp, cp in product((1, 2, 4, 8), (1, 2, 4), (1, 2)):
        if tp > plat.devices_per_node or world % (tp * pp * cp):
            continue
        for (fsdp, zero), ac in product(SHARDINGS.get(name, ((False, 0),)),
                                        RECOMPUTE.get(name, ("none", "selective", "full"))):
            yield {"parallelism.tp": tp, "parallelism.pp": pp, "parallelism.cp": cp,
                   "parallelism.sequence_parallel": tp > 1 and name in MEGATRON_CORE, "parallelism.fsdp": fsdp,
                   "parallelism.zero_stage": zero, "parallelism.dp": None, "parallelism.vp": 1,
                   "training.activation_checkpointing": ac}


def with_settings(spec: TprimatConf, settings: dict, hw: DetectedHardware) -> Optional[TprimatConf]:
    data = copy.deepcopy(spec_to_dict(spec))
    for key, value in settings.items():
        set_dotted(data, key, value)
    try:
        return build_spec(data, hw)
    except SpecError:
        return None


def fitting(spec: TprimatConf, hw: DetectedHardware) -> list[Fit]:
    """Every layout that validates (on the spec's device, memory included), fastest projected first."""
    current = {k: get(spec, k) for k in next(layouts(spec), {})}
    backend = backends.load(spec.framework.name)
    fits = []
    for settings in layouts(spec):
        candidate = with_settings(spec, settings, hw)
        if candidate is None or validate(candidate, hw, dry_run=True):
            continue
        plan = make_plan(candidate, hw)
        if [p for p in backend.check(candidate, plan) if not p.startswith(ENVIRONMENT)]:
            continue  # a layout the framework cannot run
        projected = projection_of(candidate, plan)
        changed = tuple(k for k, v in settings.items() if current[k] != v)
        fits.append(Fit(settings, changed, plan.memory.total_gib, projected.get("tokens_per_s_per_device")))
    return sorted(fits, key=lambda f: -(f.tokens_per_s_per_device or 0.0))


def nearest(spec: TprimatConf, hw: DetectedHardware, count: int = 3) -> list[Fit]:
    """The fitting layouts that change the fewest keys, fastest first among equals."""
    return sorted(fitting(spec, hw), key=lambda f: (len(f.changed), -(f.tokens_per_s_per_device or 0.0)))[:count]


def states_gib(spec: TprimatConf) -> float:
    tr, dp = spec.training, derived_dp(spec)
    est = memory.estimate(spec, dp, max(1, tr.global_batch_size // (tr.micro_batch_size * dp)))
    return est.weights_gib + est.grads_gib + est.optimizer_gib


def what_fits(spec: TprimatConf, hw: DetectedHardware) -> str:
    """The clause a memory refusal ends with: the nearest layouts that fit, or that none does."""
    found = nearest(spec, hw)
    if not found:
        return (f"; no layout of framework={spec.framework.name} fits {spec.model.name} at micro_batch_size="
                f"{spec.training.micro_batch_size} here (tp, pp, cp, sharding and recompute tried; the weights, "
                f"gradients and optimizer state alone take {states_gib(spec):.1f} GiB at this layout)")
    return "; fits with " + " or ".join(f.text(f.changed or None) for f in found)
