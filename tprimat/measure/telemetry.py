"""Power, energy and utilisation of every local device, sampled in the background while steps are measured.

Sources: NVIDIA through nvidia-ml-py (one handle per GPU this node's ranks use: power, the board's energy
counter, utilisation, clocks, memory, temperature), AMD through amdsmi (one handle per GPU), CPU through psutil
(utilisation, resident memory) plus the RAPL package domains where /sys/class/powercap is readable. A missing
library or device is recorded as "unavailable: <reason>", never a crash; a failed read is counted, and when
failed reads dominate a device the energy is "unavailable" with the first error. Energy is attributed to the
measured (non-warm-up) window only, summed over the sampled devices, and divided by the tokens those devices'
ranks processed (see ``summarize``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

import psutil

from tprimat.measure.sampler import Sampler

__all__ = ["Source", "NvmlSource", "AmdSmiSource", "CpuSource", "open_source", "visible_indices", "Sampler"]


class Source:
    """One reading per device: ``read(i)`` for ``i`` in ``range(len(self.devices))``.

    ``read`` returns any of power_w, energy_j (a cumulative counter), util_pct, mem_gib, temp_c, clock_mhz;
    ``ranks_covered`` is how many of the run's ranks the devices' energy belongs to (one per GPU; every
    local rank for a CPU package, which all of them share)."""

    name = ""
    devices: list[str] = []
    ranks_covered = 1

    def read(self, device: int) -> dict:
        raise NotImplementedError

    def close(self) -> None:
        pass


def visible_indices(variable: str, count: int) -> list[str]:
    """The first ``count`` devices this node's ranks use: entries of CUDA_VISIBLE_DEVICES (or the ROCm
    equivalent) when set, else 0..count-1. Rank r uses device r of that list (``torch.cuda.set_device``)."""
    listed = [v.strip() for v in os.environ.get(variable, "").split(",") if v.strip()]
    chosen = listed[:count] if listed else [str(i) for i in range(count)]
    if len(chosen) < count:
        raise RuntimeError(f"{variable}={os.environ.get(variable)!r} lists {len(chosen)} devices, "
                           f"but {count} local ranks need one each")
    return chosen


class NvmlSource(Source):
    name = "nvml"

    def __init__(self, local_devices: int = 1):
        import pynvml

        pynvml.nvmlInit()
        try:
            chosen = visible_indices("CUDA_VISIBLE_DEVICES", local_devices)
            self.handles = [pynvml.nvmlDeviceGetHandleByUUID(entry) if entry.startswith(("GPU-", "MIG-"))
                            else pynvml.nvmlDeviceGetHandleByIndex(int(entry)) for entry in chosen]
        except Exception:
            pynvml.nvmlShutdown()
            raise
        self.nvml, self.devices, self.ranks_covered = pynvml, [f"nvml:{i}" for i in chosen], len(chosen)

    def read(self, device: int) -> dict:
        nv, h = self.nvml, self.handles[device]
        return {"power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000,
                "energy_j": nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000,
                "util_pct": nv.nvmlDeviceGetUtilizationRates(h).gpu,
                "mem_gib": nv.nvmlDeviceGetMemoryInfo(h).used / 2**30,
                "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                "clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)}

    def close(self) -> None:
        self.nvml.nvmlShutdown()


class AmdSmiSource(Source):
    name = "amdsmi"

    def __init__(self, local_devices: int = 1):
        import amdsmi

        amdsmi.amdsmi_init()
        try:
            every = amdsmi.amdsmi_get_processor_handles()
            variable = "ROCR_VISIBLE_DEVICES" if os.environ.get("ROCR_VISIBLE_DEVICES") else "HIP_VISIBLE_DEVICES"
            chosen = visible_indices(variable, local_devices)
            self.handles = [every[int(i)] for i in chosen]
        except Exception:
            amdsmi.amdsmi_shut_down()
            raise
        self.smi, self.devices, self.ranks_covered = amdsmi, [f"amdsmi:{i}" for i in chosen], len(chosen)

    def read(self, device: int) -> dict:
        smi, h = self.smi, self.handles[device]
        power = smi.amdsmi_get_power_info(h)
        activity = smi.amdsmi_get_gpu_activity(h)
        energy = smi.amdsmi_get_energy_count(h)
        return {"power_w": float(power.get("current_socket_power") or power.get("average_socket_power") or 0),
                "energy_j": energy["energy_accumulator"] * energy["counter_resolution"] / 1e6,
                "util_pct": activity.get("gfx_activity"),
                "mem_gib": smi.amdsmi_get_gpu_memory_usage(h, smi.AmdSmiMemoryType.VRAM) / 2**30}

    def close(self) -> None:
        self.smi.amdsmi_shut_down()


class RaplDomain:
    """One top-level RAPL domain (a CPU package): its microjoule counter, unwrapped across overflows."""

    def __init__(self, path: Path):
        self.path, self.name = path, (path / "name").read_text().strip()
        self.range_uj = int((path / "max_energy_range_uj").read_text())
        self.last_uj, self.total_uj = int((path / "energy_uj").read_text()), 0

    def joules(self) -> float:
        now = int((self.path / "energy_uj").read_text())
        self.total_uj += now - self.last_uj if now >= self.last_uj else now + self.range_uj - self.last_uj
        self.last_uj = now
        return self.total_uj / 1e6


def rapl_domains(root: Path = Path("/sys/class/powercap")) -> list[RaplDomain]:
    """The readable package domains (intel-rapl:N; their subdomains intel-rapl:N:M are inside them and psys
    overlaps them, so neither is counted)."""
    domains = []
    for path in sorted(root.glob("*rapl:*")):
        if path.name.count(":") != 1:
            continue
        try:
            domain = RaplDomain(path)
        except (OSError, ValueError):
            continue
        if domain.name.startswith("package"):
            domains.append(domain)
    return domains


class CpuSource(Source):
    """Device i is RAPL package i (energy) with the process's utilisation and memory on device 0; without
    readable RAPL, the single device is the process and has no energy."""

    name = "psutil"

    def __init__(self, local_ranks: int = 1, rapl_root: Path = Path("/sys/class/powercap")):
        self.process = psutil.Process()
        self.process.cpu_percent(None)
        self.rapl = rapl_domains(rapl_root)
        self.devices = [f"rapl:{d.name}" for d in self.rapl] or ["process"]
        self.ranks_covered = local_ranks  # the packages are shared by every rank on this host
        if self.rapl:
            self.name = "psutil+rapl"

    def read(self, device: int) -> dict:
        sample = {"energy_j": self.rapl[device].joules()} if self.rapl else {}
        if device == 0:
            sample.update(util_pct=self.process.cpu_percent(None), mem_gib=self.process.memory_info().rss / 2**30)
        return sample


def open_source(platform: str, local_devices: int = 1) -> tuple[Optional[Source], str]:
    """The sampler for this platform over the ``local_devices`` this node's ranks use, or
    (None, 'unavailable: reason')."""
    factories: list[Callable[[int], Source]] = {"nvidia": [NvmlSource], "amd": [AmdSmiSource],
                                                "cpu": [CpuSource]}.get(platform, [])
    for factory in factories:
        try:
            return factory(local_devices), ""
        except Exception as exc:  # noqa: BLE001 - no library / no driver / no device: say so, do not crash
            return None, f"unavailable: {factory.__name__}: {type(exc).__name__}: {exc}"
    return None, f"unavailable: no telemetry source for platform {platform}"
