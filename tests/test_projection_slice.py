"""``tprimat project --measure``: the measured-slice projection. Its arithmetic against hand-summed parts, against
a 1F1B schedule's own step formula and against the timeline of torch's own 1F1B schedule run for real; a slice
that cannot run here is an invalid point with its reason; and on this CPU the whole path for real (four short runs
of the spec, their step times read back)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from tprimat.compose import compose
from tprimat.execute.slice import SliceRun, from_runs, per_round_s, slice_points, surface
from tprimat.spec.build import build_spec
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.plan import make_plan

HOST = DetectedHardware("cpu", "planning host", 1, 0.0, None)


def spec_plan(*overrides):
    spec = build_spec(compose(["logging.wandb.mode=disabled", *overrides]), HOST)
    return spec, make_plan(spec, HOST)


def runs_from(step, micros=(1, 2)) -> list[SliceRun]:
    return [SliceRun(layers, micro, step(layers, micro), ()) for layers in (1, 2) for micro in micros]


def test_the_surface_recovers_hand_summed_parts_and_composes_the_step():
    """Parts chosen by hand: fixed 0.05 s, 0.01 s per layer per step, 0.02 s per micro batch, 0.1 s per layer and
    micro batch. The four slice runs are their sums: T(1,1) = 0.18, T(1,2) = 0.30, T(2,1) = 0.29, T(2,2) = 0.51."""
    runs = [SliceRun(1, 1, 0.18, ()), SliceRun(1, 2, 0.30, ()), SliceRun(2, 1, 0.29, ()), SliceRun(2, 2, 0.51, ())]
    fit = surface(runs)
    assert (fit.fixed_s, fit.per_layer_s, fit.per_micro_s, fit.per_layer_micro_s) == pytest.approx(
        (0.05, 0.01, 0.02, 0.1))
    # llama_tiny: 4 layers; global batch 32 of micro batch 4 on one rank: 8 micro batches
    spec, plan = spec_plan("platform=cpu", "training.global_batch_size=32", "training.micro_batch_size=4")
    assert (spec.model.num_layers, plan.grad_accum_steps, plan.pp) == (4, 8, 1)
    p = from_runs(spec, plan, runs, 1.0)
    step = 0.05 + 0.01 * 4 + 0.02 * 8 + 0.1 * 4 * 8  # 3.45 s
    assert p["step_time_s"] == pytest.approx(step)
    assert p["tokens_per_s_per_device"] == pytest.approx(32 * spec.training.seq_length / step)
    assert sum(p["breakdown_s"].values()) == pytest.approx(step) and p["method"] == "measured-slice"


def test_each_rounds_step_is_projected_from_that_rounds_runs_alone():
    """Two rounds of the hand-summed parts above: the first exact (3.45 s at 4 layers x 8 micro batches), the
    second with the two-layer runs 10% slow (0.319 and 0.561 s). Its surface by hand: per layer per micro batch
    (0.561 - 0.319 - 0.30 + 0.18) / 1 = 0.122, per layer (0.319 - 0.18) - 0.122 = 0.017, per micro batch
    (0.30 - 0.18) - 0.122 = -0.002, fixed 0.18 - 0.017 + 0.002 - 0.122 = 0.043: 0.043 + 0.068 - 0.016 + 3.904
    = 3.999 s. The reported step is each run's fastest round's: round one's here."""
    rounds = {(1, 1): (0.18, 0.18), (1, 2): (0.30, 0.30), (2, 1): (0.29, 0.319), (2, 2): (0.51, 0.561)}
    runs = [SliceRun(lm[0], lm[1], t[0], (), t) for lm, t in rounds.items()]
    assert per_round_s(runs, 4, 8) == pytest.approx([3.45, 3.999])
    spec, plan = spec_plan("platform=cpu", "training.global_batch_size=32", "training.micro_batch_size=4")
    p = from_runs(spec, plan, runs, 1.0)
    assert p["step_time_s"] == pytest.approx(3.45) and p["step_time_s_per_round"] == pytest.approx([3.45, 3.999])
    assert [m["rounds_s"] for m in p["measurements"]] == [list(t) for t in rounds.values()]


