"""External frameworks (Megatron-LM, Primus, NeMo, torchtitan): the translation of the spec into each launch
surface, megatron-core's own TransformerConfig accepting it, the process runner on real logs replayed by a
child process, failure, timeout, and the fairness audit."""

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, run_inprocess
from tprimat import backends
from tprimat.backends.external.audit import audit
from tprimat.backends.external.base import ExternalFailed, Launch
from tprimat.backends.external.megatron import as_cli, megatron_settings
from tprimat.compose import compose
from tprimat.spec.build import build_spec
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.plan import make_plan

CORPUS = ROOT.parent / "shared" / "logs"
GPU = ["platform=amd", "platform.gpu=mi300x", "model=llama", "dry_run=true"]


NO_HARDWARE = DetectedHardware("none", "no live hardware: plans for GPUs", 0, 0.0, None)


def spec_plan(overrides):
    spec = build_spec(compose(overrides), NO_HARDWARE)
    return spec, make_plan(spec, NO_HARDWARE)


def flag_values(argv):
    values, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--"):
            takes_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            values[argv[i]] = argv[i + 1] if takes_value else True
            i += 2 if takes_value else 1
        else:
            i += 1
    return values


@pytest.mark.parametrize("framework", ["megatron", "primus", "nemo", "torchtitan", "megatron_deepspeed"])
def test_dry_run_saves_command_environment_and_files(tmp_path, framework):
    no_rope_scaling = ["model.rope_scaling_factor=null"] if framework == "megatron_deepspeed" else []
    out = run_inprocess(tmp_path, [f"framework={framework}", *GPU, *no_rope_scaling])
    assert out.status == "dry_run"
    config = out.result["plan"]["backend_config"]
    command = json.loads((tmp_path / "launch" / "command.json").read_text())
    assert command["argv"] == config["argv"] and command["argv"]
    for name in config["files"]:
        assert (tmp_path / "launch" / name).exists()


def test_megatron_command_sets_every_hyperparameter():
    spec, plan = spec_plan(["framework=megatron", "platform=nvidia", "platform.gpu=h100", "model=llama",
                            "parallelism.tp=2", "parallelism.zero_stage=1"])
    argv = backends.load("megatron").launch(spec, plan, Path("launch")).argv
    flags = flag_values(argv)
    opt = spec.training.optimizer
    expected = {"--lr": opt.lr, "--min-lr": opt.min_lr, "--lr-warmup-iters": opt.warmup_steps,
                "--weight-decay": opt.weight_decay, "--adam-beta1": opt.beta1, "--adam-beta2": opt.beta2,
                "--adam-eps": opt.eps, "--clip-grad": opt.grad_clip, "--global-batch-size": 128,
                "--micro-batch-size": 1, "--seq-length": 8192, "--train-iters": 50,
                "--tensor-model-parallel-size": 2, "--pipeline-model-parallel-size": 1, "--num-query-groups": 8,
                "--ffn-hidden-size": 14336, "--rotary-base": 500000,
                "--vocab-size": 128255}  # Megatron's null tokenizer adds its end-of-document id: 128256, the model's
    for flag, value in expected.items():
        assert float(flags[flag]) == pytest.approx(float(value)), flag
    for flag in ("--bf16", "--mock-data", "--swiglu", "--use-distributed-optimizer", "--use-rope-scaling",
                 "--untie-embeddings-and-output-weights", "--group-query-attention", "--log-throughput"):
        assert flags[flag] is True, flag
    assert argv[:3] == ["python", "-m", "torch.distributed.run"] and "--nproc_per_node=8" in argv


def test_megatron_deepspeed_command_sets_every_hyperparameter():
    """Flag names from Megatron-DeepSpeed's megatron/arguments.py and DeepSpeed's own --deepspeed_config."""
    spec, plan = spec_plan(["framework=megatron_deepspeed", "platform=amd", "platform.gpu=mi300x", "model=llama",
                            "model.rope_scaling_factor=null",
                            "parallelism.tp=2", "training.activation_checkpointing=full"])
    launch = backends.load("megatron_deepspeed").launch(spec, plan, Path("/run/launch"))
    flags = flag_values(launch.argv)
    opt, m = spec.training.optimizer, spec.model
    expected = {"--lr": opt.lr, "--min-lr": opt.min_lr, "--lr-warmup-iters": opt.warmup_steps,
                "--weight-decay": opt.weight_decay, "--adam-beta1": opt.beta1, "--adam-beta2": opt.beta2,
                "--adam-eps": opt.eps, "--clip-grad": opt.grad_clip, "--global-batch-size": 128,
                "--micro-batch-size": 1, "--seq-length": 8192, "--train-iters": 50, "--num-layers": 32,
                "--hidden-size": 4096, "--ffn-hidden-size": 14336, "--num-attention-heads": 32,
                "--num-key-value-heads": 8, "--kv-channels": 128, "--rotary-position-embeddings-theta": 500000,
                "--layernorm-epsilon": m.rms_norm_eps, "--tensor-model-parallel-size": 2,
                "--pipeline-model-parallel-size": 1, "--zero-stage": 1, "--vocab-size": 128255}
    for flag, value in expected.items():
        assert float(flags[flag]) == pytest.approx(float(value)), flag
    for flag in ("--bf16", "--swiglu", "--deepspeed", "--use-rotary-position-embeddings", "--disable-bias-linear",
                 "--untie-embeddings-and-output-weights", "--no-pipeline-parallel", "--no-query-key-layer-scaling",
                 "--deepspeed-activation-checkpointing"):
        assert flags[flag] is True, flag
    assert (flags["--normalization"], flags["--tokenizer-type"], flags["--recompute-granularity"]) == \
        ("rmsnorm", "NullTokenizer", "full")
    assert flags["--data-path"] == "/run/launch/data/synthetic_text_document"
    assert flags["--deepspeed_config"] == "/run/launch/deepspeed_config.json"
    config = json.loads(launch.files["deepspeed_config.json"])
    assert config["zero_optimization"]["stage"] == 1 and config["bf16"]["enabled"] is True
    assert "optimizer" not in config  # Megatron-DeepSpeed builds its optimizer from --lr, --adam-beta1, ...


