"""What each framework runs for each model on each GPU under ``methodology=maximum_performance``: its own published
recipe where one exists, as data with the source, like the hardware table.

A recipe sets run-config keys (``training.precision``, ``parallelism.tp`` ...); a key it does not set falls back to
the platform's ``tuned`` value. Keys: (framework, model name, platform.gpu). Micro batch sizes are left to the
run (the seeds' matrix fixes MBS 1); where a recipe's own micro batch differs its source says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Recipe:
    settings: dict = field(default_factory=dict)  # dotted run-config key -> value
    source: str = ""


NEMO_2407 = ("NVIDIA NeMo docs/source/performance/performance_summary.md (24.07): 8 x H100, Llama 3 8B FP8, TP 1 CP 2, "
             "GBS 128 MBS 1 seq 8192, 12,036 tokens/s/GPU; NeMo's performance scripts set "
             "grad_reduce_in_fp32=False")
MLPERF_H200 = ("mlcommons/training_results_v5.1 HPE XD670 H200 llama31_8b: FP8, CP 2 (the H100 layout of NeMo 24.07); "
               "bf16 gradient reduction as NVIDIA's performance recipes")
BRIDGE_B200 = ("NVIDIA-NeMo/Megatron-Bridge scripts/performance llama3 workload base configs (25.11): "
               "LLAMA3_8B_PRETRAIN_CONFIG_B200_FP8_CS_V1, TP 1 CP 1 DP 8, GBS 128 (MBS 2 there), "
               "grad_reduce_in_fp32=False (set_basic_perf_overrides)")
PRIMUS_MI300X = ("AMD-AGI/Primus examples/megatron/configs/MI300X/llama3.1_8B-pretrain.yaml as run in Primus's own log "
                 "(shared corpus primus_3: TP 1, distributed optimizer, bf16, no recompute, MBS 2 seq 8192 on 8 GPUs)")
MLPERF_MI355X = ("mlcommons/training_results_v5.1 AMD MI355X llama31_8b (Primus/Megatron): FP8, DP 8, TP 1, "
                 "distributed optimizer")
TORCHTITAN_H100 = ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md: 8 x H100 Llama 3.1 8B, FSDP, "
                   "selective activation checkpointing, bf16 (compile and Float8 on top)")
TORCHTITAN_H200 = ("torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md: H200 Llama 3.1 8B, FSDP, "
                   "Float8 (torchao tensorwise), compile")

FP8_CP2_BF16_GRADS = {"training.precision": "fp8", "parallelism.cp": 2, "parallelism.zero_stage": 1,
                      "parallelism.fsdp": False, "training.grad_reduce_in_fp32": False,
                      "training.activation_checkpointing": "none"}
FP8_DP_BF16_GRADS = {"training.precision": "fp8", "parallelism.cp": 1, "parallelism.zero_stage": 1,
                     "parallelism.fsdp": False, "training.grad_reduce_in_fp32": False,
                     "training.activation_checkpointing": "none"}
BF16_DP_DISTOPT = {"training.precision": "bf16", "parallelism.cp": 1, "parallelism.zero_stage": 1,
                   "parallelism.fsdp": False, "training.activation_checkpointing": "none"}
FP8_DP_DISTOPT = {**BF16_DP_DISTOPT, "training.precision": "fp8"}
# Transformer Engine's FP8 scaling each source ran: NeMo 24.07's launcher delayed scaling (fp8_hybrid, an amax
# history); MLPerf v5.1's NVIDIA-derived llama31_8b configs current scaling (config_common.sh FP8_RECIPE="tensorwise",
# HPE's XD670 included); Megatron-Bridge's FP8_CS configs current scaling; AMD's MLPerf train.py delayed (fp8="hybrid",
# an amax history of 4)
DELAYED, CURRENT = {"training.fp8.recipe": "delayed"}, {"training.fp8.recipe": "current"}

RECIPES: dict[tuple[str, str, str], Recipe] = {}
for _fw in ("megatron", "nemo"):
    RECIPES[(_fw, "llama", "h100")] = Recipe({**FP8_CP2_BF16_GRADS, **DELAYED}, NEMO_2407)
    RECIPES[(_fw, "llama", "h200")] = Recipe({**FP8_CP2_BF16_GRADS, **CURRENT}, MLPERF_H200)
    RECIPES[(_fw, "llama", "b200")] = Recipe({**FP8_DP_BF16_GRADS, **CURRENT}, BRIDGE_B200)
for _fw in ("primus", "nemo", "megatron"):
    for _gpu in ("mi300x", "mi325x"):
        RECIPES[(_fw, "llama", _gpu)] = Recipe(BF16_DP_DISTOPT, PRIMUS_MI300X)
    RECIPES[(_fw, "llama", "mi355x")] = Recipe({**FP8_DP_DISTOPT, **DELAYED}, MLPERF_MI355X)
RECIPES[("torchtitan", "llama", "h100")] = Recipe(
    {"training.precision": "bf16", "parallelism.fsdp": True, "training.activation_checkpointing": "selective"},
    TORCHTITAN_H100)
RECIPES[("torchtitan", "llama", "h200")] = Recipe(
    {"training.precision": "fp8", "parallelism.fsdp": True, "training.activation_checkpointing": "selective"},
    TORCHTITAN_H200)
# Qwen 2.5 7B and Mistral 7B: no framework publishes a recipe for them on these GPUs; the Llama 3 8B recipe of the
# same framework and GPU is the nearest published layout (same width class: hidden 3584-4096, 28-32 layers).
for (_fw, _model, _gpu), _recipe in list(RECIPES.items()):
    for _other in ("qwen", "mistral"):
        RECIPES[(_fw, _other, _gpu)] = Recipe(_recipe.settings, f"{_recipe.source} (the Llama 3 8B recipe: none "
                                                                  f"is published for {_other} here)")


def lookup(framework: str, model: str, gpu: Optional[str]) -> Optional[Recipe]:
    return RECIPES.get((framework, model, gpu)) if gpu else None


def tuned(key: str, framework: str, model: str, gpu: Optional[str], fallback):
    """The recipe's value of ``key`` for this framework, model and GPU, else ``fallback`` (the platform's tuned
    value)."""
    recipe = lookup(framework, model, gpu)
    return recipe.settings.get(key, fallback) if recipe else fallback
