"""Megatron-DeepSpeed ``pretrain_gpt.py`` under torchrun with a generated DeepSpeed config (ZeRO stage, batch
sizes, precision) and every hyperparameter on its command line, audited like Megatron-LM (it prints the same
arguments dump and iteration lines, with its own ``samples per second`` and ``TFLOPs`` fields).

Megatron-DeepSpeed trains only from a pre-tokenised dataset (no mock data): tprimat writes a synthetic one in
Megatron's indexed format next to the launch files (``indexed_dataset``) and passes it with the null tokenizer.
Argument names are those of its ``megatron/arguments.py``; what it cannot express is refused by name:
context parallelism (it has DeepSpeed-Ulysses instead), fp8, and a QKV-only bias (its linear biases are all or
none, so Qwen 2.5 is not translatable).
"""

from __future__ import annotations

import json
from pathlib import Path

from tprimat.backends.base import RunOutcome, StepSink
from tprimat.backends.ds.config import engine_config
from tprimat.backends.external import indexed_dataset
from tprimat.backends.external.base import ExternalBackend, Launch, torchrun
from tprimat.backends.external.megatron import as_cli, full_recompute
from tprimat.spec.frameworks import vocab_multiple
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf, head_dim_of

DATA_PREFIX = "data/synthetic_text_document"  # under the run's launch directory
DS_CONFIG = "deepspeed_config.json"


def settings(spec: TprimatConf, plan: Plan, launch_dir: Path) -> dict:
    """Every Megatron-DeepSpeed argument the spec decides (argparse dest names); True = a flag, None = omitted."""
    m, tr, opt, par = spec.model, spec.training, spec.training.optimizer, spec.parallelism
    recompute = {"full": {**full_recompute(tr.recompute_num_layers),
                          "deepspeed_activation_checkpointing": True},
                 "selective": {"recompute_granularity": "selective"}}.get(tr.activation_checkpointing, {})
    return {
        "num_layers": m.num_layers, "hidden_size": m.hidden_size, "ffn_hidden_size": m.ffn_hidden_size,
        "num_attention_heads": m.num_attention_heads, "num_key_value_heads": m.num_kv_heads,
        "kv_channels": head_dim_of(m), "seq_length": tr.seq_length,
        "max_position_embeddings": max(m.max_position_embeddings, tr.seq_length),
        "use_rotary_position_embeddings": True, "rotary_position_embeddings_theta": int(m.rope_theta),
        "normalization": "rmsnorm", "layernorm_epsilon": m.rms_norm_eps, "swiglu": True, "disable_bias_linear": True,
        "untie_embeddings_and_output_weights": None if m.tie_embeddings else True,
        "no_query_key_layer_scaling": True, "attention_dropout": 0.0, "hidden_dropout": 0.0, "init_method_std": 0.02,
        "micro_batch_size": tr.micro_batch_size, "global_batch_size": tr.global_batch_size,
        "train_iters": tr.max_steps, "optimizer": "adam", "lr": opt.lr, "min_lr": opt.min_lr,
        "lr_warmup_iters": opt.warmup_steps, "lr_decay_style": "cosine", "lr_decay_iters": tr.max_steps,
        "weight_decay": opt.weight_decay, "adam_beta1": opt.beta1, "adam_beta2": opt.beta2, "adam_eps": opt.eps,
        "clip_grad": opt.grad_clip, "tensor_model_parallel_size": par.tp, "pipeline_model_parallel_size": par.pp,
        "no_pipeline_parallel": True if par.pp == 1 else None,  # else its DeepSpeed pipeline engine
        "sequence_parallel": True if par.sequence_parallel else None,
        "bf16": True if tr.precision == "bf16" else None, **recompute,
        "data_path": str(launch_dir / DATA_PREFIX), "data_impl": "mmap", "split": "100,0,0",
        # the null tokenizer adds one id (its end of document) to --vocab-size: the model's vocabulary is the spec's
        # (padded by Megatron-DeepSpeed to make_vocab_size_divisible_by x TP: the multiple tprimat plans with)
        "tokenizer_type": "NullTokenizer", "vocab_size": m.vocab_size - 1,
        "make_vocab_size_divisible_by": vocab_multiple(spec) // par.tp,
        "seed": tr.seed, "log_interval": 1, "eval_iters": 0, "eval_interval": tr.max_steps + 1,
        "distributed_backend": "nccl", "deepspeed": True, "zero_stage": par.zero_stage,
        # its layers refuse gradient_accumulation_fusion (the default) without apex's fused_weight_gradient_mlp_cuda,
        # and its backward never calls that kernel (commented out in megatron/core/tensor_parallel/layers.py): off
        "no_gradient_accumulation_fusion": True,
    }