def test_deepspeed_accepts_the_generated_engine_config():
    """DeepSpeed's own config class checks the batch arithmetic (train batch = micro batch x accumulation x dp)."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    from tprimat.backends.external.megatron_deepspeed import deepspeed_config

    for layout in (["platform.devices_per_node=1"], ["parallelism.tp=8"]):  # dp = 1: DeepSpeed's world of one
        spec, plan = spec_plan(["framework=megatron_deepspeed", "platform=amd", "platform.gpu=mi300x", "model=llama",
                                "model.rope_scaling_factor=null",
                                "training.micro_batch_size=2", *layout])
        ds = DeepSpeedConfig(deepspeed_config(spec, plan))
        assert (ds.train_batch_size, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps) == \
            (128, 2, plan.grad_accum_steps) and ds.zero_optimization_stage == spec.parallelism.zero_stage
        broken = {**deepspeed_config(spec, plan), "gradient_accumulation_steps": plan.grad_accum_steps + 1}
        with pytest.raises(AssertionError):
            DeepSpeedConfig(broken)


def test_the_synthetic_dataset_is_megatron_indexed_data(tmp_path):
    """Megatron-Core's own builder, given the same tokens, writes the same index and tokens; its reader reads
    every document back."""
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    core = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    from tprimat.backends.external import indexed_dataset

    for vocab in (50257, 128256):  # uint16 and int32 token files
        ours = tmp_path / f"ours{vocab}" / "synthetic"
        info = indexed_dataset.write(ours, vocab, tokens_per_document=65, documents=10, seed=7)
        read = core.IndexedDataset(str(ours))
        assert len(read) == 10 and list(read.sequence_lengths) == [65] * 10 and list(read.document_indices) == \
            list(range(11))
        documents = [np.asarray(read[i]) for i in range(10)]
        assert all(d.dtype == np.dtype(info["dtype"]) and 0 <= d.min() and d.max() < vocab for d in documents)
        theirs = tmp_path / f"theirs{vocab}"
        builder = core.IndexedDatasetBuilder(str(theirs) + ".bin", dtype=np.dtype(info["dtype"]).type)
        for d in documents:
            builder.add_item(torch.from_numpy(d.astype(np.int64)))
            builder.end_document()
        builder.finalize(str(theirs) + ".idx")
        assert (ours.with_suffix(".idx").read_bytes(), ours.with_suffix(".bin").read_bytes()) == \
            (Path(str(theirs) + ".idx").read_bytes(), Path(str(theirs) + ".bin").read_bytes())


@pytest.mark.parametrize("overrides,rule", [
    (["model=qwen"], "model.qkv_bias=true"), (["parallelism.cp=2"], "parallelism.cp=2"),
    (["training.precision=fp8"], "training.precision=fp8"),
    (["parallelism.pp=2", "parallelism.zero_stage=2"], "zero_stage=2 with pp=2"),
])
def test_megatron_deepspeed_refuses_what_it_cannot_express(overrides, rule):
    spec, plan = spec_plan(["framework=megatron_deepspeed", "platform=amd", "platform.gpu=mi300x", "model=llama",
                            "model.rope_scaling_factor=null",
                            *overrides])
    assert any(rule in problem for problem in backends.load("megatron_deepspeed").check(spec, plan))


def test_primus_experiment_states_every_override():
    spec, plan = spec_plan(["framework=primus", *GPU[:3], "training.optimizer.lr=0.0003"])
    launch = backends.load("primus").launch(spec, plan, Path("/runs/x/launch"))
    exp = yaml.safe_load(launch.files["experiment.yaml"])
    module = exp["modules"]["pre_trainer"]
    assert module["framework"] == "megatron" and module["model"] == "llama3.1_8B.yaml"
    over = module["overrides"]
    assert over["add_bias_linear"] is False and "disable_bias_linear" not in over  # Primus's key, not the flag
    assert over["lr"] == 3e-4 and over["min_lr"] == spec.training.optimizer.min_lr
    assert over["lr_warmup_iters"] == 10 and over["global_batch_size"] == 128 and over["mock_data"] is True
    assert "fp8" in over and over["fp8"] is None  # stated explicitly: Primus merges unknown keys silently
    assert launch.env["EXP"] == "/runs/x/launch/experiment.yaml" and launch.env["GPUS_PER_NODE"] == "8"
    assert launch.argv == ["bash", "examples/run_pretrain.sh"]


def test_primus_reads_every_float_as_a_float():
    """Primus loads the experiment with PyYAML's SafeLoader (YAML 1.1: primus/core/config/yaml_loader.py, v26.5.1),
    which reads JSON's 1e-05 as the string '1e-05' (a float needs a dot there): min_lr and adam_eps reached
    Megatron-LM as str. Every float the spec sets comes back from that loader a float, equal to the spec's."""
    assert yaml.safe_load("x: 1e-05")["x"] == "1e-05"  # the loader's own rule, the cause
    spec, plan = spec_plan(["framework=primus", "platform=amd", "platform.gpu=mi300x", "model=qwen"])
    over = yaml.safe_load(backends.load("primus").launch(spec, plan, Path("l")).files["experiment.yaml"])[
        "modules"]["pre_trainer"]["overrides"]
    expected = {"min_lr": spec.training.optimizer.min_lr, "adam_eps": spec.training.optimizer.eps,
                "layernorm_epsilon": spec.model.rms_norm_eps, "lr": spec.training.optimizer.lr}
    assert {k: over[k] for k in expected} == expected
    assert all(isinstance(over[k], float) for k in expected), {k: type(over[k]) for k in expected}


