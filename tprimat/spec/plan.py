"""The plan: what a valid spec implies (layout, batch arithmetic, FLOPs, memory) before anything runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from tprimat.spec import flops, memory
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.frameworks import model_as_built
from tprimat.spec.hardware import lookup
from tprimat.spec.schema import TprimatConf, lora_of, padded_vocab


@dataclass(frozen=True)
class Plan:
    world_size: int
    dp: int
    tp: int
    pp: int
    cp: int
    grad_accum_steps: int
    sequences_per_step: int
    tokens_per_step: int
    flops_per_token: float  # canonical (Megatron-LM) convention
    flops_convention: str
    flops_per_step: float
    params_total: int
    params_non_embedding: int
    vocab_size_padded: int  # embedding and output rows as the framework builds them (frameworks.vocab_multiple)
    memory: memory.MemoryEstimate
    device_memory_gib: Optional[float]  # capacity the estimate is checked against; None when unknown
    device_memory_source: str
    peak_tflops: Optional[float]  # dense peak for the precision; None = MFU not reported
    peak_source: str
    backend: str = ""
    backend_description: str = ""
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        return {
            "world_size": self.world_size, "dp": self.dp, "tp": self.tp, "pp": self.pp, "cp": self.cp,
            "grad_accum_steps": self.grad_accum_steps, "sequences_per_step": self.sequences_per_step,
            "tokens_per_step": self.tokens_per_step, "flops_per_token": self.flops_per_token,
            "flops_convention": self.flops_convention, "flops_per_step": self.flops_per_step,
            "params_total": self.params_total, "params_non_embedding": self.params_non_embedding,
            "vocab_size_padded": self.vocab_size_padded, "memory_estimate_gib": self.memory.total_gib,
            "memory_estimate_breakdown": self.memory.as_dict(),
            "device_memory_gib": self.device_memory_gib, "device_memory_source": self.device_memory_source,
            "peak_tflops": self.peak_tflops, "peak_source": self.peak_source,
            "backend": self.backend, "backend_description": self.backend_description,
            "warnings": list(self.warnings),
        }


def world_size(spec: TprimatConf) -> int:
    return spec.platform.devices_per_node * spec.platform.nodes


def derived_dp(spec: TprimatConf) -> int:
    par = spec.parallelism
    return par.dp if par.dp is not None else world_size(spec) // (par.tp * par.pp * par.cp)


def device_memory(spec: TprimatConf, hw: DetectedHardware) -> tuple[Optional[float], str]:
    """Memory per device (GiB) the estimate must fit in: measured when the hardware is here, else the table."""
    if spec.platform.name == "cpu":
        return hw.memory_gib / spec.platform.devices_per_node, "system RAM / processes per node (measured)"
    if hw.kind == spec.platform.name and (spec.platform.gpu is None or spec.platform.gpu == hw.gpu_key):
        return hw.memory_gib, f"torch.cuda.get_device_properties: {hw.device_name}"
    device = lookup(spec.platform.gpu)
    if device:
        return device.memory_gib, f"hardware table: {device.name}"
    return None, "unknown device"


def peak(spec: TprimatConf) -> tuple[Optional[float], str, list[str]]:
    precision = spec.training.precision
    if precision == "fp8":
        return None, "none", ["MFU is not reported under fp8 (ill-defined against a BF16 peak); TFLOP/s is"]
    if spec.platform.name == "cpu":
        return None, "none", ["MFU is not reported on CPU: no spec-sheet peak (tprimat preflight can measure one)"]
    device = lookup(spec.platform.gpu)
    if device is None:
        return None, "none", [f"platform.gpu={spec.platform.gpu}: not in the hardware table, MFU will be null"]
    value = device.peak_tflops(precision)
    if value is None:
        return None, "none", [f"no {precision} peak for {device.name} in the hardware table, MFU will be null"]
    return value, device.source, []


EXAMPLE_DEVICE = {"nvidia": "h100", "amd": "mi300x"}


def unchecked_memory(spec: TprimatConf) -> str:
    """One line for a plan whose memory could not be checked: no device named and none visible here."""
    example = EXAMPLE_DEVICE.get(spec.platform.name, "h100")
    return (f"memory was not checked: platform.gpu={spec.platform.gpu or 'null'} names no device in the hardware table "
            f"and no {spec.platform.name} GPU is visible here; name the device (platform.gpu={example})")


def make_plan(spec: TprimatConf, hw: DetectedHardware) -> Plan:
    """Derive the plan; the spec must already have passed ``tprimat.validate.validate``."""
    par, tr = spec.parallelism, spec.training
    dp = derived_dp(spec)
    accum = tr.global_batch_size // (tr.micro_batch_size * dp)
    built = model_as_built(spec)  # the vocabulary as the framework pads it for this TP
    total, non_embedding = flops.param_counts(built)
    per_token = flops.flops_per_token(built, tr.seq_length, lora=lora_of(spec))
    tokens = tr.global_batch_size * tr.seq_length
    capacity, capacity_source = device_memory(spec, hw)
    peak_tflops, peak_source, warnings = peak(spec)
    if capacity is None:
        warnings = [unchecked_memory(spec), *warnings]
    return Plan(world_size(spec), dp, par.tp, par.pp, par.cp, accum, tr.global_batch_size, tokens, per_token,
                flops.CANONICAL, per_token * tokens, total, non_embedding, padded_vocab(built),
                memory.estimate(spec, dp, accum),
                capacity, capacity_source, peak_tflops, peak_source, warnings=tuple(warnings))
