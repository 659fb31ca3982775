"""What hardware this process sees: CUDA (NVIDIA), ROCm (AMD, through torch.cuda) or CPU."""

from __future__ import annotations

import psutil

from tprimat.spec.detect import DetectedHardware, cpu_model_name
from tprimat.spec.hardware import device_key_from_name


def detect() -> DetectedHardware:
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        props = torch.cuda.get_device_properties(0)
        kind = "amd" if getattr(torch.version, "hip", None) else "nvidia"
        return DetectedHardware(kind, props.name, torch.cuda.device_count(), props.total_memory / 2**30,
                                device_key_from_name(props.name))
    return DetectedHardware("cpu", cpu_model_name(), 1, psutil.virtual_memory().total / 2**30, None)
