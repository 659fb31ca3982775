"""What each training stack runs for attention and recompute: facts as data, each with its source.

Attention is not a matmul at the device's matmul ceiling: a fused kernel reaches what its authors measured. The
H100 figures are FlashAttention-3's own benchmark of the kernels the stacks call (BF16, head dim 128, sequences
of 512 to 16k tokens, TFLOP/s with causal halving and a backward of 2.5 forwards, the convention
``tprimat.backends.native.opcount`` counts in). A kernel call runs at the figure for the sequence it sees
(between the measured lengths, linear in log2 of the length; outside them, the nearest): the whole sequence, or
under context parallelism seq/cp, as Transformer Engine's ring (``AttnFuncWithCPAndKVP2P``: one kernel call per
ring step on this rank's seq/cp queries) and torchtitan's ring attention split it; under all-to-all context
parallelism a call holds the whole sequence. On another device a kernel is taken to keep its fraction of the measured
matmul ceiling, but where its authors measured it on the device itself: cuDNN on B200, GB200 and GB300
(``CUDNN_ON_DEVICE``, BF16 and FP8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tprimat.spec.hardware import MAMF_BF16_TFLOPS

FA3_PAPER = ("Shah et al. 2024, FlashAttention-3 (arXiv 2407.08608) figs. 5-6, H100 80GB SXM5, BF16, head dim 128, "
             "seq 512 to 16k (16k tokens a batch): forward causal; backward non-causal (the paper shows no causal "
             "backward)")


@dataclass(frozen=True)
class AttentionKernel:
    name: str
    by_seq: tuple  # ((sequence length, forward TFLOP/s, backward TFLOP/s) on the device measured, ...), shortest first
    source: str

    def tflops(self, seq: float) -> tuple[float, float]:
        """(forward, backward) TFLOP/s on the device measured for a call over ``seq`` tokens: linear in log2(seq)
        between the measured lengths, the nearest one outside them."""
        points = self.by_seq
        if seq <= points[0][0] or len(points) == 1:
            return points[0][1], points[0][2]
        for (s0, f0, b0), (s1, f1, b1) in zip(points, points[1:]):
            if seq <= s1:
                w = (math.log2(seq) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
                return f0 + w * (f1 - f0), b0 + w * (b1 - b0)
        return points[-1][1], points[-1][2]


KERNELS = {  # FA3_PAPER's bars, forward (fig. 5) and backward (fig. 6) at each sequence length
    "flash2": AttentionKernel("FlashAttention-2 (PyTorch SDPA's flash backend)",
                              ((512, 191.0, 214.0), (1024, 260.0, 260.0), (2048, 298.0, 291.0), (4096, 319.0, 310.0),
                               (8192, 333.0, 318.0), (16384, 335.0, 322.0)), FA3_PAPER),
    "cudnn": AttentionKernel("cuDNN fused attention (Transformer Engine's default on Hopper)",
                             ((512, 315.0, 305.0), (1024, 410.0, 408.0), (2048, 484.0, 465.0), (4096, 518.0, 499.0),
                              (8192, 529.0, 518.0), (16384, 539.0, 516.0)), FA3_PAPER),
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


# cuDNN's fused attention measured on Blackwell itself by NVIDIA's cuDNN team (cudnn-frontend's SDPA training
# benchmark: causal, batch 1, 128 query and 8 KV heads, head dim 128, FP8 and BF16 side by side in one run; TFLOP/s
# with causal halving and a backward of 2.5 forwards, the convention above). B200 and GB300 ran cuDNN 9.13.1 in NGC
# PyTorch 25.09 (MLPerf Training v5.1's containers), GB200 cuDNN 9.17.0 in 25.11. FP8 is Transformer Engine's FP8
# dot-product attention (training.fp8.attention) where the device has a figure of its own.
CUDNN_FRONTEND = ("NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/artifacts/"
                  "sdpa_fp8_benchmark_results_NVIDIA_{gpu}.csv and sample_{part}_fp8_run.txt ({versions}): cuDNN SDPA, "
                  "causal, batch 1, 128 query / 8 KV heads, head dim 128, FP8 and BF16 in one run")


def measured(gpu: str, part: str, versions: str, bf16: tuple, fp8: tuple) -> dict:
    source = CUDNN_FRONTEND.format(gpu=gpu, part=part, versions=versions)
    return {"bf16": AttentionKernel(f"cuDNN fused attention, BF16, measured on {gpu}", bf16, source),
            "fp8": AttentionKernel(f"cuDNN fused attention, FP8, measured on {gpu}", fp8, source)}


SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
CUDNN_ON_DEVICE = {  # (forward, backward) TFLOP/s at each of SEQS, as each file states them, rounded to 0.1
    "b200": measured("B200", "b200", "cuDNN 9.13.1, NGC PyTorch 25.09", tuple(zip(SEQS, (
        244.1, 561.3, 907.5, 1141.1, 1384.2, 1475.3, 1514.8, 1493.8, 1421.9), (
        200.6, 376.9, 545.1, 832.9, 994.9, 1151.7, 1180.3, 1235.9, 1127.7))), tuple(zip(SEQS, (
            196.1, 516.2, 974.2, 1230.7, 1502.1, 1692.4, 1781.4, 1815.2, 1829.6), (
            169.9, 376.8, 556.0, 972.3, 1254.7, 1469.5, 1582.2, 1626.6, 1616.1)))),
    "gb200": measured("GB200", "gb200", "cuDNN 9.17.0, NGC PyTorch 25.11", tuple(zip(SEQS, (
        408.0, 733.0, 1068.0, 1378.0, 1583.0, 1673.0, 1687.0, 1592.0, 1471.0), (
        328.0, 528.0, 656.0, 1054.0, 1211.0, 1303.0, 1311.0, 1247.0, 1188.0))), tuple(zip(SEQS, (
            470.0, 870.0, 1324.0, 1663.0, 1894.0, 2033.0, 2124.0, 2181.0, 2172.0), (
            301.0, 547.0, 671.0, 1088.0, 1263.0, 1373.0, 1429.0, 1450.0, 1440.0)))),
    "gb300": measured("GB300", "gb300", "cuDNN 9.13.1, NGC PyTorch 25.09", tuple(zip(SEQS, (
        175.6, 492.2, 999.8, 1445.2, 1716.1, 1835.9, 1883.5, 1831.9, 1739.7), (
        174.5, 365.7, 544.5, 941.9, 1150.5, 1290.8, 1350.1, 1398.7, 1347.2))), tuple(zip(SEQS, (
            137.0, 425.5, 1030.2, 1675.1, 2073.6, 2266.6, 2351.8, 2386.4, 2376.1), (
            146.2, 368.6, 573.3, 1156.2, 1513.8, 1745.9, 1880.4, 1953.1, 1967.2)))),
}
# A part with no figure of its own: its architecture's, at the same fraction of the matmul ceiling (B300 is
# Blackwell Ultra, GB300's GPU in an HGX board at a lower power)
CUDNN_SAME_ARCHITECTURE = {"b300": "gb300"}
FP8_ATTENTION_FRAMEWORKS = ("nemo",)  # NeMo 2's and Megatron-Bridge's mixed precision take fp8_dot_product_attention


# Transformer Engine's FP8 linears quantize their operands in kernels of their own, beside the GEMMs (its
# module/linear.py and module/layernorm_linear.py): a Linear whose input comes from an unfused operation (the
# attention's output projection, the MLP's down projection) reads that input in BF16 and writes it in FP8 row-wise
# for the GEMM and column-wise for the weight's gradient (``columnwise=backward_needs_input``: only where the weight
# requires grad); a LayerNormLinear (QKV, the MLP's up and gate) writes its norm's output in FP8 directly
# (``with_quantized_norm``), no more bytes than BF16; the backward quantizes every linear's output gradient,
# row-wise for the data gradient and column-wise for the weight's ("dgrad GEMM requires row-wise usage, wgrad GEMM
# requires column-wise usage"; row-wise alone when the weight is frozen). Megatron-LM, NeMo and Primus build their
# layers from Transformer Engine; the torchao float8 of torchtitan and the native trainer is not modelled here.
# On Blackwell (sm_100 and later) tensor-scaled FP8 GEMMs take any layout, so no column-wise copy is made
# (common/transformer_engine.cpp ``nvte_is_non_tn_fp8_gemm_supported``; csrc/quantizer.cpp: ``with_transpose =
# columnwise_usage && !non_tn``); Hopper's need it. ROCm's Transformer Engine (Primus on CDNA) is not read here: taken as
# Hopper's. Under sequence parallelism the gathered tensors' column-wise copies are made after the FP8 all-gather, over
# the whole sequence (module/base.py ``grad_output_preprocess``, layernorm_linear.py, distributed.py ``_all_gather_fp8``).
# The fused norm (``kernels.TE_FP8_NORM``): under delayed scaling the norm kernel writes FP8 itself and, where a
# column-wise copy is needed (no sequence parallelism: its all-gather takes row-wise data alone), transposes it
# (common/normalization/rmsnorm/rmsnorm_api.cpp and layernorm/ln_api.cpp: ``nvte_transpose`` of the FP8 output); under
# current scaling it writes BF16 with the amax (csrc/extensions/normalization.cpp ``FUSED_NORM_AMAX_FP8``) and
# ``quantize_with_amax`` casts that. A LoRA-adapted LayerNormLinear returns its norm's BF16 output to the adapter
# (``return_layernorm_output``, set by Megatron-Bridge's and NeMo's peft/utils.py), which turns the fused path off
# (layernorm_linear.py ``with_quantized_norm``): its norm writes BF16 and is cast after, as an unfused input.
# Current scaling (``kernels.TE_CURRENT_SCALING``; Megatron-core's --fp8-recipe tensorwise, TE's Float8CurrentScaling,
# what tprimat's launches run for training.fp8.recipe=current or tensorwise): every other cast computes its amax first
# (csrc/quantizer.cpp ``Float8CurrentScalingQuantizer::quantize_impl``: ``nvte_compute_amax_with_config``, then the
# cast), one more BF16 read. Its amax all-reduce over the tensor-parallel group under sequence parallelism (a blocking
# collective of one value, per gathered cast) is not modelled: no sourced latency for it.
TE_FP8_NORM = ("Transformer Engine common/normalization/rmsnorm/rmsnorm_api.cpp and layernorm/ln_api.cpp (the FP8 "
               "output transposed where column-wise data is needed), csrc/extensions/normalization.cpp "
               "(FUSED_NORM_AMAX_FP8 under current scaling); a LoRA-adapted norm returns its BF16 output "
               "(return_layernorm_output: Megatron-Bridge's and NeMo's peft/utils.py), cast after")
TE_CURRENT_SCALING = ("Transformer Engine csrc/quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl (the amax "
                      "computed over the input before each cast)")
TE_FP8_FRAMEWORKS = ("megatron", "nemo", "primus")
TE_FP8_NO_TRANSPOSE = ("Blackwell",)
TE_FP8_SOURCE = ("Transformer Engine module/linear.py (input and grad_output quantizers' row-/column-wise usage), "
                 "module/layernorm_linear.py (with_quantized_norm) and transformer_engine.cpp "
                 "(nvte_is_non_tn_fp8_gemm_supported: no transposed copies on Blackwell)")

# torchtitan's selective recompute per op ("op" SAC, torchtitan/distributed/activation_checkpoint.py and, in
# 2024, torchtitan/parallelisms/parallelize_llama.py ``_save_list``): the outputs of matmuls are saved except
# every second one, attention's and the reductions' outputs are saved, every other operation is recomputed.
# Megatron-style selective recompute (Korthikanti et al. 2022) recomputes the core attention only; tprimat's
# native trainer and DeepSpeed's checkpoint every k-th layer whole.
# Whether a stack's gradient traffic runs beside the backward (on a stream of its own) or after it. The DeepSpeed
# engine (framework=deepspeed and megatron_deepspeed, and the Transformers Trainer under ZeRO) overlaps it only under
# zero_optimization.overlap_comm, which DeepSpeed turns on by default at ZeRO stage 3 alone (runtime/zero/config.py,
# overlap_comm_valid) and tprimat's engine config leaves unset; below it the engine reduces once the backward is done
# (runtime/engine.py: _backward_epilogue, allreduce_gradients; DeepSpeed 0.19.8). Every other stack overlaps it: torch
# DDP's bucket hooks, FSDP2's reduce-scatter, Megatron-core's overlap_grad_reduce (passed by tprimat's Megatron-LM
# and Primus launches, set by NeMo's and Megatron-Bridge's recipes).
DEEPSPEED_ENGINE = ("deepspeed", "megatron_deepspeed")


def gradients_overlap(framework: str, zero_stage: int) -> bool:
    engine = framework in DEEPSPEED_ENGINE or (framework == "transformers" and zero_stage > 0)
    return not engine or zero_stage == 3


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