def test_step_times_that_are_not_bilinear_are_projected_off_by_what_the_surface_cannot_hold():
    """Step times with a term the surface cannot hold: T(l, m) = 0.05 + 0.1 l m + 0.002 l m^2 (each micro batch a
    little slower the more there are, as under memory pressure). The four slices, by hand: T(1,1) = 0.152,
    T(1,2) = 0.258, T(2,1) = 0.254, T(2,2) = 0.466; their surface: per layer per micro batch 0.466 - 0.254 - 0.258 +
    0.152 = 0.106, per layer 0.254 - 0.152 - 0.106 = -0.004, per micro batch 0.258 - 0.152 - 0.106 = 0, fixed 0.152 +
    0.004 - 0.106 = 0.05. At 4 layers x 8 micro batches it projects 0.05 - 0.016 + 0.106 x 32 = 3.426 s where the
    step takes 0.05 + 3.2 + 0.512 = 3.762 s, and ``verified`` says the projection is 3.762 / 3.426 - 1 = +9.8% fast
    (the projected tokens/s too high by that)."""
    from tprimat.execute.slice import verified

    def step(layers, micro):
        return 0.05 + 0.1 * layers * micro + 0.002 * layers * micro ** 2

    spec, plan = spec_plan("platform=cpu", "training.global_batch_size=32", "training.micro_batch_size=4")
    assert (spec.model.num_layers, plan.grad_accum_steps) == (4, 8)
    fit = surface(runs_from(step))
    assert (fit.fixed_s, fit.per_layer_s, fit.per_micro_s, fit.per_layer_micro_s) == pytest.approx(
        (0.05, -0.004, 0.0, 0.106), abs=1e-12)
    p = from_runs(spec, plan, runs_from(step), 1.0)
    assert p["step_time_s"] == pytest.approx(3.426) and step(4, 8) == pytest.approx(3.762)
    v = verified(spec, plan, SliceRun(4, 8, step(4, 8), (), (step(4, 8),)), p["step_time_s"])
    assert v["error"] == pytest.approx(3.762 / 3.426 - 1)


