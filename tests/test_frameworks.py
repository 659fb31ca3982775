"""In-process frameworks for real on CPU: Hugging Face Transformers (Trainer: DDP, ZeRO-3 through its DeepSpeed
integration) and DeepSpeed (ZeRO-2, ZeRO-3).

identical_config means the same hyperparameters reach every framework: the optimizer settings each backend
reports are read back from its live optimizer and engine, and the learning rate of every recorded step must
follow the spec's schedule.
"""

import math

import pytest

from tests.conftest import run_inprocess, run_launch
from tprimat.backends.common import lr_at
from tprimat.results.result import read_result, validate_result
from tprimat.spec.build import build_spec
from tprimat.spec.detect import cpu_precision

pytestmark = [pytest.mark.slow,  # multi-process runs, real frameworks
              pytest.mark.machine]  # DeepSpeed's CPU op, from the suite's set-up


@pytest.fixture(autouse=True, scope="module")
def frameworks_installed():
    """Skipped where either is missing; imported when the tests run, not at collection (2-3 s that a run of
    ``-m "not slow"``, which deselects them all, would pay)."""
    pytest.importorskip("transformers")
    pytest.importorskip("deepspeed")


# identical_config's bf16 where this CPU multiplies bf16 natively; fp32 where bf16 matmul is emulated (100x slower)
STEPS = ["training.max_steps=6", "benchmark.warmup_steps=1", "training.optimizer.warmup_steps=2",
         "logging.wandb.mode=disabled", "platform=cpu", "methodology=identical_config",
         f"training.precision={cpu_precision()}"]