def deepspeed_config(spec: TprimatConf, plan: Plan) -> dict:
    """The engine's config: batch sizes, accumulation, clipping, precision and ZeRO; Megatron-DeepSpeed builds its
    optimizer and schedule from its own arguments, so the config names none."""
    return engine_config(spec, plan)


class MegatronDeepSpeedBackend(ExternalBackend):
    name = "megatron_deepspeed"
    log_format = "megatron"
    path_env = "MEGATRON_DEEPSPEED_PATH"

    def launch(self, spec: TprimatConf, plan: Plan, launch_dir: Path) -> Launch:
        root = self.framework_path(spec) or Path("$MEGATRON_DEEPSPEED_PATH")
        argv = [*torchrun(spec), str(root / "pretrain_gpt.py"), *as_cli(settings(spec, plan, launch_dir)),
                "--deepspeed_config", str(launch_dir / DS_CONFIG),  # DeepSpeed's own flag: an underscore, no alias
                *spec.framework.extra_args]
        return Launch(argv, env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, cwd=str(root),
                      files={DS_CONFIG: json.dumps(deepspeed_config(spec, plan), indent=2) + "\n"})

    def check(self, spec: TprimatConf, plan: Plan) -> list[str]:
        problems = []
        if plan.cp > 1:
            problems.append(f"parallelism.cp={plan.cp}: framework=megatron_deepspeed has no context parallelism "
                            "(its sequence parallelism is DeepSpeed-Ulysses); use framework=megatron or nemo")
        if spec.training.precision == "fp8":
            problems.append("training.precision=fp8: not wired for framework=megatron_deepspeed (bf16 or fp32)")
        if spec.model.qkv_bias:
            problems.append(f"model.qkv_bias=true (model.name={spec.model.name}): Megatron-DeepSpeed's linear biases "
                            "are all or none (--disable-bias-linear), it has no QKV-only bias; train this model with "
                            "framework=megatron, primus or nemo")
        if spec.model.rope_scaling_factor:
            problems.append(f"model.rope_scaling_factor={spec.model.rope_scaling_factor} (model.name="
                            f"{spec.model.name}): Megatron-DeepSpeed has no RoPE scaling argument, it would train "
                            "unscaled RoPE; set model.rope_scaling_factor=null to train that (the same FLOPs), or use "
                            "framework=megatron, primus or nemo")
        if spec.parallelism.fsdp:
            problems.append("parallelism.fsdp=true: framework=megatron_deepspeed shards with parallelism.zero_stage")
        if plan.pp > 1 and spec.parallelism.zero_stage > 1:
            problems.append(f"parallelism.zero_stage={spec.parallelism.zero_stage} with pp={plan.pp}: DeepSpeed's "
                            "pipeline engine runs ZeRO stage 0 or 1 only")
        return problems + super().check(spec, plan)

    def run(self, spec: TprimatConf, plan: Plan, on_step: StepSink, run_dir=None) -> RunOutcome:
        """Write the synthetic dataset the command names, then run as every external framework runs."""
        launch_dir = (Path(run_dir or ".") / "launch").resolve()
        indexed_dataset.write(launch_dir / DATA_PREFIX, spec.model.vocab_size, spec.training.seq_length + 1,
                              seed=spec.training.seed)
        return super().run(spec, plan, on_step, run_dir)


BACKEND = MegatronDeepSpeedBackend()
