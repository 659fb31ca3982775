"""Every published run in FACTS section 6 that states its layout validates with that layout on the GPU it ran on
(the memory check included): recipes NVIDIA, AMD and PyTorch ran and published must not be refused. Each case is
the row's own figures (GPUs, global / micro batch, seq 8192, layout, precision), nothing chosen by tprimat."""

import pytest

from tprimat.compose import compose
from tprimat.execute.prepare import prepare
from tprimat.spec.build import build_spec
from tprimat.spec.detect import DetectedHardware

PLANNING_HOST = DetectedHardware("cpu", "planning host", 1, 0.0, None)
SEQ = ["training.seq_length=8192", "dry_run=true", "logging.wandb.mode=disabled", "training.max_steps=10",
       "parallelism.tp=1", "parallelism.pp=1", "parallelism.cp=1", "parallelism.fsdp=false", "parallelism.zero_stage=0",
       "training.activation_checkpointing=none", "training.grad_reduce_in_fp32=true"]


def nodes(gpus: int, per_node: int = 8) -> list[str]:
    return [f"platform.devices_per_node={min(gpus, per_node)}", f"platform.nodes={max(1, gpus // per_node)}"]


def batch(gbs: int, mbs: int) -> list[str]:
    return [f"training.global_batch_size={gbs}", f"training.micro_batch_size={mbs}"]


NV_PERF = ["training.precision=fp8", "training.grad_reduce_in_fp32=false"]  # NVIDIA's performance recipes
PUBLISHED = {
    "Megatron-Bridge 25.11 H100 Llama 3 8B FP8 FSDP": [
        "platform=nvidia", "platform.gpu=h100", "framework=megatron", "model=llama", *nodes(8), *batch(128, 1),
        *NV_PERF, "parallelism.fsdp=true"],
    "Megatron-Bridge 26.04 H100 Llama 3 70B FP8 TP4 PP8 VP5": [
        "platform=nvidia", "platform.gpu=h100", "framework=megatron", "model=llama70b", *nodes(64), *batch(256, 1),
        *NV_PERF, "parallelism.tp=4", "parallelism.pp=8", "parallelism.vp=5", "parallelism.zero_stage=1",
        "parallelism.sequence_parallel=true"],
    "NeMo 24.07 H100 Llama 3 8B FP8 CP2": [
        "platform=nvidia", "platform.gpu=h100", "framework=nemo", "model=llama", *nodes(8), *batch(128, 1),
        *NV_PERF, "parallelism.cp=2", "parallelism.zero_stage=1"],
    "NeMo 24.07 H100 Llama 3 70B FP8 TP4 PP4 CP2 VP5": [
        "platform=nvidia", "platform.gpu=h100", "framework=nemo", "model=llama70b", *nodes(64), *batch(128, 1),
        *NV_PERF, "parallelism.tp=4", "parallelism.pp=4", "parallelism.cp=2", "parallelism.vp=5",
        "parallelism.zero_stage=1", "parallelism.sequence_parallel=true"],
    "torchtitan H100 Llama 3.1 8B BF16 FSDP selective AC, local batch 2": [
        "platform=nvidia", "platform.gpu=h100", "framework=torchtitan", "model=llama", *nodes(8), *batch(16, 2),
        "training.precision=bf16", "parallelism.fsdp=true", "training.activation_checkpointing=selective",
        "training.compile=true"],
    "torchtitan H100 Llama 3.1 8B Float8 FSDP selective AC, local batch 2": [
        "platform=nvidia", "platform.gpu=h100", "framework=torchtitan", "model=llama", *nodes(8), *batch(16, 2),
        "training.precision=fp8", "parallelism.fsdp=true", "training.activation_checkpointing=selective",
        "training.compile=true"],
    "torchtitan H200 Llama 3.1 8B Float8 FSDP, 32 GPUs, local batch 2": [
        "platform=nvidia", "platform.gpu=h200", "framework=torchtitan", "model=llama", *nodes(32), *batch(64, 2),
        "training.precision=fp8", "parallelism.fsdp=true", "training.compile=true",
        "training.activation_checkpointing=selective"],  # the row names none: torchtitan's llama3_8b default
    "MLPerf v5.1 H200 Llama 3.1 8B FP8 CP2, 64 GPUs": [
        "platform=nvidia", "platform.gpu=h200", "framework=nemo", "model=llama", *nodes(64), *batch(32, 1),
        *NV_PERF, "parallelism.cp=2", "parallelism.zero_stage=1"],
    "Megatron-Bridge 25.11 B200 Llama 3 8B FP8 DP, MBS 2": [
        "platform=nvidia", "platform.gpu=b200", "framework=megatron", "model=llama", *nodes(8), *batch(128, 2),
        *NV_PERF, "parallelism.zero_stage=1"],
    "MLPerf v5.1 MI355X Llama 3.1 8B FP8 DP, MBS 2": [
        "platform=amd", "platform.gpu=mi355x", "framework=primus", "model=llama", *nodes(8), *batch(32, 2),
        "training.precision=fp8", "parallelism.zero_stage=1"],
    "ROCm cvs MI300X Llama 3.1 8B FP8 DP, 128/2": [
        "platform=amd", "platform.gpu=mi300x", "framework=primus", "model=llama", *nodes(8), *batch(128, 2),
        "training.precision=fp8", "parallelism.zero_stage=1"],
    "ROCm cvs MI325X Llama 3.1 8B FP8 DP, 128/2": [
        "platform=amd", "platform.gpu=mi325x", "framework=primus", "model=llama", *nodes(8), *batch(128, 2),
        "training.precision=fp8", "parallelism.zero_stage=1"],
    "ROCm cvs MI355X Llama 3.1 8B FP8 FSDP, 128/4": [
        "platform=amd", "platform.gpu=mi355x", "framework=primus", "model=llama", *nodes(8), *batch(128, 4),
        "training.precision=fp8", "parallelism.fsdp=true"],
    "ROCm cvs MI355X Llama 3 70B FSDP, 24/3 (FP16 there, bf16 here)": [
        "platform=amd", "platform.gpu=mi355x", "framework=primus", "model=llama70b", *nodes(8), *batch(24, 3),
        "training.precision=bf16", "parallelism.fsdp=true",
        "training.activation_checkpointing=full"],  # the row names none; 70B at seq 8192 recomputes in every stack
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_a_published_run_validates_with_its_own_layout(name):
    spec = build_spec(compose([*SEQ, *PUBLISHED[name]]), PLANNING_HOST)
    prepared = prepare(spec, PLANNING_HOST, dry_run=True)
    assert prepared.problems == [], prepared.problems
    assert prepared.plan.memory.total_gib <= prepared.plan.device_memory_gib
