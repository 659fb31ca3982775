"""AMD Primus: an experiment YAML whose overrides set every hyperparameter, run by examples/run_pretrain.sh."""

from __future__ import annotations

import json
from pathlib import Path

from tprimat.backends.external.base import ExternalBackend, Launch, rendezvous_env
from tprimat.backends.external.megatron import megatron_settings
from tprimat.config.schema import TprimatConf
from tprimat.plan import Plan

# Primus model configs (examples/megatron/configs); overridable with framework.recipe.
MODEL_YAML = {"llama": "llama3.1_8B-pretrain.yaml", "llama70b": "llama3.1_70B-pretrain.yaml",
              "qwen": "qwen2.5_7B-pretrain.yaml", "mistral": "mistral_7B-pretrain.yaml"}
FAMILY_YAML = {"llama": "llama3.1_8B-pretrain.yaml", "qwen2": "qwen2.5_7B-pretrain.yaml",
               "mistral": "mistral_7B-pretrain.yaml"}
NOT_PRIMUS_OVERRIDES = {"distributed_backend", "tokenizer_type"}  # set by Primus itself


def experiment(spec: TprimatConf, plan: Plan, workspace: str) -> dict:
    overrides = {k: v for k, v in megatron_settings(spec, plan).items()
                 if v is not None and k not in NOT_PRIMUS_OVERRIDES}
    overrides.setdefault("fp8", None)  # Primus merges keys silently: state "no fp8" instead of inheriting it
    if spec.training.precision == "fp8":
        overrides["fp8"] = "hybrid"
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
        # JSON is YAML: the experiment file is written as JSON so that no value is re-interpreted.
        return Launch(["bash", "examples/run_pretrain.sh", *spec.framework.extra_args], env=env, cwd=str(root),
                      files={"experiment.yaml": json.dumps(exp, indent=2) + "\n"})


BACKEND = PrimusBackend()
