"""torchtitan's ``torchtitan.train`` under torchrun, every hyperparameter the spec names set explicitly. Two
flavours, because torchtitan changed its configuration surface:

- ``registry`` (torchtitan >= 0.3): ``--module M --config F`` names a Python function that returns a
  ``Trainer.Config``. tprimat generates such a module (``launch/tprimat_torchtitan.py``): it starts from
  torchtitan's own function for the model (``llama3_8b``, ...) and sets every value on the config object;
  torchtitan saves the config it finally ran with (``debug.save_config_file``), which the audit reads.
- ``toml`` (torchtitan 0.2.1 and 0.2.2): a model TOML from the checkout (``--job.config_file``) plus command-line
  overrides; torchtitan saves the job config it ran with (``job.save_config_file``, new in 0.2.1: 0.2.0 refuses
  the flag by name), which the audit reads (rehearsed with torchtitan 0.2.2's own ConfigManager:
  bench/rehearse.py --framework torchtitan_toml).
"""

from __future__ import annotations

import json
import os
import pprint
from pathlib import Path

from tprimat.backends.external.audit import FLOAT8_CONVERTER, torchtitan_job_config, torchtitan_saved_config
from tprimat.backends.external.base import ExternalBackend, Launch, torchrun
from tprimat.spec.compat import TE_RECIPES
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf

FLAVOURS = ("registry", "toml")
TOML = {"llama": "torchtitan/models/llama3/train_configs/llama3_8b.toml",
        "llama70b": "torchtitan/models/llama3/train_configs/llama3_70b.toml",
        "llama_tiny": "torchtitan/models/llama3/train_configs/debug_model.toml"}
REGISTRY = {"llama": "llama3:llama3_8b", "llama70b": "llama3:llama3_70b", "llama_tiny": "llama3:llama3_debugmodel"}
# The shape of each registry flavour tprimat names (torchtitan 0.3.0, torchtitan/models/llama3/__init__.py: _8b,
# _70b, _debugmodel; tests/test_external.py reads them back from torchtitan's own config objects). torchtitan takes
# no dimension on its command line: the generated module passes a smaller layer count by keeping the flavour's first
# layers, and any other dimension that differs from the spec is refused by key.
FLAVOUR_SHAPE = {
    "llama3:llama3_8b": {"hidden_size": 4096, "num_layers": 32, "num_attention_heads": 32, "num_kv_heads": 8,
                         "ffn_hidden_size": 14336, "vocab_size": 128256, "rope_theta": 500000.0,
                         "rope_scaling_factor": 8.0},
    "llama3:llama3_70b": {"hidden_size": 8192, "num_layers": 80, "num_attention_heads": 64, "num_kv_heads": 8,
                          "ffn_hidden_size": 28672, "vocab_size": 128256, "rope_theta": 500000.0,
                          "rope_scaling_factor": 8.0},
    "llama3:llama3_debugmodel": {"hidden_size": 256, "num_layers": 6, "num_attention_heads": 16, "num_kv_heads": 16,
                                 "ffn_hidden_size": 768, "vocab_size": 2048, "rope_theta": 500000.0,
                                 "rope_scaling_factor": 8.0},
}
PRECISION = {"bf16": "bfloat16", "fp8": "bfloat16", "fp32": "float32"}
MODULE, FUNCTION = "tprimat_torchtitan", "tprimat_config"
SAVED_CONFIG = "tprimat_effective_config.json"  # written by torchtitan into its dump folder


def settings(spec: TprimatConf, plan: Plan) -> dict:
    """Every value the spec names, under torchtitan's own section.key names."""
    tr, opt, par = spec.training, spec.training.optimizer, spec.parallelism
    return {
        "training.steps": tr.max_steps, "training.local_batch_size": tr.micro_batch_size,
        "training.global_batch_size": tr.global_batch_size, "training.seq_len": tr.seq_length,
        "training.max_norm": opt.grad_clip, "training.mixed_precision_param": PRECISION[tr.precision],
        "training.mixed_precision_reduce": "float32",
        "lr_scheduler.warmup_steps": opt.warmup_steps, "lr_scheduler.decay_type": "cosine",
        "lr_scheduler.min_lr_factor": opt.min_lr / opt.lr,
        "parallelism.tensor_parallel_degree": par.tp, "parallelism.pipeline_parallel_degree": par.pp,
        "parallelism.context_parallel_degree": par.cp,
        "parallelism.data_parallel_shard_degree": plan.dp if par.fsdp else 1,
        "parallelism.data_parallel_replicate_degree": 1 if par.fsdp else plan.dp,
        "compile.enable": tr.compile, "metrics.log_freq": 1, "debug.seed": tr.seed,
    }


