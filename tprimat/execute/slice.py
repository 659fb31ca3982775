"""``tprimat project --measure``: project a spec's step from a measured slice of it, on the device at hand.

The slice is the spec itself, trained for real by its own backend through tprimat's launch path (the same
layers, width, sequence, micro batch, precision, recompute, compile, sharding and ranks), cut to fewer decoder
layers per pipeline stage and fewer micro batches per step: four short runs, a few steps each, in three to five
interleaved rounds. A step of the layouts tprimat runs costs, in layers per stage ``l`` and micro batches ``m``,

    T(l, m) = fixed + per_layer * l + per_micro * m + per_layer_micro * l * m

- ``per_layer_micro``: one layer's forward and backward for one micro batch (recompute, tensor-parallel
  collectives and FSDP gathers of that layer included, as they run);
- ``per_micro``: the embedding, the head and the loss of one micro batch (and the pipeline's hand-offs);
- ``per_layer``: what a layer costs once per step: its optimizer update, its gradient all-reduce or
  reduce-scatter, its clipping, and under a 1F1B pipeline the bubble, (pp - 1) micro-batch times of every layer
  of the stage;
- ``fixed``: the step's own cost (the loss's all-reduce for the log, the clock's synchronisation, the head's
  optimizer update).

Four runs at l in {u, l1} and m in {pp, m1} fix the four terms exactly (u: the recompute unit,
``ac_frequency``'s period under the native trainer's selective recompute, else 1; a pipeline needs at least pp
micro batches a step), and the spec's own (l, m) is read off the surface. l1 and m1 are half the spec's (in
whole units, at least 2 and at most 4 of them): the nearer the slice to the spec, the less a run's noise is
amplified by the extrapolation. A one-device slice of a target bigger than this machine stays at 2u and 2 pp.
Nothing is fitted to the run being projected; with ``--verify`` the spec itself runs as a fifth run of each
round, and the projection is set beside it. What the surface cannot see: a layout whose cost is not linear in
layers or micro batches (a memory cliff, an allocator that starts to thrash), noise in four short runs.
"""

from __future__ import annotations

import copy
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

from tprimat.results.progress import progress
from tprimat.spec.build import set_dotted
from tprimat.spec.flops import stages_of
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf, ac_period

WARMUP_STEPS = 2  # allocator, autotuning and compilation settle
ROUNDS = 3  # interleaved passes over the four slices
MAX_ROUNDS = 5  # while the rounds' projections spread wider than SETTLED_SPREAD
SETTLED_SPREAD = 0.15
MEASURED_STEPS = 10  # the median of these is a run's step time
MAX_UPPER_STEPS = 4  # the larger slice holds at most 4 recompute units of layers, 4 pp micro batches
ASSUMPTIONS = (
    "T(l, m) = fixed + per_layer * l + per_micro * m + per_layer_micro * l * m, fixed exactly by four real runs "
    "of the spec at l in {u, l1} layers per stage and m in {pp, m1} micro batches (u: the recompute unit; l1, m1: "
    "half the spec's, 2 to 4 units)",
    "a 1F1B pipeline's bubble ((pp - 1) micro-batch times) is linear in the stage's layers: it is part of per_layer",
    "each run's step time: its fastest round's median step (after the warm-up), over 3 interleaved rounds (up to "
    "5 while the rounds' projections spread more than 15%): the step of a machine nothing else contends for",
)


@dataclass(frozen=True)
class SliceRun:
    layers_per_stage: int
    micro_batches: int
    step_time_s: float
    overrides: tuple  # what the slice changed in the spec
    rounds_s: tuple = ()  # each interleaved round's median step time; step_time_s is the fastest


@dataclass(frozen=True)
class Surface:
    """The four terms of T(l, m), in seconds."""

    fixed_s: float
    per_layer_s: float
    per_micro_s: float
    per_layer_micro_s: float

    def step_s(self, layers: float, micro_batches: float) -> float:
        return (self.fixed_s + self.per_layer_s * layers + self.per_micro_s * micro_batches
                + self.per_layer_micro_s * layers * micro_batches)

    def breakdown_s(self, layers: float, micro_batches: float) -> dict:
        return {"layers_s": self.per_layer_micro_s * layers * micro_batches,
                "embedding_head_loss_s": self.per_micro_s * micro_batches,
                "per_layer_per_step_s": self.per_layer_s * layers, "fixed_s": self.fixed_s}


