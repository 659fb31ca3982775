"""torchtitan's ``torchtitan.train`` under torchrun: a model TOML from its checkout plus command-line overrides
for every hyperparameter the spec names."""

from __future__ import annotations

from pathlib import Path

from tprimat.backends.external.base import ExternalBackend, Launch, torchrun
from tprimat.config.schema import TprimatConf
from tprimat.plan import Plan

TOML = {"llama": "torchtitan/models/llama3/train_configs/llama3_8b.toml",
        "llama70b": "torchtitan/models/llama3/train_configs/llama3_70b.toml",
        "llama_tiny": "torchtitan/models/llama3/train_configs/debug_model.toml"}
PRECISION = {"bf16": "bfloat16", "fp8": "bfloat16", "fp32": "float32"}


def overrides(spec: TprimatConf, plan: Plan) -> list[str]:
    tr, opt, par = spec.training, spec.training.optimizer, spec.parallelism
    pairs = [
        ("training.steps", tr.max_steps), ("training.local_batch_size", tr.micro_batch_size),
        ("training.global_batch_size", tr.global_batch_size), ("training.seq_len", tr.seq_length),
        ("training.max_norm", opt.grad_clip), ("training.mixed_precision_param", PRECISION[tr.precision]),
        ("training.mixed_precision_reduce", "float32"), ("training.dataset", "c4_test"),
        ("optimizer.name", "AdamW"), ("optimizer.lr", opt.lr), ("optimizer.eps", opt.eps),
        ("optimizer.weight_decay", opt.weight_decay), ("optimizer.beta1", opt.beta1), ("optimizer.beta2", opt.beta2),
        ("lr_scheduler.warmup_steps", opt.warmup_steps), ("lr_scheduler.decay_type", "cosine"),
        ("lr_scheduler.min_lr_factor", opt.min_lr / opt.lr),
        ("parallelism.tensor_parallel_degree", par.tp), ("parallelism.pipeline_parallel_degree", par.pp),
        ("parallelism.context_parallel_degree", par.cp),
        ("parallelism.data_parallel_shard_degree", plan.dp if par.fsdp else 1),
        ("parallelism.data_parallel_replicate_degree", 1 if par.fsdp else plan.dp),
        ("activation_checkpoint.mode", tr.activation_checkpointing), ("metrics.log_freq", 1),
        ("debug.seed", tr.seed),
    ]
    argv = [item for key, value in pairs for item in (f"--{key}", str(value))]
    if tr.compile:
        argv.append("--compile.enable")
    if tr.precision == "fp8":
        argv += ["--model.converters", "float8"]
    return argv


class TorchtitanBackend(ExternalBackend):
    name = "torchtitan"
    log_format = "torchtitan"
    path_env = "TORCHTITAN_PATH"

    def check(self, spec: TprimatConf, plan: Plan) -> list[str]:
        problems = super().check(spec, plan)
        if not spec.framework.recipe and spec.model.name not in TOML:
            problems.append(f"model.name={spec.model.name}: torchtitan ships no config for it; name one with "
                            "framework.recipe=<path to a train_configs TOML>")
        return problems

    def launch(self, spec: TprimatConf, plan: Plan, launch_dir: Path) -> Launch:
        root = self.framework_path(spec) or Path("$TORCHTITAN_PATH")
        toml = spec.framework.recipe or TOML.get(spec.model.name, "")
        argv = [*torchrun(spec), "-m", "torchtitan.train", "--job.config_file", str(root / toml),
                *overrides(spec, plan), *spec.framework.extra_args]
        return Launch(argv, cwd=str(root))


BACKEND = TorchtitanBackend()