def test_primus_names_the_norm_epsilon_as_its_megatron_lm_does():
    """Primus v26.5.1 pins Megatron-LM d3528a21, whose arguments are generated from TransformerConfig: its
    MegatronArgBuilder knows layernorm_epsilon and drops norm_epsilon (core_v0.16.1's --norm-epsilon) without a
    word (recorded by bench/rehearse.py over Primus's own config path, 2026-11-27)."""
    spec, plan = spec_plan(["framework=primus", "platform=amd", "platform.gpu=mi300x", "model=qwen"])
    over = yaml.safe_load(backends.load("primus").launch(spec, plan, Path("l")).files["experiment.yaml"])[
        "modules"]["pre_trainer"]["overrides"]
    assert over["layernorm_epsilon"] == 1e-6 and "norm_epsilon" not in over  # Qwen 2.5's published rms_norm_eps


@pytest.mark.parametrize("zero_stage,sharded", [(0, False), (1, True)])
def test_primus_states_the_optimizer_the_plan_holds(zero_stage, sharded):
    """Primus's pre_trainer.yaml turns the distributed optimizer on (v26.5.1, use_distributed_optimizer: true), and its
    trainer_base.yaml both overlaps off: an experiment states all three, so nothing is inherited that the plan does not
    hold (an unstated optimizer ran sharded at zero_stage 0, found by a review on 2026-11-29)."""
    spec, plan = spec_plan(["framework=primus", *GPU[:3], "parallelism.fsdp=false", f"parallelism.zero_stage={zero_stage}"])
    over = yaml.safe_load(backends.load("primus").launch(spec, plan, Path("l")).files["experiment.yaml"])[
        "modules"]["pre_trainer"]["overrides"]
    assert over["use_distributed_optimizer"] is sharded and over["overlap_grad_reduce"] is True
    assert over.get("overlap_param_gather", False) is sharded


def test_primus_fp8_is_its_own_key():
    spec, plan = spec_plan(["framework=primus", *GPU[:3], "training.precision=fp8", "model=mistral"])
    module = yaml.safe_load(backends.load("primus").launch(spec, plan, Path("l")).files["experiment.yaml"])["modules"]
    over = module["pre_trainer"]["overrides"]
    assert over["fp8"] == "hybrid" and "fp8_format" not in over and over["bf16"] is True
    assert module["pre_trainer"]["model"] == "llama3_8B.yaml"
    # the null tokenizer adds its end-of-document id: the embedding is the spec's, not a downloaded tokenizer's
    assert over["tokenizer_type"] == "NullTokenizer" and over["vocab_size"] == spec.model.vocab_size - 1


@pytest.mark.parametrize("flavour", ["nemo2", "bridge"])
def test_nemo_scripts_for_both_flavours(flavour):
    spec, plan = spec_plan(["framework=nemo", f"framework.flavour={flavour}", *GPU[:3]])
    launch = backends.load("nemo").launch(spec, plan, Path("/runs/x/launch"))
    script = launch.files["nemo_pretrain.py"]
    tree = ast.parse(script)  # valid Python for NeMo's interpreter
    values = ast.literal_eval(next(n.value for n in tree.body if isinstance(n, ast.Assign) and
                                   getattr(n.targets[0], "id", "") == "V"))
    assert values["lr"] == spec.training.optimizer.lr and values["warmup_steps"] == 10
    assert values["global_batch_size"] == 128 and values["seq_length"] == 8192
    assert "TPRIMAT_EFFECTIVE" in script
    if flavour == "bridge":
        assert "llama31_8b_pretrain_config" in script and "torch.distributed.run" in launch.argv
    else:
        assert "llm.llama31_8b.pretrain_recipe" in script and "MockDataModule" in script
        assert 'tokenizer=run.Config(NullTokenizer, vocab_size=V["vocab_size"] - 1)' in script  # mock ids < vocab


def test_nemo_bridge_mistral_on_the_llama3_recipe_with_mistral_dimensions():
    spec, plan = spec_plan(["framework=nemo", "framework.flavour=bridge", *GPU[:2], "model=mistral",
                            "training.precision=fp8"])
    script = backends.load("nemo").launch(spec, plan, Path("l")).files["nemo_pretrain.py"]
    tree = ast.parse(script)
    assigned = {getattr(n.targets[0], "id", ""): n.value for n in tree.body if isinstance(n, ast.Assign)}
    values, settings = ast.literal_eval(assigned["V"]), ast.literal_eval(assigned["SETTINGS"])
    set_on = {where for _, where, _, _ in settings}
    assert "from megatron.bridge.recipes.llama import llama3_8b_pretrain_config as recipe_fn" in script
    assert {k: values[k] for k in ("vocab_size", "rotary_base", "share_embeddings_and_output_weights")} == {
        "vocab_size": spec.model.vocab_size, "rotary_base": int(spec.model.rope_theta),
        "share_embeddings_and_output_weights": False}
    assert {"model.vocab_size", "model.kv_channels", "model.layernorm_epsilon", "model.add_qkv_bias",
            "dataset.seq_length"} <= set_on
    # training.fp8.recipe's default, tensorwise: per-tensor current scaling, Megatron-Bridge's preset of that name
    assert ast.literal_eval(assigned["PRECISION"]) == "bf16_with_fp8_current_scaling_mixed"


