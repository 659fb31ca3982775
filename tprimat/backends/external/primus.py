"""AMD Primus: an experiment YAML whose overrides set every hyperparameter, run by examples/run_pretrain.sh."""

from __future__ import annotations

from pathlib import Path

import yaml

from tprimat.backends.external.base import ExternalBackend, Launch, rendezvous_env
from tprimat.backends.external.megatron import megatron_settings
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf

# Primus's model configs (primus/configs/models/megatron/<name>.yaml); overridable with framework.recipe. Primus
# ships no Mistral 7B config: the Llama 3 8B one with every dimension overridden below is Mistral's architecture.
MODEL_YAML = {"llama": "llama3.1_8B.yaml", "llama70b": "llama3.1_70B.yaml", "qwen": "qwen2.5_7B.yaml",
              "mistral": "llama3_8B.yaml"}
FAMILY_YAML = {"llama": "llama3.1_8B.yaml", "qwen2": "qwen2.5_7B.yaml", "mistral": "llama3_8B.yaml"}
NOT_PRIMUS_OVERRIDES = {"distributed_backend"}  # set by Primus itself
# tokenizer_type is passed (NullTokenizer, vocab_size - 1, as for Megatron-LM): Primus's model presets name the model's
# Hugging Face tokenizer (HuggingFaceTokenizer, Qwen/Qwen2.5-7B), which a mock-data run would still download (gated
# for meta-llama) and whose length, not vocab_size, sizes the embedding (Primus's build_tokenizer pads
# tokenizer.vocab_size), so the model would not be the spec's (found by bench/rehearse.py over Primus v26.5.1's own
# config path, where the build stopped at the tokenizer's download)
# Megatron command-line flags whose config key in Primus's YAML differs (the argparse destination).
FLAG_ONLY = {"disable_bias_linear": ("add_bias_linear", lambda on: not on), "fp8_format": ("fp8", lambda v: v),
             # Primus v26.5.1 pins Megatron-LM d3528a21, whose arguments are generated from TransformerConfig:
             # --norm-epsilon is gone and MegatronArgBuilder dropped norm_epsilon without a word: Qwen 2.5 would have run
             # at Megatron's default, not its 1e-6 (found by bench/rehearse.py, Primus's own config path)
             "norm_epsilon": ("layernorm_epsilon", lambda v: v)}


def experiment(spec: TprimatConf, plan: Plan, workspace: str) -> dict:
    overrides = {}
    for key, value in megatron_settings(spec, plan).items():
        if value is None or key in NOT_PRIMUS_OVERRIDES:
            continue
        name, convert = FLAG_ONLY.get(key, (key, lambda v: v))
        overrides[name] = convert(value)
    overrides.setdefault("fp8", None)  # Primus merges keys silently: state "no fp8" instead of inheriting it
    # and the optimizer: Primus's pre_trainer.yaml turns the distributed optimizer on (v26.5.1), so at
    # parallelism.zero_stage=0 it would shard the optimizer that the plan and the projection hold whole
    overrides.setdefault("use_distributed_optimizer", False)
    model_yaml = spec.framework.recipe or MODEL_YAML.get(spec.model.name) or FAMILY_YAML[spec.model.family]
    return {"work_group": "tprimat", "user_name": "tprimat", "exp_name": f"{spec.model.name}-{spec.framework.name}",
            "workspace": workspace,
            "modules": {"pre_trainer": {"framework": "megatron", "config": "pre_trainer.yaml", "model": model_yaml,
                                        "overrides": overrides}}}


class PrimusBackend(ExternalBackend):
    name = "primus"
    log_format = "primus"
    path_env = "PRIMUS_PATH"

    def launch(self, spec: TprimatConf, plan: Plan, launch_dir: Path) -> Launch:
        root = self.framework_path(spec) or Path("$PRIMUS_PATH")
        exp = experiment(spec, plan, str(launch_dir / "workspace"))
        rdv = rendezvous_env()
        env = {"EXP": str(launch_dir / "experiment.yaml"), "NNODES": str(spec.platform.nodes),
               "NODE_RANK": rdv["NODE_RANK"], "GPUS_PER_NODE": str(spec.platform.devices_per_node),
               "MASTER_ADDR": rdv["MASTER_ADDR"], "MASTER_PORT": rdv["MASTER_PORT"]}
        return Launch(["bash", "examples/run_pretrain.sh", *spec.framework.extra_args], env=env, cwd=str(root),
                      files={"experiment.yaml": experiment_yaml(exp)})


def experiment_yaml(exp: dict) -> str:
    """YAML as Primus's loader (PyYAML's SafeLoader, YAML 1.1) reads it back: PyYAML's own dumper writes 1e-05 as
    1.0e-05. JSON's 1e-05 has no dot, which YAML 1.1 resolves as a string: Primus then handed min_lr and adam_eps
    to Megatron-LM as str and its validate_args failed (found by bench/rehearse.py)."""
    return yaml.safe_dump(exp, sort_keys=False, default_flow_style=False)


BACKEND = PrimusBackend()
