"""What hardware this process sees: CUDA (NVIDIA), ROCm (AMD, through torch.cuda) or CPU."""

from __future__ import annotations

import glob
import sys

import psutil

from tprimat.spec.detect import DetectedHardware, cpu_model_name
from tprimat.spec.hardware import device_key_from_name

# Device nodes without which no process on Linux sees a GPU, whatever torch is installed: NVIDIA's driver
# (/dev/nvidiactl, /dev/nvidia0...), WSL2's GPU paravirtualisation (/dev/dxg), Jetson's (/dev/nvhost-ctrl-gpu) and
# ROCm's kernel fusion driver (/dev/kfd, which every HIP process opens).
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia[0-9]*", "/dev/dxg", "/dev/nvhost-ctrl-gpu", "/dev/kfd")


def no_gpu_here() -> bool:
    """True on a Linux machine with none of ``GPU_DEVICE_NODES``: no torch build can see a device there, so the
    answer needs no ``import torch`` (a second or two of CPU for a sweep that only submits, or a refused launch)."""
    return sys.platform == "linux" and not any(glob.glob(pattern) for pattern in GPU_DEVICE_NODES)


def detect() -> DetectedHardware:
    if no_gpu_here():
        return cpu_hardware()
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        props = torch.cuda.get_device_properties(0)
        kind = "amd" if getattr(torch.version, "hip", None) else "nvidia"
        return DetectedHardware(kind, props.name, torch.cuda.device_count(), props.total_memory / 2**30,
                                device_key_from_name(props.name))
    return cpu_hardware()


def cpu_hardware() -> DetectedHardware:
    return DetectedHardware("cpu", cpu_model_name(), 1, psutil.virtual_memory().total / 2**30, None)
