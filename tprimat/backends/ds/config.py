"""The DeepSpeed config JSON a run spec decides, shared by framework=deepspeed (tprimat's own engine loop) and
framework=megatron_deepspeed (Megatron-DeepSpeed's): batch sizes, accumulation, clipping, precision, ZeRO. No
torch or deepspeed import: dry runs write it on any machine."""

from __future__ import annotations

from tprimat.spec.keeps import DEEPSPEED_REDUCE_BUCKET_ELEMENTS
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf


def engine_config(spec: TprimatConf, plan: Plan) -> dict:
    tr = spec.training
    config = {
        "train_batch_size": tr.global_batch_size,
        "train_micro_batch_size_per_gpu": tr.micro_batch_size,
        "gradient_accumulation_steps": plan.grad_accum_steps,
        "gradient_clipping": tr.optimizer.grad_clip,
        "bf16": {"enabled": tr.precision == "bf16"},
        "zero_optimization": {"stage": spec.parallelism.zero_stage},
        "steps_per_print": 10**9,  # the training loop logs every step itself
        "wall_clock_breakdown": False,
    }
    if spec.parallelism.zero_stage:  # DeepSpeed's default, stated: the memory estimate counts this bucket
        config["zero_optimization"]["reduce_bucket_size"] = DEEPSPEED_REDUCE_BUCKET_ELEMENTS
    if spec.parallelism.zero_stage == 3:
        config["zero_optimization"].update({"stage3_param_persistence_threshold": 0, "contiguous_gradients": True})
    return config
