"""Meta-device initialisation: the native model is built on the meta device, laid out, and each rank
allocates and fills only its own shards; every layout starts from exactly the model a single process builds.

Each rank of a layout is built in its own process over torch's fake process group (no communication: the
shards come from each rank's own draw), and every local shard is compared with the slice of the eagerly
initialised single-process model that ``torch.chunk`` gives for its placement (DTensor's sharding rule).
"""

from __future__ import annotations

import pytest
import torch

from tprimat.backends.native.init import canonical
from tprimat.backends.native.model import Decoder
from tprimat.backends.native.train import NativeTrainer
from tprimat.compose import compose
from tprimat.measure.devices import detect
from tprimat.spec.build import build_spec
from tprimat.spec.plan import make_plan

BASE = ["platform=cpu", "training.precision=fp32", "platform.devices_per_node=2"]
def rank_shards(overrides: list, rank: int) -> dict:
    """In a process of its own (``in_fresh_process``): ``rank`` of a 2-rank world over the fake process group,
    each of its parameters' placement and whether its local shard equals the eager model's slice."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from torch.testing._internal.distributed.fake_pg import FakeStore

    hw = detect()
    spec = build_spec(compose(overrides), hw)
    eager = dict(Decoder(spec.model, spec.training.seed).named_parameters())
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=2)
    trainer = NativeTrainer(spec, make_plan(spec, hw), torch.device("cpu"))
    out = {}
    for name, param in trainer.model.named_parameters():
        full = eager[canonical(name)].detach()
        if isinstance(param, DTensor):
            [placement] = param.placements
            expected = torch.chunk(full, param.device_mesh.size(), dim=placement.dim)[param.device_mesh.get_local_rank()]
            local = param.to_local().detach()
        else:
            expected, local = full, param.detach()
        out[canonical(name)] = [str(param.placements) if isinstance(param, DTensor) else "local", torch.equal(local, expected)]
    return out


def test_a_single_process_built_on_meta_equals_the_eager_model():
    hw = detect()
    spec = build_spec(compose(["platform=cpu", "training.activation_checkpointing=full"]), hw)
    trainer = NativeTrainer(spec, make_plan(spec, hw), torch.device("cpu"))
    eager = dict(Decoder(spec.model, spec.training.seed).named_parameters())
    built = {canonical(k): v for k, v in trainer.model.named_parameters()}
    assert set(built) == set(eager)
    assert all(torch.equal(built[k], eager[k]) for k in eager)
    assert torch.equal(trainer.model.inv_freq, Decoder(spec.model).inv_freq)  # the non-persistent buffer too


@pytest.mark.slow
@pytest.mark.parametrize("layout,sharded", [(["parallelism.tp=2"], "Shard"), (["parallelism.fsdp=true"], "Shard(dim=0)"),
                                            (["parallelism.pp=2"], None)])
@pytest.mark.parametrize("rank", [0, 1])
def test_every_rank_holds_its_slice_of_the_single_process_model(layout, sharded, rank):
    from tprimat.backends.native.deep import in_fresh_process

    ok, params = in_fresh_process(rank_shards, ([*BASE, *layout], rank), timeout_s=300)
    assert ok, params
    assert params and all(equal for _, equal in params.values()), params
    if sharded:
        assert any(sharded in placement for placement, _ in params.values())
    else:  # pipeline: each stage holds whole tensors of its own layers only
        layers = {name.split(".")[1] for name in params if name.startswith("layers.")}
        assert layers == ({"0", "1"} if rank == 0 else {"2", "3"})


# Fake-world validation (tprimat plan --deep): the real layout, full size, one rank per pipeline stage.

def _spec_dict(overrides):
    from tprimat.spec.build import spec_to_dict
    from tprimat.spec.detect import DetectedHardware

    hw = DetectedHardware("cpu", "planning host", 1, 0.0, None)
    spec = build_spec(compose(overrides), hw)
    return spec, make_plan(spec, hw), spec_to_dict(spec)


LLAMA70B_64 = ["platform=nvidia", "platform.gpu=h100", "platform.devices_per_node=8", "platform.nodes=8",
               "model=llama70b", "parallelism.tp=8", "parallelism.pp=4", "parallelism.fsdp=true"]


@pytest.mark.slow
def test_a_64_rank_70b_layout_builds_in_a_fake_world_and_its_shards_are_counted():
    from tprimat.backends.native.deep import deep_check
    from tprimat.spec.flops import param_counts

    spec, plan, spec_dict = _spec_dict(LLAMA70B_64)
    assert (plan.pp, plan.dp, plan.tp, plan.world_size) == (4, 2, 8, 64)
    roles, error = deep_check(spec_dict, plan.pp, plan.dp, plan.tp, activations=False)
    assert error is None and [r["stage"] for r in roles] == [0, 1, 2, 3] and [r["rank"] for r in roles] == [0, 16, 32, 48]
    # every parameter is held by exactly one (stage, tp rank, dp rank), except the RMSNorm weights, which TP
    # replicates: 161 norms of 8,192 held by all 8 tp ranks
    total, _ = param_counts(spec.model)
    norms = (2 * 80 + 1) * 8192
    assert sum(r["params"] for r in roles) * plan.tp * plan.dp == total + (plan.tp - 1) * norms
    # by hand: a middle stage holds 20 of the 80 layers; a layer's matrices (attention 2 x 8192 x (8192 + 1024),
    # FFN 3 x 8192 x 28672) are sharded 16 ways (tp 8 x dp 2), its 2 norms of 8192 only 2 ways (FSDP); fp32
    matrices, norms = 2 * 8192 * (8192 + 1024) + 3 * 8192 * 28672, 2 * 8192
    assert roles[1]["params"] == 20 * (matrices // 16 + norms // 2)
    assert roles[1]["weights_gib"] == pytest.approx(roles[1]["params"] * 4 / 2**30)
    # the first and last stages also hold the embeddings / the output head: they are the heaviest
    assert roles[0]["params"] > roles[1]["params"] and roles[3]["params"] > roles[2]["params"]


@pytest.mark.slow
def test_a_layout_that_cannot_build_is_caught_with_the_reason():
    from tprimat.backends.native.deep import deep_check

    _, _, spec_dict = _spec_dict(["platform=cpu", "platform.devices_per_node=3", "parallelism.pp=3"])  # 4 layers
    roles, error = deep_check(spec_dict, 3, 1, 1)
    assert roles == [] and error == ("rank 0 cannot build its layout: ValueError: model.num_layers=4 cannot be split "
                                     "into parallelism.pp=3 equal pipeline stages")


@pytest.mark.slow
def test_activations_are_traced_over_fake_tensors_and_recompute_lowers_them():
    from tprimat.backends.native.deep import deep_check

    traced = {}
    for mode in ("none", "full"):
        _, plan, spec_dict = _spec_dict(["platform=cpu", "platform.devices_per_node=2", "parallelism.tp=2",
                                         f"training.activation_checkpointing={mode}"])
        [role], error = deep_check(spec_dict, plan.pp, plan.dp, plan.tp)
        assert error is None and role["activations_note"] is None
        traced[mode] = role["activations_gib"]
    assert 0 < traced["full"] < traced["none"]


@pytest.mark.slow
def test_a_deep_dry_run_puts_the_traced_memory_beside_the_estimate(tmp_path):
    from tests.conftest import run_inprocess

    out = run_inprocess(tmp_path, ["platform=cpu", "platform.devices_per_node=2", "parallelism.tp=2", "dry_run=deep",
                                   "logging.wandb.mode=disabled"])
    assert out.status == "dry_run", out.result["error"]
    plan = out.result["plan"]
    measured = plan["memory_measured"]
    # the live single-process model read back: TP splits every matrix in two and replicates the RMSNorm weights
    spec = out.result["spec"]
    from tprimat.spec.build import build_spec

    eager = Decoder(build_spec(spec).model, 0)
    total = sum(p.numel() for p in eager.parameters())
    norms = sum(p.numel() for name, p in eager.named_parameters() if "norm" in name)
    [stage] = measured["stages"]
    assert stage["params"] * 2 == total + norms
    assert measured["weights_gib"] == pytest.approx(stage["params"] * 4 / 2**30)  # fp32 weights
    assert measured["states_gib"] == pytest.approx(stage["params"] * 16 / 2**30)  # + fp32 grads + AdamW m, v
    assert measured["activations_gib"] > 0 and measured["activations_note"] is None
    assert plan["memory_measured_gib"] == pytest.approx(
        measured["states_gib"] + measured["activations_gib"] + measured["overhead_gib"])
    # no pipeline: one micro batch in flight, so what the run holds is the trace as taken
    assert measured["micro_batches_in_flight"] == 1
    assert plan["memory_measured_one_micro_batch_gib"] == pytest.approx(plan["memory_measured_gib"])
    assert plan["memory_estimate_gib"] > 0  # the estimate stays beside it


@pytest.mark.slow
def test_a_deep_dry_run_breaking_a_rule_is_invalid_before_any_build(tmp_path):
    from tests.conftest import run_inprocess

    out = run_inprocess(tmp_path, ["platform=cpu", "platform.devices_per_node=3", "parallelism.pp=3", "dry_run=deep",
                                   "logging.wandb.mode=disabled"])  # llama_tiny has 4 layers
    assert out.status == "invalid" and out.exit_code == 2
    assert out.result["error"] == "model.num_layers=4, parallelism.pp=3: num_layers must be divisible by pp"
    assert "memory_measured" not in (out.result["plan"] or {})


def test_dry_run_takes_true_false_or_deep(tmp_path):
    from tests.conftest import run_inprocess

    out = run_inprocess(tmp_path, ["dry_run=deeper", "logging.wandb.mode=disabled"])
    assert out.status == "invalid" and out.result["error"] == "dry_run=deeper: must be one of true, false, deep"


@pytest.mark.slow
@pytest.mark.parametrize("layout", [["platform.devices_per_node=2"],
                                    ["platform.devices_per_node=2", "parallelism.fsdp=true"],
                                    ["platform.devices_per_node=2", "parallelism.tp=2", "parallelism.sequence_parallel=true"],
                                    ["platform.devices_per_node=2", "parallelism.pp=2"],
                                    ["platform.devices_per_node=4", "parallelism.tp=2", "parallelism.fsdp=true"]],
                         ids=["DP", "FSDP", "TP+SP", "PP", "FSDPxTP"])
def test_the_activation_estimate_matches_the_traced_layout(layout):
    """The analytical activations of one micro batch (autocast's per-linear input copies and weight cache, the
    loss's logits, SP's gathered inputs) against MemTracker's trace of the real layout over fake tensors."""
    from tprimat.backends.native.deep import deep_check
    from tprimat.spec.memory import activation_bytes

    spec, plan, spec_dict = _spec_dict(["platform=nvidia", "platform.gpu=h100", "methodology=identical_config",
                                        "training.precision=bf16", "training.seq_length=1024", "model.vocab_size=8192",
                                        *layout])
    roles, error = deep_check(spec_dict, plan.pp, plan.dp, plan.tp)
    assert error is None
    traced = max(r["activations_gib"] for r in roles) * 2**30
    assert activation_bytes(spec, plan.grad_accum_steps, in_flight=1) == pytest.approx(traced, rel=0.05)