def spec_shape(spec: TprimatConf) -> dict:
    m = spec.model
    return {"hidden_size": m.hidden_size, "num_layers": m.num_layers, "num_attention_heads": m.num_attention_heads,
            "num_kv_heads": m.num_kv_heads, "ffn_hidden_size": m.ffn_hidden_size, "vocab_size": m.vocab_size,
            "rope_theta": float(m.rope_theta), "rope_scaling_factor": m.rope_scaling_factor}


def shape_problems(spec: TprimatConf, flavour: dict, fewer_layers: bool) -> list[str]:
    """The spec's dimensions torchtitan's flavour cannot take: any that differs (but fewer layers where the
    generated module can keep the flavour's first ones)."""
    want = spec_shape(spec)
    return [f"model.{key}={want[key]}: torchtitan's flavour has {flavour[key]} and takes no {key} on its command line"
            for key in want if want[key] != flavour[key]
            and not (fewer_layers and key == "num_layers" and want[key] < flavour[key])]


def overrides(spec: TprimatConf, plan: Plan) -> list[str]:
    """The ``toml`` flavour's command-line overrides (torchtitan <= 0.2)."""
    opt = spec.training.optimizer
    pairs = [(k, v) for k, v in settings(spec, plan).items() if k != "compile.enable"]
    pairs += [("training.dataset", "c4_test"), ("optimizer.name", "AdamW"), ("optimizer.lr", opt.lr),
              ("optimizer.eps", opt.eps), ("optimizer.weight_decay", opt.weight_decay), ("optimizer.beta1", opt.beta1),
              ("optimizer.beta2", opt.beta2), ("activation_checkpoint.mode", spec.training.activation_checkpointing)]
    argv = [item for key, value in pairs for item in (f"--{key}", str(value))]
    if spec.training.compile:
        argv.append("--compile.enable")
    if spec.training.precision == "fp8":
        # tensorwise is torchtitan's own path without a recipe name (its docs/float8.md; a recipe name rules out
        # float8 all-gather under FSDP); rowwise is named
        argv += ["--model.converters", FLOAT8_CONVERTER]
        if spec.training.fp8.recipe != "tensorwise":
            argv += ["--quantize.linear.float8.recipe_name", spec.training.fp8.recipe]
    return argv


# The generated module's check that torchtitan's own model is the spec's (BASE and SHAPE are the module's)
CARRY = '''def flavour_shape(model):
    """The model torchtitan's flavour builds, read from its own config object."""
    attention = model.layers[0].attention
    return {"hidden_size": model.dim, "num_layers": len(model.layers), "num_attention_heads": attention.n_heads,
            "num_kv_heads": attention.qkv_linear.n_kv_heads, "ffn_hidden_size": model.layers[0].feed_forward.w1.out_features,
            "vocab_size": model.vocab_size, "rope_theta": float(attention.rope.theta),
            "rope_scaling_factor": attention.rope.scaling_factor if attention.rope.scaling == "llama" else None}


def carry_the_spec_model(config):
    """Fewer layers than the flavour's: its first ones; any other difference stops the run, naming the key."""
    model = config.model_spec.model
    found = flavour_shape(model)
    if SHAPE["num_layers"] < found["num_layers"]:
        model.layers = model.layers[:SHAPE["num_layers"]]
    differ = [key for key in SHAPE if SHAPE[key] != flavour_shape(model)[key]]
    if differ:
        raise SystemExit("tprimat: torchtitan's " + BASE + " builds another model: "
                         + ", ".join(f"model.{k}={SHAPE[k]} against {found[k]}" for k in differ))
'''


def config_module(spec: TprimatConf, plan: Plan, dump_folder: Path) -> str:
    """The ``registry`` flavour's generated module (torchtitan >= 0.3)."""
    opt = spec.training.optimizer
    module, function = (spec.framework.recipe or REGISTRY[spec.model.name]).split(":")
    if "." not in module:
        module = f"torchtitan.models.{module}.config_registry"
    values = {**settings(spec, plan), "dataloader.dataset": "c4_test", "checkpoint.enable": False,
              "validator.enable": False, "debug.save_config_file": SAVED_CONFIG}
    ac = {"none": "None", "full": "FullAC.Config()", "selective": "SelectiveAC.Config()"}[
        spec.training.activation_checkpointing]
    return f'''"""Generated by tprimat: torchtitan's {module}.{function}()
with every hyperparameter of the run spec set explicitly.
Run as: python -m torchtitan.train --module {MODULE} --config {FUNCTION}"""

from torchtitan.components.optimizer import default_adamw
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC  # noqa: F401
from {module} import {function} as base

VALUES = {pprint.pformat(values, sort_dicts=False)}
SHAPE = {pprint.pformat(spec_shape(spec), sort_dicts=False)}  # the run spec's model
BASE = {f"{module}.{function}"!r}


{CARRY}

def {FUNCTION}():
    config = base()
    carry_the_spec_model(config)
    config.optimizer = default_adamw(lr={opt.lr!r}, betas=({opt.beta1!r}, {opt.beta2!r}), eps={opt.eps!r},
                                     weight_decay={opt.weight_decay!r})
    config.lr_scheduler.decay_ratio = None  # decay over every step after warm-up, as the spec's schedule
    config.activation_checkpoint = {ac}
    config.dump_folder = {str(dump_folder)!r}
    for dotted, value in VALUES.items():
        section, key = dotted.split(".")
        setattr(getattr(config, section), key, value)
    return config
'''


