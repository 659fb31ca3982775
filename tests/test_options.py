"""The optimisation matrix as config: compile modes, fp8 recipes, selective recompute at a frequency, each
validated on its own and against the compatibility table, and each supported one run for real on CPU where the
CPU can (compile through inductor's CPU backend, fp8 through torchao's emulation, recompute anywhere)."""

import argparse
import re
from pathlib import Path

import pytest
import torch

from tests.conftest import QUICK, run_inprocess
from tprimat.compose import compose
from tprimat.spec.build import build_spec
from tprimat.spec.compat import RULES, table
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.schema import ac_period
from tprimat.spec.validate import validate

H100 = DetectedHardware("cpu", "planning host", 1, 0.0, None)
GPU = ["platform=nvidia", "platform.gpu=h100", "model=gpt2", "logging.wandb.mode=disabled"]


def problems(*overrides):
    return validate(build_spec(compose([*GPU, *overrides]), H100), H100, dry_run=True)


@pytest.mark.parametrize("text,k", [(1, 1), (4, 4), ("1/4", 4), ("1/2", 2), (" 1 / 3 ", 3), ("6", 6)])
def test_ac_frequency_takes_an_integer_or_one_over_k(text, k):
    assert ac_period(text) == k


@pytest.mark.parametrize("bad", [0, -2, "1/0", "2/3", "abc", "0.5", True])
def test_a_bad_ac_frequency_names_the_key_and_the_rule(bad):
    (line,) = [p for p in problems("training.activation_checkpointing=selective", f"training.ac_frequency={bad}")
               if p.startswith("training.ac_frequency")]
    assert 'must be an integer k >= 1 or "1/k"' in line


@pytest.mark.parametrize("overrides,expected", [
    (["training.compile=true", "training.compile_mode=reduce-overhead", "platform.devices_per_node=2",
      "parallelism.fsdp=true"],
     "training.compile=true, training.compile_mode=reduce-overhead with parallelism.fsdp=true: not supported (fsdp)"),
    (["training.compile=true", "training.compile_mode=max-autotune", "platform.devices_per_node=2", "parallelism.tp=2",
      "model.num_attention_heads=12"],
     "training.compile=true, training.compile_mode=max-autotune with parallelism.tp=2: not supported (tp)"),
    (["training.compile=true", "training.compile_mode=reduce-overhead", "platform.devices_per_node=2",
      "parallelism.pp=2", "model.tie_embeddings=false", "training.micro_batch_size=1"],
     "with parallelism.pp=2: not supported (pp): CUDA graphs capture no pipeline sends and receives"),
    (["training.compile=true", "training.precision=fp8", "training.fp8.recipe=delayed"],
     "training.compile=true with training.precision=fp8, training.fp8.recipe=delayed: not supported (every strategy)"),
    (["training.activation_checkpointing=selective", "training.precision=fp8", "training.fp8.recipe=current"],
     "training.activation_checkpointing=selective with training.precision=fp8, training.fp8.recipe=current: not "
     "supported (every strategy)"),
    (["training.compile_mode=max-autotune"], "training.compile_mode=max-autotune, training.compile=false: a compile "
                                             "mode needs training.compile=true"),
    (["training.fp8.recipe=rowwise"], "training.fp8.recipe=rowwise, training.precision=bf16: an fp8 recipe needs "
                                      "training.precision=fp8"),
    (["framework=megatron", "model=llama", "training.activation_checkpointing=selective", "training.ac_frequency=4"],
     "training.ac_frequency=4, framework.name=megatron: only framework=native and deepspeed recompute every k-th"),
    (["training.compile=true", "training.compile_mode=bogus"], "training.compile_mode=bogus: must be one of default, "
                                                               "reduce-overhead, max-autotune, max-autotune-no-cudagraphs"),
], ids=["graphs+fsdp", "graphs+tp", "graphs+pp", "compile+te", "selective+te", "mode-alone", "recipe-alone",
        "frequency-external", "unknown-mode"])