def test_torchtitan_toml_overrides():
    spec, plan = spec_plan(["framework=torchtitan", "framework.flavour=toml", "platform=nvidia", "platform.gpu=h100",
                            "model=llama"])
    flags = flag_values(backends.load("torchtitan").launch(spec, plan, Path("launch")).argv)
    assert flags["--job.config_file"].endswith("llama3_8b.toml")
    assert float(flags["--optimizer.lr"]) == spec.training.optimizer.lr
    assert float(flags["--lr_scheduler.min_lr_factor"]) == pytest.approx(0.1)
    assert flags["--parallelism.data_parallel_shard_degree"] == "8" and flags["--training.global_batch_size"] == "128"


TITAN = ["framework=torchtitan", "platform=nvidia", "platform.gpu=h100", "model=llama"]
# torchtitan's own parser and config saver, as torchtitan.train runs them (world of one gloo rank)
TITAN_CHECK = """
import json, sys
import torch.distributed as dist
from torchtitan.config.manager import ConfigManager
config = ConfigManager().parse_args(json.loads(sys.argv[1]))
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=0, world_size=1)
config.maybe_log()
dist.destroy_process_group()
"""


def test_torchtitan_registry_module_sets_every_hyperparameter(tmp_path):
    spec, plan = spec_plan([*TITAN, "parallelism.fsdp=true", "training.activation_checkpointing=full"])
    launch = backends.load("torchtitan").launch(spec, plan, tmp_path / "launch")
    assert launch.argv[launch.argv.index("torchtitan.train"):] == ["torchtitan.train", "--module", "tprimat_torchtitan",
                                                          "--config", "tprimat_config"]
    assert launch.env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "launch")
    source = launch.files["tprimat_torchtitan.py"]
    ast.parse(source)
    assert "from torchtitan.models.llama3.config_registry import llama3_8b as base" in source
    opt = spec.training.optimizer
    assert f"default_adamw(lr={opt.lr!r}, betas=({opt.beta1!r}, {opt.beta2!r})" in source
    assert "'parallelism.data_parallel_shard_degree': 8" in source and "FullAC.Config()" in source


def test_a_model_torchtitan_refuses_is_refused_by_key_not_a_traceback(tmp_path):
    """The launch of a refused spec is not written (torchtitan has no config for Qwen 2.5: writing it raised
    KeyError before the refusal was reported)."""
    out = run_inprocess(tmp_path, ["framework=torchtitan", "platform=nvidia", "platform.gpu=h100", "model=qwen",
                                   "dry_run=true"])
    assert out.status == "invalid" and "model.name=qwen: torchtitan ships no config for it" in out.result["error"]


def test_torchtitans_flavour_shapes_are_its_own():
    """tprimat's table of torchtitan's flavours, against the model configs torchtitan's own functions return."""
    registry = pytest.importorskip("torchtitan.models.llama3.config_registry")
    from tprimat.backends.external.torchtitan import FLAVOUR_SHAPE
    for name, shape in FLAVOUR_SHAPE.items():
        model = getattr(registry, name.split(":")[1])().model_spec.model
        attention = model.layers[0].attention
        assert shape == {"hidden_size": model.dim, "num_layers": len(model.layers),
                         "num_attention_heads": attention.n_heads, "num_kv_heads": attention.qkv_linear.n_kv_heads,
                         "ffn_hidden_size": model.layers[0].feed_forward.w1.out_features,
                         "vocab_size": model.vocab_size, "rope_theta": float(attention.rope.theta),
                         "rope_scaling_factor": attention.rope.scaling_factor if attention.rope.scaling == "llama"
                         else None}, name


def test_torchtitan_refuses_a_model_it_cannot_carry_by_key():
    spec, plan = spec_plan(["framework=torchtitan", "platform=nvidia", "platform.gpu=h100", "model=llama_tiny"])
    problems = backends.load("torchtitan").check(spec, plan)
    assert any(p.startswith("model.num_attention_heads=8: torchtitan's flavour has 16") for p in problems), problems
    spec, plan = spec_plan([*TITAN, "model.num_layers=4"])  # fewer layers: the flavour's first ones
    assert not [p for p in backends.load("torchtitan").check(spec, plan) if p.startswith("model.")]
    spec, plan = spec_plan([*TITAN, "model.num_layers=4", "framework.flavour=toml"])  # a TOML cannot cut layers
    assert any(p.startswith("model.num_layers=4") for p in backends.load("torchtitan").check(spec, plan))
    spec, plan = spec_plan([*TITAN, "model.rope_scaling_factor=null"])  # its flavours scale RoPE by 8
    assert any(p.startswith("model.rope_scaling_factor=None") for p in backends.load("torchtitan").check(spec, plan))


TITAN_MODEL = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
model = importlib.import_module("tprimat_torchtitan").tprimat_config().model_spec.model
attention = model.layers[0].attention  # torchtitan's own model config, read here, not through the module
print(json.dumps({"hidden_size": model.dim, "num_layers": len(model.layers), "num_attention_heads": attention.n_heads,
                  "num_kv_heads": attention.qkv_linear.n_kv_heads,
                  "ffn_hidden_size": model.layers[0].feed_forward.w1.out_features, "vocab_size": model.vocab_size,
                  "rope_theta": float(attention.rope.theta),
                  "rope_scaling_factor": attention.rope.scaling_factor if attention.rope.scaling == "llama" else None}))
