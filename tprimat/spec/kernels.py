"""What each training stack runs for attention and recompute: facts as data, each with its source.

Attention is not a matmul at the device's matmul ceiling: a fused kernel reaches what its authors measured. The
H100 figures are FlashAttention-3's own benchmark of the kernels the stacks call (BF16, head dim 128, seq 8k,
TFLOP/s with causal halving and a backward of 2.5 forwards, the convention ``tprimat.backends.native.opcount``
counts in). On another device a kernel is taken to keep its fraction of the measured matmul ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass

from tprimat.spec.hardware import MAMF_BF16_TFLOPS

FA3_PAPER = ("Shah et al. 2024, FlashAttention-3 (arXiv 2407.08608) figs. 5-6, H100 80GB SXM5, BF16, head dim 128, "
             "seq 8k: forward causal; backward non-causal (the paper shows no causal backward)")


@dataclass(frozen=True)
class AttentionKernel:
    name: str
    fwd_tflops_h100: float
    bwd_tflops_h100: float
    source: str


KERNELS = {
    "flash2": AttentionKernel("FlashAttention-2 (PyTorch SDPA's flash backend)", 333.0, 318.0, FA3_PAPER),
    "cudnn": AttentionKernel("cuDNN fused attention (Transformer Engine's default on Hopper)", 529.0, 518.0, FA3_PAPER),
}
# The kernel each stack calls for causal BF16 attention on a GPU. torchtitan, Hugging Face, DeepSpeed's models
# and tprimat's native trainer call torch's scaled_dot_product_attention, whose flash backend is FlashAttention-2
# (torch/nn/attention, torch 2.2 and later); Megatron-LM, NeMo and Primus build their layers from Transformer
# Engine, whose DotProductAttention takes cuDNN's fused attention first on Hopper (NVTE_FUSED_ATTN, default on;
# ROCm's Transformer Engine dispatches to its CK/AITER kernels, taken here at the cuDNN kernel's fraction).
STACK_ATTENTION = {"native": "flash2", "torchtitan": "flash2", "hf": "flash2", "deepspeed": "flash2",
                   "megatron": "cudnn", "nemo": "cudnn", "primus": "cudnn"}
H100_MAMF_TFLOPS = MAMF_BF16_TFLOPS["h100"]  # the matmul ceiling of the GPU the kernels above were measured on


def attention_kernel(framework: str) -> AttentionKernel:
    return KERNELS[STACK_ATTENTION.get(framework, "flash2")]


# torchtitan's selective recompute per op ("op" SAC, torchtitan/distributed/activation_checkpoint.py and, in
# 2024, torchtitan/parallelisms/parallelize_llama.py ``_save_list``): the outputs of matmuls are saved except
# every second one, attention's and the reductions' outputs are saved, every other operation is recomputed.
# Megatron-style selective recompute (Korthikanti et al. 2022) recomputes the core attention only; tprimat's
# native trainer and DeepSpeed's checkpoint every k-th layer whole.
OP_SAC_FRAMEWORKS = ("torchtitan",)
OP_SAC_SOURCE = "torchtitan activation_checkpoint.py: save every other mm and attention, recompute the rest"
# Power caps are not modelled. How much training throughput a GPU keeps under a power cap is a measurement, and no
# published one of LLM training throughput against the cap on the GPUs the table holds was found (2026-11-27): a
# first-order law (clock ~ cube root of the power share) was tried and removed. A spec with
# ``platform.power_limit_w`` below the TDP is projected as the uncapped device, and says so.
POWER_CAP_NOTE = ("a power cap below the TDP is not modelled (no published measurement of training throughput "
                  "against the cap): projected as the uncapped device")


def power_capped(limit_w: float | None, tdp_w: float) -> bool:
    return limit_w is not None and limit_w < tdp_w
