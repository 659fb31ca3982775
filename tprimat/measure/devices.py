"""What hardware this process sees: CUDA (NVIDIA), ROCm (AMD, through torch.cuda) or CPU."""

from __future__ import annotations

import glob
import sys

import psutil

from tprimat.spec.detect import DetectedHardware, cpu_model_name
from tprimat.spec.hardware import device_key_from_name

# Where Linux shows a GPU that torch could use: the device nodes its driver opens (NVIDIA's /dev/nvidiactl and
# /dev/nvidia0..., WSL2's /dev/dxg, Jetson's /dev/nvhost-ctrl-gpu, ROCm's kernel fusion driver /dev/kfd), the loaded
# kernel modules, and the PCI bus itself: a GPU whose nodes nothing has created yet (no udev rule; CUDA's
# nvidia-modprobe makes them at the first use) is still an NVIDIA (0x10de) or AMD (0x1002) display (0x03) or
# processing-accelerator (0x12) device there.
GPU_PATHS = ("/dev/nvidiactl", "/dev/nvidia[0-9]*", "/dev/dxg", "/dev/nvhost-ctrl-gpu", "/dev/kfd", "/sys/module/nvidia",
             "/sys/module/amdgpu")
GPU_VENDORS, GPU_CLASSES = ("0x10de", "0x1002"), ("0x03", "0x12")
PCI_DEVICES = "/sys/bus/pci/devices"


def no_gpu_here() -> bool:
    """True on a Linux machine that shows no GPU (``GPU_PATHS``, or an NVIDIA or AMD GPU on its PCI bus): no
    torch build can see a device there, so the answer needs no ``import torch`` (a second or two of CPU for a sweep
    that only submits, or a refused launch)."""
    return sys.platform == "linux" and not any(glob.glob(pattern) for pattern in GPU_PATHS) \
        and not any(pci_gpu(device) for device in glob.glob(f"{PCI_DEVICES}/*"))


def pci_gpu(device: str) -> bool:
    try:
        with open(f"{device}/vendor") as vendor, open(f"{device}/class") as klass:
            return vendor.read().strip() in GPU_VENDORS and klass.read().strip()[:4] in GPU_CLASSES
    except OSError:
        return False


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