def surface(runs: list[SliceRun]) -> Surface:
    """The bilinear surface through four runs at (l0, m0), (l0, m1), (l1, m0), (l1, m1)."""
    at = {(r.layers_per_stage, r.micro_batches): r.step_time_s for r in runs}
    (l0, l1), (m0, m1) = sorted({r.layers_per_stage for r in runs}), sorted({r.micro_batches for r in runs})
    dl, dm = l1 - l0, m1 - m0
    t00, t01, t10, t11 = at[(l0, m0)], at[(l0, m1)], at[(l1, m0)], at[(l1, m1)]
    per_layer_micro = (t11 - t10 - t01 + t00) / (dl * dm)
    per_layer = (t10 - t00) / dl - per_layer_micro * m0
    per_micro = (t01 - t00) / dm - per_layer_micro * l0
    fixed = t00 - per_layer * l0 - per_micro * m0 - per_layer_micro * l0 * m0
    return Surface(fixed, per_layer, per_micro, per_layer_micro)


def recompute_unit(spec: TprimatConf) -> int:
    """Layers per stage that keep the recomputed fraction of the spec: the native trainer and DeepSpeed recompute
    every k-th layer under selective recompute (``training.ac_frequency``); elsewhere a layer is its own unit."""
    tr = spec.training
    if tr.activation_checkpointing == "selective" and spec.framework.name in ("native", "deepspeed"):
        return ac_period(tr.ac_frequency)
    return 1


# How every measured run runs: short, quiet, nothing but its steps
RUN_SETTINGS = {"training.max_steps": WARMUP_STEPS + MEASURED_STEPS, "benchmark.warmup_steps": WARMUP_STEPS,
                "training.optimizer.warmup_steps": 1, "benchmark.repeats": 1, "benchmark.telemetry": False,
                "logging.wandb.mode": "disabled", "dry_run": False, "overwrite": True, "resume_from": None,
                "benchmark.projection": "roofline"}


# a slice is l layers on each of pp stages: split evenly (the uneven split's heaviest stage is what the surface
# is evaluated at)
EVEN_SPLIT = {"parallelism.account_for_embedding_in_pipeline_split": False,
              "parallelism.account_for_loss_in_pipeline_split": False}