"""


@pytest.mark.slow
def test_torchtitan_builds_the_specs_proxy(tmp_path):
    """The 8B-width proxy (4 layers): the generated module's config, as torchtitan's function returns it, holds
    the spec's model, read from torchtitan's own model config object."""
    if importlib.util.find_spec("torchtitan") is None or importlib.util.find_spec("triton") is None:
        pytest.skip("torchtitan (and triton, which its model registry imports) not installed")
    spec, plan = spec_plan([*TITAN, "model.num_layers=4"])
    backends.load("torchtitan").write_launch(spec, plan, tmp_path)
    proc = subprocess.run([sys.executable, "-c", TITAN_MODEL, str(tmp_path / "launch")], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = json.loads(proc.stdout.strip().splitlines()[-1])
    m = spec.model
    assert built == {"hidden_size": m.hidden_size, "num_layers": 4, "num_attention_heads": m.num_attention_heads,
                     "num_kv_heads": m.num_kv_heads, "ffn_hidden_size": m.ffn_hidden_size,
                     "vocab_size": m.vocab_size, "rope_theta": m.rope_theta, "rope_scaling_factor": 8.0}


def titan_effective(tmp_path, overrides):
    """Materialise the launch, let torchtitan's own ConfigManager parse it and save the config it would run."""
    if importlib.util.find_spec("torchtitan") is None or importlib.util.find_spec("triton") is None:
        pytest.skip("torchtitan (and triton, which its model registry imports) not installed")
    spec, plan = spec_plan([*TITAN, *overrides])
    backend = backends.load("torchtitan")
    launch = backend.write_launch(spec, plan, tmp_path)
    args = launch.argv[launch.argv.index("--module"):]
    proc = subprocess.run([sys.executable, "-c", TITAN_CHECK, json.dumps(args), str(tmp_path / "rendezvous")],
                          env={**os.environ, **launch.env}, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return spec, backend.effective_settings(spec, tmp_path / "launch")


@pytest.mark.slow
def test_torchtitan_accepts_the_translation(tmp_path):
    spec, effective = titan_effective(tmp_path, ["parallelism.tp=2", "training.activation_checkpointing=selective"])
    report = audit(spec, "", [], effective)
    assert report["passed"] and report["unchecked"] == [], report
    assert effective["lr"] == spec.training.optimizer.lr and effective["tp"] == 2


@pytest.mark.slow
def test_torchtitan_audit_sees_an_override_on_its_command_line(tmp_path):
    spec, effective = titan_effective(tmp_path, ["framework.extra_args=[--lr_scheduler.warmup_steps,7]"])
    failed = [c["key"] for c in audit(spec, "", [], effective)["checks"] if not c["ok"]]
    assert failed == ["warmup_steps"]


# torchtitan's own ConfigManager over every launch, in one process: each launch's generated module is imported
# afresh from its own directory, as torchtitan.train would import it there
TITAN_PARSE = """
import importlib, json, sys, traceback
from torchtitan.config.manager import ConfigManager


def lrs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from ([value] if key == "lr" else lrs(value))
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from lrs(value)


checked = []
for point in json.load(open(sys.argv[1])):
    sys.path.insert(0, point["dir"])
    for name in [m for m in sys.modules if m.startswith("tprimat_")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    try:
        config = ConfigManager().parse_args(point["args"])
        checked.append({"point": point["point"], "error": None, "lrs": sorted(set(lrs(config.optimizer.to_dict()))),
                        "global_batch_size": config.training.global_batch_size,
                        "seq_len": config.training.seq_len})
    except BaseException as exc:
        checked.append({"point": point["point"], "error": traceback.format_exc()[-1500:]})
    sys.path.remove(point["dir"])
open(sys.argv[2], "w").write(json.dumps(checked))
"""


@pytest.mark.slow
def test_torchtitans_own_config_manager_accepts_every_default_matrix_config(tmp_path):
    """The default matrix's torchtitan points (NVIDIA H100, H200, B200 x Llama 3.1 8B x both methodologies;
    torchtitan ships Llama configs only, and tprimat refuses Qwen and Mistral under it): each launch tprimat
    writes is parsed by torchtitan's own ConfigManager, which applies every command-line override to the generated
    config, and reads back the spec's learning rate, batch and sequence."""
    pytest.importorskip("torchtitan")
    points, specs = [], []
    for gpu in ("h100", "h200", "b200"):
        for model in ("llama",):
            for methodology in ("identical_config", "maximum_performance"):
                overrides = ["platform=nvidia", f"platform.gpu={gpu}", f"model={model}", f"methodology={methodology}",
                             "framework=torchtitan"]
                spec, plan = spec_plan(overrides)
                launch_dir = tmp_path / f"{gpu}_{model}_{methodology}"
                launch = backends.load("torchtitan").write_launch(spec, plan, launch_dir)
                points.append({"point": [gpu, model, methodology], "dir": str(launch_dir / "launch"),
                               "args": launch.argv[launch.argv.index("--module"):]})
                specs.append(spec)
    (tmp_path / "points.json").write_text(json.dumps(points))
    proc = subprocess.run([sys.executable, "-c", TITAN_PARSE, str(tmp_path / "points.json"), str(tmp_path / "out.json")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    checked = json.loads((tmp_path / "out.json").read_text())
    assert len(checked) == 6
    for spec, check in zip(specs, checked):
        assert check["error"] is None, check
        assert check["lrs"] == [spec.training.optimizer.lr] and check["seq_len"] == spec.training.seq_length
        assert check["global_batch_size"] == spec.training.global_batch_size


@pytest.mark.parametrize("sharding,gather", [(["parallelism.fsdp=false", "parallelism.zero_stage=1"], True),
                                             (["parallelism.fsdp=true", "parallelism.zero_stage=0"], True),
                                             (["parallelism.fsdp=false", "parallelism.zero_stage=0"], False)])
def test_megatron_lm_overlaps_its_data_parallel_traffic_where_validate_args_allows(sharding, gather):
    """Megatron-LM's own Llama 3 example passes --overlap-grad-reduce and --overlap-param-gather; both are off by
    default, and validate_args (core_v0.16.1) takes the gather only with the distributed optimizer or Megatron FSDP,
    and only beside the overlapped reduce."""
    spec, plan = spec_plan(["platform=nvidia", "platform.gpu=h100", "model=llama", "framework=megatron", *sharding])
    argv = megatron_settings(spec, plan)
    assert argv["overlap_grad_reduce"] is True
    assert argv["overlap_param_gather"] is (True if gather else None)
    assert "--overlap-grad-reduce" in as_cli(argv) and ("--overlap-param-gather" in as_cli(argv)) is gather


def test_megatron_core_accepts_the_translation():
    core = pytest.importorskip("megatron.core.transformer")
    for model in ("llama", "qwen", "mistral", "llama70b"):
        spec, plan = spec_plan([f"model={model}", "platform=nvidia", "platform.gpu=h100", "parallelism.tp=4",
                                "platform.devices_per_node=8"])
        s = megatron_settings(spec, plan)
        config = core.TransformerConfig(
            num_layers=s["num_layers"], hidden_size=s["hidden_size"], num_attention_heads=s["num_attention_heads"],
            num_query_groups=s["num_query_groups"], ffn_hidden_size=s["ffn_hidden_size"], kv_channels=s["kv_channels"],
            gated_linear_unit=s["swiglu"], normalization=s["normalization"], layernorm_epsilon=s["norm_epsilon"],
            add_bias_linear=not s["disable_bias_linear"], add_qkv_bias=bool(s["add_qkv_bias"]),
            tensor_model_parallel_size=s["tensor_model_parallel_size"],
            pipeline_model_parallel_size=s["pipeline_model_parallel_size"], bf16=True)
        assert (config.num_layers, config.hidden_size, config.ffn_hidden_size) == (
            spec.model.num_layers, spec.model.hidden_size, spec.model.ffn_hidden_size)
        assert config.num_query_groups == spec.model.num_kv_heads and config.kv_channels * config.num_attention_heads \
            == spec.model.hidden_size
    with pytest.raises(ValueError, match="multiple of tensor_model_parallel_size"):
        core.TransformerConfig(num_layers=4, hidden_size=256, num_attention_heads=8, num_query_groups=2,
                               tensor_model_parallel_size=3)


# ---------------------------------------------------------------- running: a child process replays a real log

ARGS_DUMP = """------------------------ arguments ------------------------
  adam_beta1 ...................................... 0.9
  adam_beta2 ...................................... 0.95
  bf16 ............................................ True
  context_parallel_size ........................... 1
  fp8 ............................................. None
  global_batch_size ............................... 128
  lr .............................................. {lr}
  lr_warmup_iters ................................. 10
  micro_batch_size ................................ 2
  min_lr .......................................... 3e-05
  pipeline_model_parallel_size .................... 1
  seq_length ...................................... 8192
  tensor_model_parallel_size ...................... 1
  weight_decay .................................... 0.1
-------------------- end of arguments ---------------------
"""


def replay(backend, monkeypatch, text: str, exit_code: int = 0, sleep_s: float = 0.0):
    """The framework's command replaced by a child process printing ``text`` (a real log) and exiting."""
    program = (f"import sys, time; sys.stdout.write(open(sys.argv[1]).read()); sys.stdout.flush(); "
               f"time.sleep({sleep_s}); sys.exit({exit_code})")

    def launch(spec, plan, launch_dir):
        path = Path(launch_dir) / "replayed.log"
        return Launch([sys.executable, "-c", program, str(path)], files={"replayed.log": text})

    monkeypatch.setattr(backend, "launch", launch)


@pytest.mark.slow
@pytest.mark.skipif(not (CORPUS / "primus_3.log").exists(), reason="corpus not present")
def test_runner_streams_parses_and_audits_a_real_primus_log(tmp_path, monkeypatch):
    backend = backends.load("primus")
    spec, plan = spec_plan(["framework=primus", "platform=amd", "platform.gpu=mi300x", "model=llama",
                            "training.micro_batch_size=2", "training.optimizer.lr=3e-4", "benchmark.warmup_steps=2"])
    hidden_default = ARGS_DUMP.format(lr="1e-05")  # the classic: a framework default 30x below the spec
    replay(backend, monkeypatch, hidden_default + (CORPUS / "primus_3.log").read_text(errors="replace"))
    records = []
    outcome = backend.run(spec, plan, records.append, tmp_path)
    assert [r.step for r in records] == list(range(1, 51))
    assert records[0].step_time_s == pytest.approx(23.1022) and records[0].warmup and not records[2].warmup
    assert (tmp_path / "framework.log").exists()
    result = outcome.audit
    assert result["passed"] is False
    lr = next(c for c in result["checks"] if c["key"] == "lr")
    assert lr["requested"] == 3e-4 and lr["effective"] == 1e-5 and not lr["ok"]
    assert any("lr requested 0.0003 but the framework ran 1e-05" in f for f in outcome.audit_failures)
    assert all(c["ok"] for c in result["checks"] if c["key"] not in ("lr",))


def megatron_deepspeed_lines(steps: int) -> str:
    """Megatron-DeepSpeed's iteration lines (its training_log: consumed tokens, samples per second, TFLOPs)."""
    return "".join(
        f" iteration {i:>8}/      50 | consumed samples: {128 * i:>12} | consumed tokens: {128 * 8192 * i:>12} | "
        f"elapsed time per iteration (ms): {2000 + i:.1f} | learning rate: {3e-4 * min(1, i / 10):.3E} | global batch "
        f"size:   128 | lm loss: 1.05E+01 | loss scale: 1.0 | actual seqlen:  8192 | number of skipped iterations:   0"
        f" | number of nan iterations:   0 | samples per second: {128 / (2 + i / 1000):.3f} | TFLOPs: 410.52 |\n"
        for i in range(1, steps + 1))


@pytest.mark.slow
def test_megatron_deepspeed_run_writes_its_dataset_streams_and_audits(tmp_path, monkeypatch):
    backend = backends.load("megatron_deepspeed")
    spec, plan = spec_plan(["framework=megatron_deepspeed", "platform=amd", "platform.gpu=mi300x", "model=llama",
                            "model.rope_scaling_factor=null",
                            "training.micro_batch_size=2", "training.optimizer.lr=3e-4", "benchmark.warmup_steps=2"])
    replay(backend, monkeypatch, ARGS_DUMP.format(lr="0.0003") + megatron_deepspeed_lines(12))
    records = []
    outcome = backend.run(spec, plan, records.append, tmp_path)
    assert [r.step for r in records] == list(range(1, 13)) and records[0].warmup and not records[2].warmup
    assert records[4].step_time_s == pytest.approx(2.005) and records[4].tokens == 128 * 8192
    assert records[4].reported["tflops_per_gpu"] == 410.52 and records[4].reported["samples_per_s"] > 0
    assert outcome.audit["passed"] and {c["key"] for c in outcome.audit["checks"]} >= {"lr", "global_batch_size"}
    data = tmp_path / "launch" / "data" / "synthetic_text_document"
    assert data.with_suffix(".idx").exists() and data.with_suffix(".bin").stat().st_size == 1024 * 8193 * 4


def test_audit_passes_when_the_framework_ran_the_spec():
    spec, _ = spec_plan(["framework=megatron", "platform=nvidia", "platform.gpu=h100", "model=llama",
                         "training.micro_batch_size=2", "training.precision=bf16", "parallelism.cp=1"])
    result = audit(spec, ARGS_DUMP.format(lr=spec.training.optimizer.lr), [])
    assert result["passed"] and {c["key"] for c in result["checks"]} >= {"lr", "min_lr", "warmup_steps", "beta2",
                                                                          "global_batch_size", "tp", "precision"}


@pytest.mark.skipif(not (CORPUS / "megatron_5.log").exists(), reason="corpus not present")
def test_a_run_that_dies_raises_with_the_log_tail(tmp_path, monkeypatch):
    backend = backends.load("megatron")
    spec, plan = spec_plan(["framework=megatron", "platform=nvidia", "platform.gpu=h100", "model=llama"])
    replay(backend, monkeypatch, (CORPUS / "megatron_5.log").read_text(errors="replace"), exit_code=1)
    with pytest.raises(ExternalFailed, match="exited with code 1") as err:
        backend.run(spec, plan, lambda r: None, tmp_path)
    assert "srun: error" in str(err.value) or "Exited with exit code 1" in str(err.value)


def test_timeout_kills_the_framework(tmp_path, monkeypatch):
    backend = backends.load("torchtitan")
    spec, plan = spec_plan(["framework=torchtitan", "platform=nvidia", "platform.gpu=h100", "model=llama",
                            "framework.timeout_min=0.02"])
    replay(backend, monkeypatch, "starting\n", sleep_s=60)
    with pytest.raises(ExternalFailed, match="timed out"):
        backend.run(spec, plan, lambda r: None, tmp_path)


def test_external_frameworks_refuse_cpu(tmp_path):
    out = run_inprocess(tmp_path, ["framework=megatron", "platform=cpu", "logging.wandb.mode=disabled"])
    assert out.status == "invalid" and "trains on NVIDIA or AMD GPUs" in out.result["error"]


# Llama 3.1's 128,256 rows rounded up to 128 x TP, by hand: 128,256 = 1,002 x 128 = 501 x 256; 250.5 x 512 -> 251 x
# 512 = 128,512; 125.25 x 1,024 -> 126 x 1,024 = 129,024 (Megatron-LM's _vocab_size_with_padding; Megatron-LM
# core_v0.16.1 built the 70B at TP 4 with 70,557,900,800 parameters in bench/rehearse.py, 2026-11-27)
MEGATRON_ROWS = {1: 128_256, 2: 128_256, 4: 128_512, 8: 129_024}


@pytest.mark.parametrize("tp", sorted(MEGATRON_ROWS))
@pytest.mark.parametrize("framework", ["megatron", "primus", "megatron_deepspeed", "nemo"])
def test_the_plan_counts_the_vocabulary_as_the_framework_pads_it(framework, tp):
    spec, plan = spec_plan([f"framework={framework}", "model=llama70b", "platform=nvidia", "platform.gpu=h100",
                            "platform.nodes=8", f"parallelism.tp={tp}", "methodology=identical_config"])
    # NeMo 2 and Megatron-Bridge take the vocab_size tprimat sets as it is (no padding)
    rows = 128_256 if framework == "nemo" else MEGATRON_ROWS[tp]
    assert plan.vocab_size_padded == rows
    assert plan.params_total - 70_553_706_496 == (rows - 128_256) * 8192 * 2  # embedding and output head
    assert spec.model.vocab_pad_multiple == 1  # the spec as written: its identity does not move
    if framework in ("megatron", "megatron_deepspeed"):
        argv = backends.load(framework).launch(spec, plan, Path("launch")).argv
        assert flag_values(argv)["--make-vocab-size-divisible-by"] == "128"


# The job config torchtitan 0.2.2's own ConfigManager made of tprimat's toml launch for Llama 3.1 8B,
# identical_config, 8 x H100 (its to_dict, the sections the audit reads; bench/rehearse.py --framework
# torchtitan_toml, 2026-11-28): what job.save_config_file writes
TORCHTITAN_022_SAVED = {
    "optimizer": {"name": "AdamW", "lr": 0.0003, "beta1": 0.9, "beta2": 0.95, "eps": 1e-08, "weight_decay": 0.1},
    "lr_scheduler": {"warmup_steps": 10, "min_lr_factor": 0.1, "decay_type": "cosine"},
    "training": {"local_batch_size": 1, "global_batch_size": 128, "seq_len": 8192,
                 "mixed_precision_param": "bfloat16", "steps": 50},
    "parallelism": {"tensor_parallel_degree": 1, "pipeline_parallel_degree": 1, "context_parallel_degree": 1},
    # its ConfigManager's activation_checkpoint for the same launch (read 2026-11-29, torchtitan 0.2.2)
    "activation_checkpoint": {"mode": "selective", "selective_ac_option": "op",
                              "per_op_sac_force_recompute_mm_shapes_by_fqns": ["moe.router.gate"], "early_stop": False,
                              "memory_budget": 0.5, "visualize_memory_budget_pareto": False,
                              "preserve_rng_state": True, "determinism_check": "default", "debug": False},
    "job": {"save_config_file": "tprimat_effective_config.json"}}


def test_torchtitan_toml_launch_saves_its_job_config_and_the_audit_checks_every_setting(tmp_path):
    spec, plan = spec_plan(["framework=torchtitan", "framework.flavour=toml", "model=llama", "platform=nvidia",
                            "platform.gpu=h100", "methodology=identical_config"])
    backend = backends.load("torchtitan")
    values = flag_values(backend.launch(spec, plan, tmp_path).argv)
    assert values["--job.save_config_file"] == TORCHTITAN_022_SAVED["job"]["save_config_file"]
    assert values["--job.dump_folder"] == str(tmp_path / "torchtitan")
    (tmp_path / "torchtitan").mkdir()
    saved = tmp_path / "torchtitan" / values["--job.save_config_file"]
    saved.write_text(json.dumps(TORCHTITAN_022_SAVED))
    result = audit(spec, "", [], backend.effective_settings(spec, tmp_path))
    assert result["passed"] and result["unchecked"] == [] and len(result["checks"]) == 14
    doctored = json.loads(json.dumps(TORCHTITAN_022_SAVED))
    doctored["optimizer"]["lr"] = 0.008  # the flavour's own lr, had the override been dropped
    saved.write_text(json.dumps(doctored))
    failed = audit(spec, "", [], backend.effective_settings(spec, tmp_path))
    assert not failed["passed"] and [c["key"] for c in failed["checks"] if not c["ok"]] == ["lr", "min_lr"]
    doctored = json.loads(json.dumps(TORCHTITAN_022_SAVED))
    doctored["activation_checkpoint"]["mode"] = "none"  # a recompute the TOML's section would have dropped
    saved.write_text(json.dumps(doctored))
    failed = audit(spec, "", [], backend.effective_settings(spec, tmp_path))
    assert [c["key"] for c in failed["checks"] if not c["ok"]] == ["recompute"]


@pytest.mark.parametrize("granularity,requested,ok", [("None", "none", True), ("None", "full", False),
                                                     ("full", "full", True), ("selective", "full", False)])
def test_audit_reads_megatrons_recompute_back(granularity, requested, ok):
    """Megatron-LM's (and Primus's, Megatron-DeepSpeed's) ``recompute_granularity`` as its arguments dump prints it:
    None when nothing is recomputed; a recompute the spec asked for and the framework dropped fails by key."""
    spec, _ = spec_plan(["framework=megatron", "platform=nvidia", "platform.gpu=h100", "model=llama",
                         "training.micro_batch_size=2", "training.precision=bf16", "parallelism.cp=1",
                         f"training.activation_checkpointing={requested}"])
    dump = ARGS_DUMP.format(lr=spec.training.optimizer.lr).replace(
        "  seq_length", f"  recompute_granularity ........................... {granularity}\n  seq_length")
    result = audit(spec, dump, [])
    (check,) = [c for c in result["checks"] if c["key"] == "recompute"]
    assert check["ok"] is ok and result["passed"] is ok
    assert check["effective"] == ("none" if granularity == "None" else granularity)


def test_audit_reads_torchtitans_saved_recompute_from_its_own_config_classes():
    """torchtitan 0.3 saves ``activation_checkpoint`` as the chosen class's Config fields (no class name): each of
    its own FullAC, SelectiveAC and MemoryBudgetAC configs, saved by its own ``to_dict``, reads back as its mode."""
    ac = pytest.importorskip("torchtitan.distributed.activation_checkpoint")
    from tprimat.backends.external.audit import saved_recompute

    for cls, mode in ((ac.FullAC, "full"), (ac.SelectiveAC, "selective"), (ac.MemoryBudgetAC, "memory_budget")):
        assert saved_recompute({"activation_checkpoint": cls.Config().to_dict()}) == mode
    assert saved_recompute({"activation_checkpoint": None}) == "none" and saved_recompute({}) is None
