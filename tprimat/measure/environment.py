"""Where a result came from: host, CPU, GPU, driver, CUDA/ROCm, package versions, project git SHA.

Secrets never leave the process: only allow-listed environment variables are recorded, and any whose
name looks like a credential (KEY, TOKEN, SECRET, PASSWORD, ...) is dropped even when allow-listed.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

import psutil

from tprimat.spec.detect import DetectedHardware, cpu_model_name
from tprimat.spec.secrets import SECRET_NAME

PACKAGES = ("torch", "hydra-core", "omegaconf", "numpy", "wandb", "transformers", "accelerate", "deepspeed",
            "megatron-core", "torchao", "submitit", "hydra-submitit-launcher")
ENV_PREFIXES = ("CUDA_", "NCCL_", "RCCL_", "HIP_", "ROCM_", "HSA_", "OMP_", "MKL_", "TORCH_", "PYTORCH_",
                "SLURM_JOB", "SLURM_NNODES", "SLURM_NTASKS", "WANDB_MODE", "WANDB_PROJECT", "WORLD_SIZE",
                "LOCAL_WORLD_SIZE", "GLOO_")


def package_versions() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def safe_env() -> dict:
    return {k: v for k, v in sorted(os.environ.items())
            if k.startswith(ENV_PREFIXES) and not SECRET_NAME.search(k)}


def git_sha() -> dict:
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return {"sha": None, "dirty": None}
    if sha.returncode:
        return {"sha": None, "dirty": None}
    return {"sha": sha.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def gpu_info(hw: DetectedHardware) -> dict:
    if hw.kind == "cpu":
        return {"name": None, "count": 0, "memory_gib": None, "driver": None, "cuda": None, "rocm": None}
    import torch

    return {"name": hw.device_name, "count": hw.device_count, "memory_gib": hw.memory_gib,
            "driver": driver_version(hw.kind), "cuda": torch.version.cuda,
            "rocm": getattr(torch.version, "hip", None)}


def driver_version(kind: str) -> str | None:
    command = (["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"] if kind == "nvidia"
               else ["amd-smi", "version"])
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def collect(hw: DetectedHardware) -> dict:
    return {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu": {"model": cpu_model_name(), "logical_cores": psutil.cpu_count(),
                "memory_gib": psutil.virtual_memory().total / 2**30},
        "gpu": gpu_info(hw),
        "detected_platform": hw.kind,
        "packages": package_versions(),
        "git": git_sha(),
        "env": safe_env(),
    }