def upper(step: int, spec_count: float, near: bool) -> int:
    """The larger slice's layers or micro batches, a multiple of ``step``: half the spec's count, at least 2 and at
    most 4 steps (the nearer the spec, the less the machine's noise is amplified by extrapolating); 2 steps when
    not ``near`` (a one-device slice of a target bigger than this machine holds no more)."""
    if not near:
        return 2 * step
    return step * min(max(int(spec_count // (2 * step)), 2), MAX_UPPER_STEPS)


def slice_points(spec: TprimatConf, plan: Plan, near: bool = True) -> list[tuple[int, int, dict]]:
    """(layers per stage, micro batches, the settings that cut the spec to that slice) for the four runs. With
    ``near`` (the spec runs on this machine, so half of it does) the larger slice is half the spec's stage."""
    unit, pp, tr = recompute_unit(spec), plan.pp, spec.training
    layers_up = upper(unit, max(stages_of(spec)), near)
    micro_up = upper(pp, plan.grad_accum_steps, near)  # a pipeline runs at least pp micro batches a step
    return [(layers, micro, {"model.num_layers": layers * pp,
                             "training.global_batch_size": tr.micro_batch_size * plan.dp * micro, **RUN_SETTINGS,
                             **EVEN_SPLIT})
            for layers in (unit, layers_up)
            for micro in (pp, micro_up)]


def spec_point(spec: TprimatConf, plan: Plan) -> tuple[float, int, dict]:
    """The spec itself, run the way its slices are and in the same rounds (``--verify``)."""
    return max(stages_of(spec)), plan.grad_accum_steps, dict(RUN_SETTINGS)  # the stage with the most layers


def with_settings(config: dict, settings: dict) -> dict:
    data = copy.deepcopy(config)
    for key, value in settings.items():
        set_dotted(data, key, value)
    return data


Runner = Callable[[dict, Path, list], object]  # tprimat.execute.run.execute: (config, run dir, overrides)


def run_once(run: Runner, config: dict, settings: dict, where: Path, said: list) -> tuple[Optional[float], str]:
    """One measured run: (its median step time, "") or (None, why it did not run)."""
    result = run(with_settings(config, settings), where, said).result
    median = ((result.get("summary") or {}).get("step_time_s") or {}).get("median")
    if result.get("status") != "ok" or not median:
        return None, (result.get("error") or "no measured step").splitlines()[0][:300]
    return median, ""


def measure(config: dict, spec: TprimatConf, plan: Plan, run: Runner, verify: bool = False,
            near: bool = True, rounds: Optional[int] = None) -> tuple[Optional[list[SliceRun]], str]:
    """The four slice runs of ``config`` (the composed spec), and with ``verify`` the spec itself last, each
    trained for real by ``run``, in interleaved rounds (a burst of noise on a shared machine hits one round of every
    run alike, not one run): ``ROUNDS``, and up to ``MAX_ROUNDS`` while the rounds' projections spread more than
    ``SETTLED_SPREAD``, or ``rounds`` exactly where the caller asks (fewer: sooner, noisier); a run's step time is
    its fastest round's (``uncontended``). (None, why) when one cannot run here (its own refusal or failure, e.g.
    out of memory or a layout this machine cannot hold)."""
    points = slice_points(spec, plan, near) + ([spec_point(spec, plan)] if verify else [])
    labels = [[f"{k}={v}" for k, v in settings.items() if k.startswith(("model.", "training.global"))]
              for *_, settings in points]
    times: list[list[float]] = [[] for _ in points]
    target = spec_point(spec, plan)[:2]  # the spec's layers per stage and micro batches
    least, most = (rounds, rounds) if rounds else (ROUNDS, MAX_ROUNDS)
    with tempfile.TemporaryDirectory(prefix="tprimat_slice_") as tmp, \
            progress(least * len(points), "measuring") as advance:
        while len(times[0]) < least or (len(times[0]) < most and not settled(points, times, target)):
            for i, (layers, micro, settings) in enumerate(points):
                median, why = run_once(run, config, settings, Path(tmp) / f"{len(times[i])}_{i}", labels[i])
                if median is None:
                    return None, f"the measured slice ({', '.join(labels[i]) or 'the spec itself'}) did not run: {why}"
                times[i].append(median)
                advance(f"{layers:g} layer(s) x {micro} micro batch(es)")
    return [SliceRun(layers, micro, uncontended(times[i]), tuple(labels[i]), tuple(times[i]))
            for i, (layers, micro, _) in enumerate(points)], ""


def uncontended(rounds_s: list[float]) -> float:
    """A run's step time from its rounds' median steps: the fastest. On a machine others share, contention only
    ever adds time (timeit's reasoning: slower repeats are other processes' interference, not the code's), and
    slices, spec and verifying run alike; on a dedicated GPU the rounds agree and the choice does not matter."""
    return min(rounds_s)


def settled(points: list, times: list[list[float]], target: tuple) -> bool:
    """The rounds so far project the spec's step within ``SETTLED_SPREAD`` of each other (max / min - 1)."""
    runs = [SliceRun(layers, micro, 0.0, (), tuple(t)) for (layers, micro, _), t in zip(points[:4], times)]
    steps = per_round_s(runs, *target)
    return min(steps) > 0 and max(steps) / min(steps) - 1 <= SETTLED_SPREAD


def project_measured(config: dict, spec: TprimatConf, plan: Plan, run: Runner, verify: bool = False,
                     near: bool = True, rounds: Optional[int] = None) -> dict:
    """The projection of ``spec`` from its measured slice: the same fields as the roofline's (``step_time_s``,
    ``tokens_per_s_per_device``, ``breakdown_s``), the runs behind it and how long measuring took; with
    ``verify``, ``verified``: the spec itself measured in the same rounds, and the projection's error against it."""
    started = time.perf_counter()
    runs, why = measure(config, spec, plan, run, verify, near, rounds)
    took = time.perf_counter() - started
    if runs is None:
        return {"available": False, "reason": why, "method": "measured-slice", "measure_time_s": took,
                "step_time_s": None, "tokens_per_s_per_device": None, "tflops_per_device": None, "mfu": None}
    slices, itself = (runs[:-1], runs[-1]) if verify else (runs, None)  # measure() runs the spec itself last
    projected = from_runs(spec, plan, slices, took)
    if itself is not None and projected["available"]:
        projected["verified"] = verified(spec, plan, itself, projected["step_time_s"])
    return projected


def verified(spec: TprimatConf, plan: Plan, itself: SliceRun, projected_s: float) -> dict:
    """The spec's own run beside its projection: ``error`` is projected tokens/s over measured, less one."""
    return {"step_time_s": itself.step_time_s, "rounds_s": list(itself.rounds_s),
            "tokens_per_s_per_device": throughput(spec, plan, itself.step_time_s)["tokens_per_s_per_device"],
            "error": itself.step_time_s / projected_s - 1}


def throughput(spec: TprimatConf, plan: Plan, step_s: float) -> dict:
    """A projected step's rates: tokens/s and TFLOP/s per device, MFU where the plan has a peak."""
    tr = spec.training
    per_device = tr.global_batch_size * tr.seq_length / step_s / plan.world_size
    tflops = plan.flops_per_token * per_device / 1e12  # the plan's count (LoRA's frozen base included)
    return {"step_time_s": step_s, "tokens_per_s_per_device": per_device, "tflops_per_device": tflops,
            "mfu": tflops / plan.peak_tflops if plan.peak_tflops else None}


def per_round_s(runs: list[SliceRun], layers: float, micro_batches: float) -> list[float]:
    """The step projected from each interleaved round's four runs alone: how far the machine's noise moves the
    projection (empty when the runs carry no rounds)."""
    rounds = min((len(r.rounds_s) for r in runs), default=0)
    return [surface([replace(r, step_time_s=r.rounds_s[k]) for r in runs]).step_s(layers, micro_batches)
            for k in range(rounds)]


def from_runs(spec: TprimatConf, plan: Plan, runs: list[SliceRun], took_s: float) -> dict:
    layers, micro, _ = spec_point(spec, plan)
    fit = surface(runs)
    step_s = fit.step_s(layers, micro)
    if not step_s > 0:
        return {"available": False, "reason": f"the measured slice gives a step of {step_s:.3g} s: its runs were "
                f"too noisy to extrapolate ({[round(r.step_time_s, 4) for r in runs]} s)", "method": "measured-slice",
                "measure_time_s": took_s, "step_time_s": None, "tokens_per_s_per_device": None,
                "tflops_per_device": None, "mfu": None}
    return {"available": True, "reason": None, "method": "measured-slice", **throughput(spec, plan, step_s),
            "breakdown_s": fit.breakdown_s(layers, micro), "layers_per_stage": layers, "micro_batches": micro,
            "surface_s": {"fixed_s": fit.fixed_s, "per_layer_s": fit.per_layer_s, "per_micro_s": fit.per_micro_s,
                          "per_layer_micro_s": fit.per_layer_micro_s},
            "step_time_s_per_round": per_round_s(runs, layers, micro),
            "measurements": [{"layers_per_stage": r.layers_per_stage, "micro_batches": r.micro_batches,
                              "step_time_s": r.step_time_s, "rounds_s": list(r.rounds_s),
                              "overrides": list(r.overrides)} for r in runs],
            "measure_time_s": took_s, "assumptions": list(ASSUMPTIONS)}
