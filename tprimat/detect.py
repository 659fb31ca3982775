"""What hardware this process sees: CUDA (NVIDIA), ROCm (AMD, through torch.cuda) or CPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import psutil

from tprimat.hardware import device_key_from_name


@dataclass(frozen=True)
class DetectedHardware:
    kind: str  # cpu | nvidia | amd
    device_name: str
    device_count: int
    memory_gib: float  # per device; system RAM on CPU
    gpu_key: Optional[str]  # key in tprimat.hardware.DEVICES, None when unknown or CPU


def detect() -> DetectedHardware:
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        props = torch.cuda.get_device_properties(0)
        kind = "amd" if getattr(torch.version, "hip", None) else "nvidia"
        return DetectedHardware(kind, props.name, torch.cuda.device_count(), props.total_memory / 2**30,
                                device_key_from_name(props.name))
    return DetectedHardware("cpu", cpu_model_name(), 1, psutil.virtual_memory().total / 2**30, None)


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