def launched(tmp_path, *overrides):
    """``python launch.py`` as a user runs it (one process: the Trainer's)."""
    proc = run_launch(tmp_path, *STEPS, *overrides, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return checked(tmp_path)


def ranked(tmp_path, *overrides):
    """Two ranks as launch.py starts them, from this test's process: forked from its forkserver, which has imported
    torch once for every such run of the worker (a fresh ``python launch.py`` pays that again, with its own)."""
    out = run_inprocess(tmp_path, [*STEPS, *overrides, "platform.devices_per_node=2"])
    assert out.status == "ok", out.result.get("error")
    return checked(tmp_path)


def checked(tmp_path):
    result = read_result(tmp_path / "result.json")
    assert validate_result(result) == [] and result["status"] == "ok"
    losses = [s["loss"] for s in result["steps"]]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    return result


def assert_spec_reached_the_framework(result):
    spec = build_spec(result["spec"])
    opt, eff = spec.training.optimizer, result["framework"]["effective"]
    assert eff["optimizer"] == "AdamW"
    assert eff["betas"] == [opt.beta1, opt.beta2] and eff["eps"] == opt.eps
    assert eff["weight_decay"] == opt.weight_decay and eff["grad_clip"] == opt.grad_clip
    assert eff["micro_batch_size"] == spec.training.micro_batch_size
    assert eff["grad_accum_steps"] == result["plan"]["grad_accum_steps"]
    assert eff["precision"] == spec.training.precision
    assert [s["lr"] for s in result["steps"]] == pytest.approx(
        [lr_at(i, spec.training) for i in range(spec.training.max_steps)], rel=1e-6)


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    out = run_inprocess(tmp_path_factory.mktemp("native"), STEPS)
    assert out.status == "ok"
    return out.result


def test_native_uses_the_spec(native):
    assert_spec_reached_the_framework(native)


def test_transformers_single_process(tmp_path):
    result = launched(tmp_path, "framework=transformers")
    assert result["framework"]["version"].startswith("transformers ")
    assert_spec_reached_the_framework(result)


@pytest.fixture(scope="module")
def trainer_ddp(tmp_path_factory):
    return ranked(tmp_path_factory.mktemp("trainer_ddp"), "framework=transformers")


def test_transformers_data_parallel(trainer_ddp):
    result = trainer_ddp
    assert result["ranks"]["world_size"] == 2 and result["ranks"]["loss_max_abs_diff"] < 1e-6
    assert result["framework"]["effective"]["data_parallel_processes"] == 2
    assert result["framework"]["effective"]["grad_accum_steps"] == 1  # 8 = 4 x 2 ranks x 1
    assert_spec_reached_the_framework(result)


def test_transformers_shards_with_its_deepspeed_integration(tmp_path, trainer_ddp):
    """parallelism.zero_stage=3 under the Trainer: its own DeepSpeed integration (TrainingArguments(deepspeed=...)),
    the engine reading back stage 3 and the generated config, tprimat's AdamW and schedule inside it, and the
    same model, data and schedule as the Trainer's plain DDP run: the same losses up to bf16 rounding."""
    result = ranked(tmp_path, "framework=transformers", "parallelism.zero_stage=3")
    eff = result["framework"]["effective"]
    assert eff["distributed_type"] == "DistributedType.DEEPSPEED" and eff["zero_stage"] == 3
    assert eff["ds_config"]["zero_optimization"]["stage"] == 3 and eff["ds_config"]["train_batch_size"] == 8
    assert result["ranks"]["loss_max_abs_diff"] < 1e-6
    assert_spec_reached_the_framework(result)
    assert [s["loss"] for s in result["steps"]] == pytest.approx([s["loss"] for s in trainer_ddp["steps"]], rel=2e-3)


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero(tmp_path, native, stage):
    result = ranked(tmp_path, "framework=deepspeed", f"parallelism.zero_stage={stage}")
    eff = result["framework"]["effective"]
    assert eff["zero_stage"] == stage and result["ranks"]["loss_max_abs_diff"] < 1e-6
    config = eff["ds_config"]
    assert config["train_batch_size"] == 8 and config["train_micro_batch_size_per_gpu"] == 4
    assert config["gradient_accumulation_steps"] == 1 and config["zero_optimization"]["stage"] == stage
    assert config["bf16"]["enabled"] is (cpu_precision() == "bf16") and config["gradient_clipping"] == 1.0
    assert_spec_reached_the_framework(result)
    # The same decoder, data and schedule as the native backend: the same losses (up to bf16 rounding in bf16).
    assert [s["loss"] for s in result["steps"]] == pytest.approx([s["loss"] for s in native["steps"]], rel=2e-3)


def test_deepspeed_config_is_shown_by_a_dry_run(tmp_path):
    out = run_inprocess(tmp_path, [*STEPS, "framework=deepspeed", "parallelism.zero_stage=3", "dry_run=true"])
    assert out.status == "dry_run"
    assert out.result["plan"]["backend_config"]["zero_optimization"]["stage"] == 3


@pytest.mark.parametrize("framework,overrides,fragment", [
    ("transformers", ["platform.devices_per_node=2", "parallelism.tp=2"], "data parallelism only"),
    ("deepspeed", ["parallelism.fsdp=true"], "zero_stage"),
    ("transformers", ["parallelism.fsdp=true"], "zero_stage"),
    ("native", ["parallelism.zero_stage=2"], "fsdp=true"),
])
def test_backends_refuse_what_they_cannot_run(tmp_path, framework, overrides, fragment):
    out = run_inprocess(tmp_path, [*STEPS, f"framework={framework}", *overrides])
    assert out.status == "invalid" and fragment in out.result["error"]


def test_deepspeed_runs_again_in_the_same_process(tmp_path):
    """A sweep under Hydra's basic launcher runs its points in one process: a second DeepSpeed run (here the
    Trainer's DeepSpeed integration after a DeepSpeed engine) must not meet the first one's destroyed group, nor
    the environment they wrote (RANK, WORLD_SIZE: a later launch looked like a torchrun rank; a plain Trainer run
    after them like a DeepSpeed one), nor ZeRO-3's linear in place of torch's (a later projection traced 7 more
    operations a layer through it)."""
    import os

    import torch

    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "ACCELERATE_USE_DEEPSPEED")
    before = {key: os.environ.get(key) for key in keys}
    linear = torch._C._nn.linear  # torch's own: ZeRO-3 puts DeepSpeed's in its place for the whole process
    for i, (framework, zero) in enumerate((("deepspeed", 3), ("transformers", 3), ("transformers", 0))):
        out = run_inprocess(tmp_path / str(i), [*STEPS, "training.max_steps=2", "training.optimizer.warmup_steps=1",
                                                f"framework={framework}", f"parallelism.zero_stage={zero}"])
        assert out.status == "ok", out.result.get("error")
        assert {key: os.environ.get(key) for key in keys} == before
        assert torch.nn.functional.linear is linear, torch.nn.functional.linear
    assert "DEEPSPEED" not in out.result["framework"]["effective"]["distributed_type"]
