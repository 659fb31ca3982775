"""Megatron-LM ``pretrain_gpt.py`` under torchrun, and the settings Primus passes to the same trainer."""

from __future__ import annotations

from pathlib import Path

from tprimat.backends.external.base import ExternalBackend, Launch, torchrun
from tprimat.spec.compat import megatron_fp8_recipe
from tprimat.spec.frameworks import vocab_multiple
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf, all_to_all_cp, head_dim_of, pipeline_split


def full_recompute(layers) -> dict:
    """Megatron's full recompute: every layer, one at a time (uniform, 1), or the first ``layers`` of each pipeline
    stage (block: training.recompute_num_layers)."""
    return {"recompute_granularity": "full", "recompute_method": "block" if layers else "uniform",
            "recompute_num_layers": layers or 1}


def megatron_settings(spec: TprimatConf, plan: Plan) -> dict:
    """Every Megatron-LM argument the spec decides (argparse dest names); True = a flag, None = omitted."""
    m, tr, opt, par = spec.model, spec.training, spec.training.optimizer, spec.parallelism
    head_dim = head_dim_of(m)
    recompute = {"full": full_recompute(tr.recompute_num_layers),
                 "selective": {"recompute_granularity": "selective"}}.get(tr.activation_checkpointing, {})
    return {
        "num_layers": m.num_layers, "hidden_size": m.hidden_size, "ffn_hidden_size": m.ffn_hidden_size,
        "num_attention_heads": m.num_attention_heads, "group_query_attention": True,
        "num_query_groups": m.num_kv_heads, "kv_channels": head_dim, "seq_length": tr.seq_length,
        "max_position_embeddings": max(m.max_position_embeddings, tr.seq_length),
        "position_embedding_type": "rope", "rotary_base": int(m.rope_theta),
        "use_rope_scaling": True if m.rope_scaling_factor else None,
        "rope_scaling_factor": m.rope_scaling_factor, "normalization": "RMSNorm", "norm_epsilon": m.rms_norm_eps,
        "swiglu": True, "disable_bias_linear": True, "add_qkv_bias": True if m.qkv_bias else None,
        "untie_embeddings_and_output_weights": None if m.tie_embeddings else True,
        "attention_dropout": 0.0, "hidden_dropout": 0.0, "init_method_std": 0.02,
        "micro_batch_size": tr.micro_batch_size, "global_batch_size": tr.global_batch_size,
        "train_iters": tr.max_steps, "lr": opt.lr, "min_lr": opt.min_lr, "lr_warmup_iters": opt.warmup_steps,
        "lr_decay_style": "cosine", "lr_decay_iters": tr.max_steps, "weight_decay": opt.weight_decay,
        "adam_beta1": opt.beta1, "adam_beta2": opt.beta2, "adam_eps": opt.eps, "clip_grad": opt.grad_clip,
        "tensor_model_parallel_size": par.tp, "pipeline_model_parallel_size": par.pp,
        "context_parallel_size": par.cp, "sequence_parallel": True if par.sequence_parallel else None,
        # --cp-comm-type (Megatron-LM) / cp_comm_type (Primus's language_model.yaml): p2p, their default, unsaid
        "cp_comm_type": "a2a" if all_to_all_cp(spec) else None,
        **sharding_settings(spec),
        # Megatron's uneven split counts the embedding and the loss as layers, virtual stages included
        "account_for_embedding_in_pipeline_split": True if par.account_for_embedding_in_pipeline_split else None,
        "account_for_loss_in_pipeline_split": True if par.account_for_loss_in_pipeline_split else None,
        "num_layers_per_virtual_pipeline_stage": (m.num_layers + sum(pipeline_split(spec))) // (par.pp * par.vp)
        if par.vp > 1 else None,
        "grad_reduce_in_bf16": None if tr.grad_reduce_in_fp32 or tr.precision == "fp32" else True,
        "bf16": True if tr.precision in ("bf16", "fp8") else None,
        "fp8_format": "hybrid" if tr.precision == "fp8" else None,
        # Transformer Engine's scaling: delayed, or current (Megatron's own name for it: tensorwise)
        "fp8_recipe": megatron_fp8_recipe(spec), **recompute,
        # the null tokenizer adds one id (its end of document) to --vocab-size: the model's vocabulary is the spec's
        # and Megatron pads it to make_vocab_size_divisible_by x TP: the multiple tprimat plans with (vocab_multiple)
        "mock_data": True, "tokenizer_type": "NullTokenizer", "vocab_size": m.vocab_size - 1,
        "make_vocab_size_divisible_by": vocab_multiple(spec) // par.tp, "seed": tr.seed, "log_interval": 1,
        "log_throughput": True,
        "eval_iters": 0, "eval_interval": tr.max_steps + 1, "distributed_backend": "nccl",
    }


def sharding_settings(spec: TprimatConf) -> dict:
    """The data-parallel side: the distributed optimizer (zero_stage >= 1) or Megatron FSDP, and the overlap of their
    traffic with compute: gradients reduced under the backward and parameters gathered under the next forward, as
    Megatron-LM's own Llama 3 example runs (examples/llama/train_llama3_8b_h100_fp8.sh) and NeMo's and Megatron-Bridge's
    recipes set. Both are off by default (Megatron-LM's arguments, Primus's trainer_base.yaml) but under Megatron FSDP,
    which turns them on itself; validate_args takes the gather only with the distributed optimizer or Megatron FSDP,
    and only beside the overlapped reduce."""
    par = spec.parallelism
    sharded = par.zero_stage >= 1 or par.fsdp
    return {
        "use_distributed_optimizer": True if sharded else None,
        "use_megatron_fsdp": True if par.fsdp else None,
        "overlap_grad_reduce": True,
        "overlap_param_gather": True if sharded else None,
        "data_parallel_sharding_strategy": "optim_grads_params" if par.fsdp else None,
        # Megatron-LM's validate_args: "Megatron FSDP only supports fsdp_dtensor checkpoint format" (core_v0.16.1)
        "ckpt_format": "fsdp_dtensor" if par.fsdp else None,
    }


def as_cli(settings: dict) -> list[str]:
    argv = []
    for name, value in settings.items():
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return argv


def launch_env(spec: TprimatConf) -> dict[str, str]:
    """One CUDA connection orders tensor-parallel communication before compute (what Megatron-LM's examples
    set); Megatron FSDP refuses exactly that value ("FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large
    than one", validate_args at core_v0.16.1, met on the first device run): FSDP runs keep the driver's default."""
    return {} if spec.parallelism.fsdp else {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


class MegatronBackend(ExternalBackend):
    name = "megatron"
    log_format = "megatron"
    path_env = "MEGATRON_LM_PATH"

    def launch(self, spec: TprimatConf, plan: Plan, launch_dir: Path) -> Launch:
        root = self.framework_path(spec) or Path("$MEGATRON_LM_PATH")
        argv = [*torchrun(spec), str(root / "pretrain_gpt.py"), *as_cli(megatron_settings(spec, plan)),
                *spec.framework.extra_args]
        return Launch(argv, env=launch_env(spec), cwd=str(root))


BACKEND = MegatronBackend()
