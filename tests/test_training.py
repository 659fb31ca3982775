"""Real tiny training on CPU: the loss falls, the metrics are consistent, the mechanics are right."""

import functools
import math

import pytest
import torch

from tests.conftest import QUICK, run_inprocess
from tprimat.backends.common import SyntheticTokens, lr_at
from tprimat.backends.native.train import NativeTrainer
from tprimat.compose import compose
from tprimat.measure.devices import detect
from tprimat.spec.build import build_spec
from tprimat.spec.plan import make_plan


def trainer_for(overrides):
    hw = detect()
    spec = build_spec(compose(overrides), hw)
    return NativeTrainer(spec, make_plan(spec, hw), torch.device("cpu"))


# The mechanics tests below compare runs of one configuration on 64-token sequences: the same math as 256.
SHORT = ["training.seq_length=64"]


@functools.lru_cache(maxsize=8)
def _losses(overrides: tuple, steps: int) -> tuple:
    trainer = trainer_for(list(overrides))
    return tuple(trainer.step(s)[0].item() for s in range(steps))


def losses(overrides, steps):
    """The first ``steps`` losses of a fresh trainer (a configuration trained once per module)."""
    return list(_losses(tuple(overrides), steps))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = run_inprocess(tmp_path_factory.mktemp("tiny"), ["training.max_steps=12", "benchmark.warmup_steps=2",
                                                          "logging.wandb.mode=disabled"])
    assert out.status == "ok", out.result["error"]
    return out.result


def test_loss_falls(tiny_run):
    steps = tiny_run["steps"]
    first, last = steps[0]["loss"], sum(s["loss"] for s in steps[-3:]) / 3
    assert first == pytest.approx(math.log(2048), rel=0.05)  # random init: about ln(vocab)
    assert last < first - 0.3


def test_metrics_are_consistent(tiny_run):
    s, plan, steps = tiny_run["summary"], tiny_run["plan"], tiny_run["steps"]
    measured = [r for r in steps if not r["warmup"]]
    assert len(steps) == 12 and len(measured) == 10 and s["measured_steps"] == 10 and s["warmup_steps"] == 2
    assert s["tokens_per_s"] * s["step_time_s"]["mean"] == pytest.approx(plan["tokens_per_step"], rel=1e-9)
    assert s["tokens_per_s_per_device"] == s["tokens_per_s"] / plan["world_size"]
    assert s["steps_per_s"] == pytest.approx(1 / s["step_time_s"]["mean"])
    assert s["tflops_per_device"] == pytest.approx(plan["flops_per_token"] * s["tokens_per_s_per_device"] / 1e12)
    times = sorted(r["step_time_s"] for r in measured)
    assert s["step_time_s"]["min"] == times[0] and s["step_time_s"]["max"] == times[-1]
    assert s["step_time_s"]["median"] == pytest.approx((times[4] + times[5]) / 2)
    assert s["mfu"] is None and any("MFU" in w for w in tiny_run["warnings"])  # no CPU peak in the table
    assert all(r["tokens"] == plan["tokens_per_step"] for r in steps)
    assert all(0 < r["memory_gib"] <= r["peak_memory_gib"] for r in steps)
    assert [r["lr"] for r in steps] == pytest.approx([lr_at(i, _training(tiny_run)) for i in range(12)])


def _training(result):
    from tprimat.spec.build import build_spec

    return build_spec(result["spec"]).training


def test_lr_schedule_warms_up_then_decays_to_min_lr():
    training = build_spec(compose(["training.max_steps=20"]), detect()).training
    lrs = [lr_at(s, training) for s in range(21)]
    assert lrs[0] == pytest.approx(2e-3 / 4) and lrs[3] == pytest.approx(2e-3)
    assert all(a >= b for a, b in zip(lrs[3:], lrs[4:]))
    assert lrs[20] == pytest.approx(2e-4)


