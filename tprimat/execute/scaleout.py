"""A measured slice for a target bigger than this machine: the compute measured here, the links modelled.

The slice runs on one device of this machine (the target's kind), with the target's width, sequence, micro
batch, precision, recompute and compile, unsharded: four runs at 1-2 recompute units of layers x 1-2 micro
batches (``tprimat.execute.slice``) give its surface. The target's step is then composed from it:

- a micro batch on the heaviest stage: its layers x the measured time per layer and micro batch, plus the
  measured embedding, head and loss, split over ``tp`` (and ``cp``) evenly, as the roofline splits its work;
- the measured per-layer update (optimizer, clipping) over the stage's layers, divided by ``dp`` where FSDP or
  ZeRO shard it; the pipeline bubble (pp - 1) / vp micro-batch times;
- every collective of the layout from the roofline's model (``tprimat.spec.projection.communication``) at the
  target's link bandwidths (the hardware table, or a ``tprimat preflight`` file), with the measured micro batch
  as the compute it overlaps, shared between attention and the backward as the roofline's trace shares it.
"""

from __future__ import annotations

import os

from tprimat.execute.slice import throughput
from tprimat.spec.flops import stages_of
from tprimat.spec.plan import Plan
from tprimat.spec.projection import Micro, ceilings, communication, micro_batch
from tprimat.spec.schema import TprimatConf

ONE_DEVICE = {"platform.nodes": 1, "platform.devices_per_node": 1, "parallelism.tp": 1, "parallelism.pp": 1,
              "parallelism.cp": 1, "parallelism.vp": 1, "parallelism.dp": None, "parallelism.fsdp": False,
              "parallelism.zero_stage": 0, "parallelism.sequence_parallel": False}
ASSUMPTIONS = (
    "measured on one device of this machine, unsharded; tensor and context parallelism split a layer's measured "
    "time evenly; FSDP/ZeRO shard the measured per-layer update by dp",
    "collectives, bubble and overlap from the roofline's model at the target's link bandwidths",
)


def bigger_than_here(spec: TprimatConf, hw) -> bool:
    """The target needs more devices than this machine has (or other nodes)."""
    world = spec.platform.nodes * spec.platform.devices_per_node
    here = (os.cpu_count() or 1) if hw.kind == "cpu" else hw.device_count
    return spec.platform.nodes > 1 or world > here


def one_device_batch(spec: TprimatConf) -> dict:
    """The slice's own batch: one micro batch of the target a step (the slice sets its micro batches itself)."""
    return {**ONE_DEVICE, "training.global_batch_size": spec.training.micro_batch_size}


def compose_target(spec: TprimatConf, plan: Plan, measured: dict, preflight) -> dict:
    """The target's step from the one-device slice's projection ``measured`` (``from_runs``' output)."""
    found, why = ceilings(spec, preflight)
    if found is None:
        return {**measured, "available": False, "reason": f"the target's links: {why}"}
    from tprimat.backends.native.opcount import trace_work

    micro = measured_micro(spec, measured["surface_s"], trace_work(spec), found)
    comm = communication(spec, found, plan.dp, plan.grad_accum_steps, micro)
    if comm is None:
        return {**measured, "available": False,
                "reason": "the layout communicates but no link bandwidth is known (tprimat preflight --ranks N)"}
    parts = step_parts(spec, plan, measured["surface_s"], micro, comm)
    # each round's step is the one-device slice's, not the target's: not carried over
    measured = {k: v for k, v in measured.items() if k != "step_time_s_per_round"}
    return {**measured, **throughput(spec, plan, sum(parts.values())), "breakdown_s": parts,
            "layers_per_stage": micro.layers, "micro_batches": plan.grad_accum_steps,
            "target": {"world_size": plan.world_size, "measured_on": "one device of this machine",
                       "links": {k: found.sources[k] for k in ("intra_node", "inter_node")}},
            "assumptions": [*measured["assumptions"], *ASSUMPTIONS]}


def measured_micro(spec: TprimatConf, surface: dict, work, found) -> Micro:
    """One micro batch of the heaviest stage from the measured surface, split over tp x cp; its attention and
    backward shares as the roofline's trace has them (what context-parallel and data-parallel traffic hide behind)."""
    par = spec.parallelism
    layers = max(stages_of(spec))  # the stage with the most
    micro_s = (layers * surface["per_layer_micro_s"] + surface["per_micro_s"]) / (par.tp * par.cp)
    modelled = micro_batch(spec, work, found)
    share = micro_s / modelled.total_s
    return Micro(micro_s, modelled.attention_fwd_s * share, modelled.layer_bwd_s * share, layers)


def step_parts(spec: TprimatConf, plan: Plan, surface: dict, micro: Micro, comm: dict) -> dict:
    par = spec.parallelism
    sharded = plan.dp if par.fsdp or par.zero_stage >= 1 else 1
    return {"compute_s": plan.grad_accum_steps * micro.total_s, "bubble_s": (par.pp - 1) / par.vp * micro.total_s,
            **comm, "per_layer_per_step_s": surface["per_layer_s"] * micro.layers / sharded / (par.tp * par.cp),
            "fixed_s": surface["fixed_s"]}