def test_incompatible_options_are_refused_naming_both(overrides, expected):
    found = problems(*overrides)
    assert any(expected in p for p in found), found


@pytest.mark.parametrize("overrides", [
    ["training.compile=true", "training.compile_mode=reduce-overhead", "parallelism.fsdp=false",
     "platform.devices_per_node=1"],  # one device (H100's tuned layout is FSDP)
    ["training.compile=true", "training.compile_mode=reduce-overhead", "platform.devices_per_node=2",
     "parallelism.fsdp=false"],  # DDP
    ["training.compile=true", "training.compile_mode=max-autotune-no-cudagraphs", "platform.devices_per_node=2",
     "parallelism.fsdp=true"],
    ["training.compile=true", "training.precision=fp8", "training.fp8.recipe=rowwise"],  # torchao composes
    ["training.activation_checkpointing=selective", "training.ac_frequency=1/4", "training.precision=fp8",
     "platform.devices_per_node=2", "parallelism.tp=2", "model.num_attention_heads=12"],
], ids=["graphs-single", "graphs-ddp", "no-graphs-fsdp", "compile+torchao", "selective+torchao+tp"])
def test_supported_combinations_validate(overrides):
    assert problems(*overrides) == []


def test_the_table_is_the_data_validation_applies():
    rows = table()
    assert len(rows) == len(RULES) and all(len(row) == 4 and row[3] for row in rows)
    assert ("training.compile=true", "training.precision=fp8, training.fp8.recipe=delayed or current", "all") == rows[0][:3]


def test_selective_recompute_every_fourth_layer_trains_and_is_read_back(tmp_path):
    out = run_inprocess(tmp_path, ["model=gpt2_tiny", "model.num_layers=8", *QUICK, "benchmark.telemetry=false",
                                   "training.activation_checkpointing=selective", "training.ac_frequency=1/4"])
    assert out.status == "ok", out.result["error"]
    assert out.result["framework"]["effective"]["recomputed_layers"] == 2  # layers 0 and 4 of 8


@pytest.mark.slow
def test_a_compile_mode_runs_through_inductor_on_cpu(compiled_run):
    """reduce-overhead asks for CUDA graphs; on a CPU inductor compiles the blocks without them (conftest's
    ``compiled_run``: llama_tiny's 4 blocks, read back from the live model), and the four alike blocks are one graph
    to dynamo: compiled once, not again for a block that differs by a hook (the trainer's probe once hooked the first
    block alone, and dynamo compiled a second graph, forward and backward, for the other three)."""
    effective = compiled_run["framework"]["effective"]
    assert compiled_run["spec"]["training"]["compile_mode"] == "reduce-overhead"
    assert effective["compiled_layers"] == 4 and effective["recomputed_layers"] == 0
    assert compiled_run["dynamo_graphs"] == 1


def probe_hooks() -> dict:
    """In a process of its own (a one-rank gloo group for DDP): the forward hooks torch holds on each block of
    llama_tiny once the trainer's probe has observed the model, bare and wrapped in DDP."""
    import tempfile

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from tprimat.backends.native.model import Decoder
    from tprimat.backends.native.train import ComputeProbe

    spec = build_spec(compose(["platform=cpu", "model=llama_tiny"]))
    bare, inner = Decoder(spec.model), Decoder(spec.model)
    dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/rendezvous", rank=0, world_size=1)
    for model in (bare, DistributedDataParallel(inner)):
        ComputeProbe(model)
    return {name: [sum(len(m._forward_hooks) for m in block.modules()) for block in model.layers.values()]
            for name, model in (("bare", bare), ("ddp", inner))}