@pytest.mark.parametrize("model", ["qwen_tiny", "mistral_tiny"])
def test_other_architectures_train(tmp_path, model):
    out = run_inprocess(tmp_path, [f"model={model}", *QUICK, *SHORT])
    assert out.status == "ok" and all(math.isfinite(r["loss"]) for r in out.result["steps"])


def test_gradient_accumulation_matches_one_big_micro_batch():
    fp32 = ["training.precision=fp32", *SHORT]
    accumulated = losses([*fp32, "training.micro_batch_size=2"], 3)  # 4 micro batches of 2
    single = losses([*fp32, "training.micro_batch_size=8"], 3)  # 1 micro batch of 8
    assert accumulated == pytest.approx(single, rel=1e-4)


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_activation_checkpointing_does_not_change_the_math(mode):
    fp32 = ["training.precision=fp32", *SHORT]
    assert losses([*fp32, f"training.activation_checkpointing={mode}"], 3) == pytest.approx(losses(fp32, 3), rel=1e-5)


def test_repeats_start_from_the_same_seed(tmp_path):
    out = run_inprocess(tmp_path, [*QUICK, *SHORT, "benchmark.repeats=2"])
    steps = out.result["steps"]
    assert [s["repeat"] for s in steps] == [0] * 4 + [1] * 4
    assert steps[0]["loss"] == pytest.approx(steps[4]["loss"], rel=1e-3)
    assert out.result["summary"]["repeats"] == 2 and len(out.result["summary"]["per_repeat"]) == 2


def test_synthetic_data_is_seeded_and_learnable():
    data = SyntheticTokens(vocab_size=100, seq_length=16, seed=7, global_batch_size=4)
    x1, y1 = data.rows(step=3, first_row=0, num_rows=4)
    x2, y2 = SyntheticTokens(100, 16, 7, 4).rows(step=3, first_row=0, num_rows=4)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.equal(x1, data.rows(step=4, first_row=0, num_rows=4)[0])
    assert torch.equal(x1[:, 1:], y1[:, :-1])  # targets are inputs shifted by one
    assert torch.equal(x1[:, 1::2], data.successor[x1[:, 0::2]])  # odd positions follow the permutation
    part, _ = data.rows(step=3, first_row=2, num_rows=2)
    assert torch.equal(part, x1[2:])  # a micro batch or data-parallel rank takes a slice of one global batch


@pytest.mark.slow
def test_compile_runs_and_its_cost_stays_in_the_warmup(compiled_run):
    """A cold compile (conftest's ``compiled_run``): the first step pays it, and it is warm-up."""
    steps = compiled_run["steps"]
    assert steps[0]["warmup"] and steps[0]["step_time_s"] > 3 * compiled_run["summary"]["step_time_s"]["median"]


def test_fp8_path_converts_every_block_linear_and_runs():
    """What training.precision=fp8 runs on GPUs: torchao float8 linears in every block, the output projection kept
    in bf16. torchao emulates the fp8 GEMMs on CPU, so the converted model runs forward and backward here."""
    float8 = pytest.importorskip("torchao.float8.float8_linear")
    import copy

    import torch.nn.functional as F
    from torch import nn

    from tprimat.backends.native.model import Decoder
    from tprimat.backends.native.parallelize import apply_float8

    spec = build_spec(compose(["platform=cpu"]), detect())
    torch.manual_seed(0)
    model = Decoder(spec.model)
    reference = copy.deepcopy(model)
    apply_float8(model)
    linears = {name: type(m) for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert linears.pop("output") is nn.Linear
    assert len(linears) == 7 * spec.model.num_layers and all(issubclass(t, float8.Float8Linear) for t in linears.values())
    # 8 tokens: torch's CPU _scaled_mm is a reference loop (about 1 s a GEMM at 128 rows), the conversion is the point
    tokens = torch.randint(0, spec.model.vocab_size, (1, 8))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, expected = model(tokens).float(), reference(tokens).float()
    # e4m3 keeps 3 mantissa bits: the logits stay within a few percent of bf16's
    assert 0 < (logits - expected).abs().max() < 0.15 * expected.abs().max()
    F.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