def whole_and_extrapolated(spec_dict: dict) -> list:
    """In a process of its own: rank 0's stage traced at its whole depth and extrapolated from two shallow ones."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from tprimat.backends.native.deep import trace_by_depth
    from tprimat.backends.native.parallelize import make_layout
    from tprimat.spec.detect import DetectedHardware
    from tprimat.spec.schema import ac_period

    spec = build_spec(spec_dict)
    plan = make_plan(spec, DetectedHardware("cpu", "fake world", 1, 0.0, None))
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=plan.world_size)
    layout = make_layout(plan, torch.device("cpu"))
    period = ac_period(spec.training.ac_frequency) if spec.training.activation_checkpointing == "selective" else 1
    whole, _ = trace_by_depth(spec, layout, depths=(spec.model.num_layers, spec.model.num_layers))
    extrapolated, _ = trace_by_depth(spec, layout, depths=(period, 2 * period))
    return [whole, extrapolated]


@pytest.mark.slow
@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_activations_extrapolated_in_depth_equal_the_whole_trace(recompute):
    """The deep check traces a stage at one and two layers (two and four under selective recompute) and
    extrapolates to its depth; here an 8-layer model traced whole gives the same peak."""
    _, _, spec_dict = _spec_dict(["platform=cpu", "platform.devices_per_node=2", "parallelism.tp=2",
                                  "model.num_layers=8", f"training.activation_checkpointing={recompute}"])
    from tprimat.backends.native.deep import in_fresh_process

    ok, traced = in_fresh_process(whole_and_extrapolated, (spec_dict,), timeout_s=600)
    assert ok, traced
    whole, extrapolated = traced
    assert whole > 0 and extrapolated == pytest.approx(whole, rel=1e-3)


def test_the_deep_check_counts_the_schedules_micro_batches_in_flight():
    """Two pipeline stages' roles by hand (GiB): what the run holds is the heaviest stage's states, the largest
    traced micro batch times the micro batches in flight (4 under 1F1B with pp=4), and the overhead; the trace
    as taken stays beside it."""
    from tprimat.backends.native.deep import measured_memory

    roles = [{"rank": 0, "stage": 0, "params": 10, "weights_gib": 2.0, "grads_gib": 2.0, "optimizer_gib": 4.0,
              "activations_gib": 3.0, "activations_note": None},
             {"rank": 8, "stage": 1, "params": 9, "weights_gib": 1.5, "grads_gib": 1.5, "optimizer_gib": 3.0,
              "activations_gib": 2.5, "activations_note": None}]
    made = measured_memory(roles, overhead_gib=1.0, in_flight=4)
    assert made["memory_measured_gib"] == pytest.approx(8.0 + 3.0 * 4 + 1.0)  # 21.0
    assert made["memory_measured_one_micro_batch_gib"] == pytest.approx(8.0 + 3.0 + 1.0)  # 12.0
    assert made["memory_measured"]["micro_batches_in_flight"] == 4


def die(code: int) -> None:
    """A process that ends before it answers, as a crash in native code would (by name: under coverage's patch
    ``os._exit`` itself is a local function, which pickle cannot send)."""
    import os

    os._exit(code)


def test_a_role_process_that_dies_or_hangs_is_one_line():
    """A process forked for a role that exits before answering (as a crash in native code would) is named by its
    exit code; one that does not answer in time is killed and named by the limit; an exception is its own line."""
    import time

    from tprimat.backends.native.deep import in_fresh_process

    assert in_fresh_process(die, (3,), timeout_s=60) == (False, "exit 3")
    started = time.monotonic()
    assert in_fresh_process(time.sleep, (60,), timeout_s=0.5) == (False, "no answer within 0.5 s")
    assert time.monotonic() - started < 30  # killed, not waited for
    assert in_fresh_process(int, ("x",), timeout_s=60) == (False, "ValueError: invalid literal for int() with base 10: 'x'")
    assert in_fresh_process(divmod, (7, 2), timeout_s=60) == (True, (3, 1))
