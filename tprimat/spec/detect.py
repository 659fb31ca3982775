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