class TorchtitanBackend(ExternalBackend):
    name = "torchtitan"
    log_format = "torchtitan"
    path_env = "TORCHTITAN_PATH"

    def check(self, spec: TprimatConf, plan: Plan) -> list[str]:
        problems = super().check(spec, plan)
        flavour, recipe = spec.framework.flavour, spec.framework.recipe
        if flavour not in FLAVOURS:
            return problems + [f"framework.flavour={flavour}: torchtitan's flavours are registry (torchtitan >= 0.3) "
                               "and toml (torchtitan 0.2.1 and 0.2.2)"]
        known = TOML if flavour == "toml" else REGISTRY
        if not recipe and spec.model.name not in known:
            what = "a train_configs TOML" if flavour == "toml" else "a config_registry function as module:function"
            problems.append(f"model.name={spec.model.name}: torchtitan ships no config for it; name {what} with "
                            "framework.recipe=...")
        if flavour == "registry" and recipe and recipe.count(":") != 1:
            problems.append(f"framework.recipe={recipe}: the registry flavour takes module:function "
                            "(e.g. llama3:llama3_8b)")
        if not recipe and spec.model.name in REGISTRY:  # the TOMLs are the same flavours, with no module to cut
            problems += shape_problems(spec, FLAVOUR_SHAPE[REGISTRY[spec.model.name]], flavour == "registry")
        if spec.training.precision == "fp8" and spec.training.fp8.recipe in TE_RECIPES:
            problems.append(f"training.fp8.recipe={spec.training.fp8.recipe}, framework.name=torchtitan: torchtitan "
                            "trains fp8 through torchao float8 (recipes tensorwise, rowwise), not Transformer Engine")
        if flavour == "registry" and spec.training.precision == "fp8" and not recipe:
            problems.append("training.precision=fp8: torchtitan >= 0.3 sets float8 in the model's own config "
                            "function; name one with framework.recipe (e.g. llama3:llama3_debugmodel_float8)")
        return problems

    def launch(self, spec: TprimatConf, plan: Plan, launch_dir: Path) -> Launch:
        root = self.framework_path(spec) or Path("$TORCHTITAN_PATH")
        if spec.framework.flavour == "toml":
            toml = spec.framework.recipe or TOML.get(spec.model.name, "")
            argv = [*torchrun(spec), "-m", "torchtitan.train", "--job.config_file", str(root / toml),
                    *overrides(spec, plan), "--job.dump_folder", str(launch_dir / "torchtitan"),
                    "--job.save_config_file", SAVED_CONFIG, *spec.framework.extra_args]
            return Launch(argv, cwd=str(root))
        argv = [*torchrun(spec), "-m", "torchtitan.train", "--module", MODULE, "--config", FUNCTION,
                *spec.framework.extra_args]
        pythonpath = os.pathsep.join(p for p in (str(launch_dir), os.environ.get("PYTHONPATH", "")) if p)
        return Launch(argv, env={"PYTHONPATH": pythonpath}, cwd=str(root),
                      files={f"{MODULE}.py": config_module(spec, plan, launch_dir / "torchtitan")})

    def effective_settings(self, spec: TprimatConf, launch_dir: Path) -> dict:
        """What torchtitan ran with, from the config it saved after applying every override (0.3's
        ``debug.save_config_file``, 0.2's ``job.save_config_file``: the same to_dict, in each release's layout)."""
        path = launch_dir / "torchtitan" / SAVED_CONFIG
        if not path.exists():
            return {}
        if spec.framework.flavour == "toml":
            return torchtitan_job_config(json.loads(path.read_text()))
        found = torchtitan_saved_config(json.loads(path.read_text()))
        # 0.3 converts linears to float8 inside the model's config (Float8LinearConverter), and its saved to_dict keeps
        # no class name: float8 leaves no trace there and the parameters stay bf16, so an fp8 run's precision is not
        # read (unchecked) rather than read as bf16
        return {k: v for k, v in found.items() if k != "precision"} if spec.training.precision == "fp8" else found


BACKEND = TorchtitanBackend()
