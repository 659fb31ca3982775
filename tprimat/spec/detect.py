"""The hardware a spec is resolved and validated against (``tprimat.measure.devices.detect`` fills it in)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class DetectedHardware:
    kind: str  # cpu | nvidia | amd
    device_name: str
    device_count: int
    memory_gib: float  # per device; system RAM on CPU
    gpu_key: Optional[str]  # key in tprimat.hardware.DEVICES, None when unknown or CPU


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


# CPU instruction-set features that run bf16 matrix multiplication natively (x86: AVX512-BF16, AMX; Arm: BF16).
# Without them PyTorch's CPU bf16 matmul is emulated and far slower than fp32 (measured 100x on an AVX2 EPYC:
# docs/benchmarks.md), so the CPU's best precision depends on the CPU.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_flags() -> frozenset:
    """The CPU's feature flags (x86 ``flags``, Arm ``Features``) from /proc/cpuinfo; empty when unreadable."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def precision_for(flags: frozenset) -> str:
    """The faster training precision on a CPU with these feature flags: bf16 with native bf16 matmul, else fp32."""
    return "bf16" if flags & set(BF16_CPU_FLAGS) else "fp32"


def cpu_precision() -> str:
    return precision_for(cpu_flags())