def test_the_probe_hooks_every_block_alike_bare_or_under_ddp():
    """torch.compile guards a compiled block on its hooks: a hook on one block alone compiles the others again.
    The probe's hooks, counted by torch itself, are one a block on llama_tiny's four, bare and under DDP."""
    from tprimat.backends.native.deep import in_fresh_process

    ok, hooks = in_fresh_process(probe_hooks, (), timeout_s=120)
    assert ok, hooks
    assert hooks == {"bare": [1, 1, 1, 1], "ddp": [1, 1, 1, 1]}


def test_the_native_backend_runs_cuda_graphs_on_one_gpu_and_refuses_them_on_several():
    from tprimat.backends.native.backend import BACKEND
    from tprimat.spec.plan import make_plan

    def check(devices: int) -> list[str]:
        spec = build_spec(compose([*GPU, "training.compile=true", "training.compile_mode=reduce-overhead",
                                   "parallelism.fsdp=false", f"platform.devices_per_node={devices}"]), H100)
        return [p for p in BACKEND.check(spec, make_plan(spec, H100)) if "compile_mode" in p]

    assert check(1) == []
    (line,) = check(8)
    assert line.startswith("training.compile_mode=reduce-overhead on 8 GPUs: framework=native runs CUDA graphs on one "
                           "GPU only")


@pytest.mark.parametrize("recipe,scaling", [("tensorwise", "tensorwise"), ("rowwise", "axiswise")])
def test_fp8_recipes_convert_and_train_a_gpt2_block_on_cpu(recipe, scaling):
    """torchao emulates the fp8 GEMMs on CPU: both recipes convert every block linear (not the head) and
    backpropagate finite gradients; the recipe is read back from the converted modules."""
    pytest.importorskip("torchao.float8")
    import torch.nn.functional as F

    from tprimat.backends.native.model import Decoder
    from tprimat.backends.native.parallelize import apply_float8
    from tprimat.backends.native.train import optimisations

    spec = build_spec(compose(["platform=cpu", "model=gpt2_tiny", "model.num_layers=2"]))
    torch.manual_seed(0)
    model = Decoder(spec.model)
    apply_float8(model, recipe)
    assert optimisations(model)["fp8_scaling"] == scaling
    tokens = torch.randint(0, spec.model.vocab_size, (1, 8))  # torch's CPU _scaled_mm is a slow reference loop
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens).float()
    F.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.slow
def test_the_selective_estimate_follows_the_frequency():
    """Recomputing every 4th layer keeps more than every 2nd and less than none, by the traced layout."""
    from tests.test_meta_init import _spec_dict
    from tprimat.backends.native.deep import deep_check
    from tprimat.spec.memory import activation_bytes

    base = ["platform=nvidia", "platform.gpu=h100", "methodology=identical_config", "training.precision=bf16",
            "model=gpt2", "model.num_layers=8", "training.micro_batch_size=1",
            "training.activation_checkpointing=selective"]
    estimates = {}
    for k in (2, 4):
        spec, plan, spec_dict = _spec_dict([*base, f"training.ac_frequency={k}"])
        roles, error = deep_check(spec_dict, plan.pp, plan.dp, plan.tp)
        assert error is None
        traced = roles[0]["activations_gib"] * 2**30
        estimates[k] = activation_bytes(spec, plan.grad_accum_steps, in_flight=1)
        assert estimates[k] == pytest.approx(traced, rel=0.05), k
    assert estimates[4] > estimates[2]


def test_the_documentation_shows_every_rule_of_the_table():
    from tests.conftest import ROOT

    readme = "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))
    for option, with_, strategies, reason in table():
        assert reason in readme and f"`{with_}`" in readme, reason


def test_help_describes_every_command_and_version_is_the_packages(capsys):
    """``tprimat --help`` names each subcommand the parser has, in its description, and ``--version`` prints the
    version pyproject.toml declares (read here with tomllib, not from the code)."""
    import tomllib

    from tprimat.cli import build_parser, main

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert len(commands) == 8
    for name in commands:
        assert re.search(rf"^  {name} +\S", parser.description, re.M), name
    assert "``" not in parser.description
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    declared = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out.strip() == f"tprimat {declared}"