def test_a_1f1b_pipelines_bubble_is_read_off_the_slices():
    """A 2-stage 1F1B pipeline: a step is (m + pp - 1) stage micro-batch times plus the optimizer, a stage micro
    batch a * l + b (its layers, its share of head and hand-offs), the optimizer c * l + d. Slices measured at
    one and two layers and at two and four micro batches give the spec's step at 8 layers per stage and 8 micro
    batches exactly, bubble included."""
    pp, a, b, c, d = 2, 0.03, 0.011, 0.004, 0.02

    def schedule(layers, micro):
        return (micro + pp - 1) * (a * layers + b) + c * layers + d

    spec, plan = spec_plan("platform=cpu", "platform.devices_per_node=2", "parallelism.pp=2",
                           "model.num_layers=16", "training.global_batch_size=32", "training.micro_batch_size=4")
    assert (plan.pp, spec.model.num_layers // plan.pp, plan.grad_accum_steps) == (2, 8, 8)
    p = from_runs(spec, plan, runs_from(schedule, micros=(2, 4)), 1.0)  # a pipeline needs >= pp micro batches
    assert p["step_time_s"] == pytest.approx(schedule(8, 8))


@pytest.mark.slow
def test_the_bubble_of_torchs_own_1f1b_timeline_on_cpu_is_read_off_the_slices():
    """A real 2-stage pipeline under torch's Schedule1F1B, two processes over gloo, its stages sleeping a known
    forward F = 10 ms x layers + 5 ms and backward 2F (tests/pipeline_timeline.py): its measured steps follow the
    1F1B timeline, (m + 1) x 3F with the bubble's one micro-batch time, and the surface through four slices
    (1-2 layers x 2-4 micro batches) predicts the real step at 3 layers x 6 micro batches."""
    import socket
    import subprocess
    import sys

    from tests import pipeline_timeline as timeline
    from tests.conftest import ROOT

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    points = ["1,2", "1,4", "2,2", "2,4", "3,6"]
    out = subprocess.run([sys.executable, "-m", "tests.pipeline_timeline", str(port), *points], capture_output=True,
                         text=True, timeout=300, check=True, cwd=ROOT).stdout
    measured = json.loads(out.strip().splitlines()[-1])
    for point, seconds in measured.items():
        layers, micro = (int(v) for v in point.split(","))
        forward = timeline.PER_LAYER_FORWARD_S * layers + timeline.PER_STAGE_FORWARD_S
        assert seconds == pytest.approx((micro + 1) * 3 * forward, rel=0.25), point  # hand-offs cost a little
    runs = [SliceRun(int(p.split(",")[0]), int(p.split(",")[1]), measured[p], ()) for p in points[:4]]
    spec, plan = spec_plan("platform=cpu", "platform.devices_per_node=2", "parallelism.pp=2", "model.num_layers=6",
                           "training.global_batch_size=12", "training.micro_batch_size=2")
    assert (plan.pp, plan.grad_accum_steps) == (2, 6)
    assert from_runs(spec, plan, runs, 1.0)["step_time_s"] == pytest.approx(measured["3,6"], rel=0.10)


def test_the_slices_keep_the_recomputed_fraction_and_the_layout():
    """Under the native trainer's selective recompute of every 2nd layer the slices hold 2 and 4 layers per stage
    (1 in 2 recomputed, as in the spec); each slice keeps micro batch and data parallelism, and a 2-stage
    pipeline gets 2 or 4 micro batches a step (1F1B needs at least pp)."""
    spec, plan = spec_plan("platform=cpu", "platform.devices_per_node=2", "parallelism.pp=2", "model.num_layers=8",
                           "training.activation_checkpointing=selective", "training.ac_frequency=1/2",
                           "training.global_batch_size=16", "training.micro_batch_size=2")
    points = slice_points(spec, plan)
    assert [(layers, micro) for layers, micro, _ in points] == [(2, 2), (2, 4), (4, 2), (4, 4)]  # micro >= pp
    assert [s["model.num_layers"] for *_, s in points] == [4, 4, 8, 8]  # layers per stage x pp
    assert [s["training.global_batch_size"] for *_, s in points] == [4, 8, 4, 8]  # mbs x dp (1) x micro batches


def test_the_larger_slice_is_half_the_spec_where_it_runs_here_and_two_units_for_a_bigger_target():
    """The 100 M config of the bench: 8 layers, 8 micro batches. Slices at 1 and 2 layers, 1 and 2 micro batches
    extrapolate the step 4x in each: a run's noise reaches the step x sqrt(6^2 + 7^2 * 2^2) / 8 = 1.9 in layers,
    where 1 and 4 (half the stage) reach it x sqrt((4/3)^2 + (7/3)^2 * 4^2) / 8 = 1.2. At 32 layers and 64 micro
    batches the larger slice stays at 4 of each; a one-device slice of a target bigger than this machine at 2."""
    spec, plan = spec_plan("platform=cpu", "model.num_layers=8", "training.global_batch_size=16",
                           "training.micro_batch_size=2")
    assert (spec.model.num_layers, plan.grad_accum_steps) == (8, 8)
    assert [(layers, micro) for layers, micro, _ in slice_points(spec, plan)] == [(1, 1), (1, 4), (4, 1), (4, 4)]
    assert [(layers, micro) for layers, micro, _ in slice_points(spec, plan, near=False)] == [
        (1, 1), (1, 2), (2, 1), (2, 2)]
    spec, plan = spec_plan("platform=cpu", "model.num_layers=32", "training.global_batch_size=128",
                           "training.micro_batch_size=2")
    assert [(layers, micro) for layers, micro, _ in slice_points(spec, plan)] == [(1, 1), (1, 4), (4, 1), (4, 4)]


class Scripted:
    """A stand-in for this machine's clock only: each run's median step is the hand-summed parts of the first
    test at the run's layers and micro batches (read from the config it is handed), times ``slow(call)``."""

    def __init__(self, slow):
        self.slow, self.calls = slow, 0

    def __call__(self, config, where, said):
        from types import SimpleNamespace

        layers, micro = config["model"]["num_layers"], config["training"]["global_batch_size"] // 4
        self.calls += 1
        step = (0.05 + 0.01 * layers + 0.02 * micro + 0.1 * layers * micro) * self.slow(self.calls)
        return SimpleNamespace(result={"status": "ok", "summary": {"step_time_s": {"median": step}}})


def test_more_rounds_are_measured_while_the_rounds_projections_spread_wide():
    """llama_tiny (4 layers, 2 micro batches of 4): five runs a round with ``verify``. Steady runs settle in 3
    rounds and project the hand-summed 0.05 + 0.04 + 0.04 + 0.8 = 0.93 s. The 2-layer, 2-micro-batch run 30%
    slow in round 2 (call 9) moves that round's projection by 0.3 x 0.51 x 3 = 0.46 s, a 49% spread: rounds 4 and
    5 are measured, and each run's fastest round gives the steady step again; asked for 2 rounds, the same noise
    gets exactly 2 (``--rounds``), and so do steady runs."""
    from tprimat.execute.slice import MAX_ROUNDS, ROUNDS, project_measured

    spec, plan = spec_plan("platform=cpu")
    config = compose(["platform=cpu", "logging.wandb.mode=disabled"])
    steady = project_measured(config, spec, plan, Scripted(lambda call: 1.0), verify=True)
    assert len(steady["step_time_s_per_round"]) == ROUNDS == 3
    assert steady["step_time_s"] == pytest.approx(0.93) and steady["verified"]["error"] == pytest.approx(0)
    noisy = project_measured(config, spec, plan, Scripted(lambda call: 1.3 if call == 9 else 1.0), verify=True)
    assert len(noisy["step_time_s_per_round"]) == MAX_ROUNDS == 5
    assert sorted(noisy["step_time_s_per_round"])[-1] == pytest.approx(0.93 + 0.3 * 0.51 * 3)
    assert noisy["step_time_s"] == pytest.approx(0.93) and len(noisy["verified"]["rounds_s"]) == 5
    for slow in (lambda call: 1.3 if call == 9 else 1.0, lambda call: 1.0):
        asked = project_measured(config, spec, plan, Scripted(slow), verify=True, rounds=2)
        assert len(asked["step_time_s_per_round"]) == 2 and len(asked["verified"]["rounds_s"]) == 2


def test_a_slice_that_cannot_run_here_is_an_invalid_point_with_its_reason():
    """An H100 layout measured on a machine without one: the slice's own refusal is the point's reason."""
    from tprimat.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as code:
        main(["project", "--measure", "platform=nvidia", "platform.gpu=h100", "platform.devices_per_node=1"])
    said = out.getvalue()
    assert code.value.code == 2
    assert "no projection: the measured slice (model.num_layers=" in said and "no nvidia GPU is visible" in said


@pytest.mark.slow
def test_project_measure_runs_the_slices_for_real_on_this_cpu(tmp_path):
    """The default model projected from four real runs here: each slice's spec as asked (its layers and global
    batch read back from the run), a positive step, and the JSON file with every point. The smallest shape that
    still has four layers and four micro batches to slice (one 64-token sequence each): the same slices, seconds."""
    from tprimat.cli import main

    target = tmp_path / "projection.json"
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit) as code:
        main(["project", "--measure", "--verify", "--rounds", "2", "platform=cpu", "training.seq_length=64",
              "training.micro_batch_size=1", "training.global_batch_size=4", "--json", str(target)])
    assert code.value.code == 0
    (point,) = json.loads(target.read_text())
    p = point["projection"]
    assert p["available"] and p["method"] == "measured-slice" and p["step_time_s"] > 0
    assert [(m["layers_per_stage"], m["micro_batches"]) for m in p["measurements"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(m["step_time_s"] > 0 for m in p["measurements"])
    assert p["measurements"][3]["overrides"] == ["model.num_layers=2", "training.global_batch_size=2"]
    assert p["layers_per_stage"] == 4 and p["micro_batches"] == 4 and p["measure_time_s"] > 0
    rounds = len(p["step_time_s_per_round"])  # as asked (by default 3, up to 5 while this machine's noise spreads them)
    assert rounds == 2 and all(len(m["rounds_s"]) == rounds for m in p["measurements"])
    v = p["verified"]  # the spec itself, 4 layers x 4 micro batches, in the same rounds
    assert len(v["rounds_s"]) == rounds and v["step_time_s"] == min(v["rounds_s"])
    assert v["error"] == pytest.approx(v["step_time_s"] / p["step_time_s"] - 1)
    assert v["tokens_per_s_per_device"] == pytest.approx(4 * 64 / v["step_time_s"])


def test_verify_checks_a_measured_slice_and_asks_for_measure(capsys):
    """``--verify`` or ``--rounds`` without ``--measure`` is refused naming the flag, as is ``--rounds 0``; with a
    hand-made slice, ``verified`` holds the spec's own run and the projection's error against it: projected 3.45 s,
    measured 3.0 s, so the projection's tokens/s is 3.0 / 3.45 - 1 = -13.0% off."""
    from tprimat.cli import main
    from tprimat.execute.slice import verified

    with pytest.raises(SystemExit) as code:
        main(["project", "--verify", "platform=cpu"])
    assert code.value.code == 2 and "--verify" in capsys.readouterr().out
    for argv in (["--rounds", "2"], ["--measure", "--rounds", "0"]):
        with pytest.raises(SystemExit) as code:
            main(["project", *argv, "platform=cpu"])
        assert code.value.code == 2 and f"--rounds {argv[-1]}: " in capsys.readouterr().out
    spec, plan = spec_plan("platform=cpu", "training.global_batch_size=32", "training.micro_batch_size=4")
    v = verified(spec, plan, SliceRun(4, 8, 3.0, (), (2.9, 3.0, 3.2)), 3.45)
    assert v["error"] == pytest.approx(-0.1304, abs=1e-4) and v["rounds_s"] == [2.9, 3.0, 3.2]
    assert v["tokens_per_s_per_device"] == pytest.approx(32 * 256 / 3.0)


def test_a_target_bigger_than_this_machine_composes_its_measured_compute_with_its_links_by_hand():
    """2 nodes x 2 ranks with FSDP, from a one-device slice's surface: the step is the hand sum of the measured
    parts (2 micro batches of 4 layers + the head, the per-layer update sharded over dp = 4, the fixed cost) and
    the FSDP traffic, whole (a CPU hides none of it behind compute: gloo's thread needs the cores), three rings of
    3/4 of the model's bytes (counted from the real module) at the preflight's 0.001 GB/s."""
    import torch

    from tprimat.backends.native.model import Decoder
    from tprimat.execute.scaleout import bigger_than_here, compose_target

    spec, plan = spec_plan("platform=cpu", "platform.nodes=2", "platform.devices_per_node=2", "model=llama_tiny",
                           "parallelism.fsdp=true", "training.precision=fp32", "training.global_batch_size=16",
                           "training.micro_batch_size=2")
    assert bigger_than_here(spec, HOST) and plan.dp == 4 and plan.grad_accum_steps == 2
    surface_s = {"fixed_s": 0.01, "per_layer_s": 0.04, "per_micro_s": 0.02, "per_layer_micro_s": 0.1}
    measured = {"available": True, "assumptions": [], "surface_s": surface_s, "method": "measured-slice"}
    preflight = {"kind": "tprimat_preflight", "matmul_tflops": {"fp32": 0.1}, "memory_gb_s": 10.0,
                 "allreduce": {"max_busbw_gbps": 0.001}, "platform": "cpu"}
    p = compose_target(spec, plan, measured, preflight)
    layers = spec.model.num_layers
    compute = 2 * (layers * 0.1 + 0.02)
    with torch.device("meta"):
        params = sum(t.numel() for t in Decoder(spec.model).parameters())
    ring = 3 / 4 * params * 4 / 0.001e9
    fsdp = 2 * (2 * ring + ring)
    assert p["breakdown_s"]["fsdp_s"] == pytest.approx(fsdp, rel=1e-6)
    assert p["step_time_s"] == pytest.approx(compute + layers * 0.04 / 4 + 0.01 + fsdp, rel=1e-6)
    assert p["tokens_per_s_per_device"] == pytest.approx(16 * spec.training.seq_length / p["step_time_s"] / 4)
    no_links = compose_target(spec, plan, measured, None)
    assert not no_links["available"] and "preflight" in no_links["reason"]


@pytest.mark.slow
def test_a_run_that_asks_carries_its_measured_slice_projection(tmp_path):
    """``benchmark.projection=measured-slice``: the run measures its four slices first (read back from the
    result: their layers and micro batches) and its result's projection is theirs, beside its own measurement;
    the schema accepts it. A value outside the two is refused, naming the key."""
    from tests.conftest import QUICK, run_inprocess

    outcome = run_inprocess(tmp_path / "run", ["platform=cpu", "model=llama_tiny", *QUICK, "training.seq_length=64",
                                               "training.micro_batch_size=1", "training.global_batch_size=4",
                                               "benchmark.projection=measured-slice"])
    assert outcome.status == "ok"
    p = outcome.result["projection"]
    assert p["available"] and p["method"] == "measured-slice" and p["measure_time_s"] > 0
    assert [(m["layers_per_stage"], m["micro_batches"]) for m in p["measurements"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert outcome.result["summary"]["tokens_per_s_per_device"] > 0 and p["tokens_per_s_per_device"] > 0
    refused = run_inprocess(tmp_path / "bad", ["platform=cpu", *QUICK, "benchmark.projection=guess"])
    assert refused.status == "invalid" and "benchmark.projection" in refused.result["error"]
