"""Where a step's memory goes: by category at the step's peak (``torch.distributed._tools.MemTracker``: the
parameters, buffers, gradients, activations, temporaries and optimizer state alive when the step's memory
peaked, on any device), the CUDA caching allocator's own peaks (``torch.cuda.memory_stats``: allocated,
reserved, active, requested, the fragmentation it left inactive, retries and OOMs), and on an out-of-memory
error the allocator's snapshot (``torch.cuda.memory._dump_snapshot``: every segment and block, with the
allocation history when it was recorded), readable at https://pytorch.org/memory_viz.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

GIB = 2**30
CATEGORIES = {"PARAM": "parameters_gib", "BUFFER": "buffers_gib", "GRAD": "gradients_gib", "ACT": "activations_gib",
              "TEMP": "temporaries_gib", "OPT": "optimizer_gib", "OTH": "other_gib"}
SNAPSHOT = "oom_snapshot_rank{rank}.pickle"
HISTORY_ENTRIES = 100_000  # allocation events kept for the snapshot while profiling (a ring buffer)


class CategoryTracker:
    """MemTracker around one step of ``modules`` (the model, its optimizer): the categories at the step's peak.
    ``result`` is the section, or ``{"tracked": False, "reason": ...}`` where MemTracker could not follow."""

    def __init__(self, device: torch.device, *modules) -> None:
        self.device, self.result = device, None
        self.tracker = step_tracker()
        self.tracker.track_external(*modules)

    def __enter__(self):
        self.tracker.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.tracker.__exit__(*exc)
        if exc[0] is None:
            self.result = categories_at_peak(self.tracker.get_tracker_snapshot("peak"), self.device)


def step_tracker():
    """A MemTracker for one optimizer step of several micro batches. MemTracker refuses a root module's second
    forward (it takes it for the next iteration); here each micro batch's forward starts the module statistics
    afresh, which leaves the per-device categories, tracked over the whole step, as they are."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class StepMemTracker(MemTracker):
        def _pre_fw_hook(self, module, inputs) -> None:
            name = self._mod_tracker.get_known_fqn(module)
            if module in self.memory_tracking and not self._mod_tracker.is_bw and \
                    set(self._mod_tracker.parents) - {name} == {"Global"}:
                self.reset_mod_stats()  # the root's next micro batch
            super()._pre_fw_hook(module, inputs)

    return StepMemTracker()


def categories_at_peak(snapshot: dict, device: torch.device) -> dict:
    """MemTracker's peak snapshot ({device: {_MemRefType: bytes, "Total": bytes}}) for ``device``, in GiB."""
    mine = next((v for k, v in snapshot.items() if torch.device(k).type == device.type), None)
    if mine is None:
        return {"tracked": False, "reason": f"no tensor memory seen on {device.type}"}
    by_name = {getattr(key, "name", key): value for key, value in mine.items()}  # _MemRefType.PARAM -> "PARAM"
    return {"tracked": True, "basis": "MemTracker: what was alive at the step's peak, by category (one step)",
            **{name: by_name.get(key, 0) / GIB for key, name in CATEGORIES.items()},
            "total_gib": by_name.get("Total", 0) / GIB}


def allocator_peaks(device: torch.device) -> Optional[dict]:
    """The CUDA caching allocator's peaks since the run's last reset (GiB), None off CUDA."""
    if device.type != "cuda":
        return None
    stats = torch.cuda.memory_stats(device)
    gib = lambda key: stats.get(key, 0) / GIB  # noqa: E731
    return {"allocated_peak_gib": gib("allocated_bytes.all.peak"), "reserved_peak_gib": gib("reserved_bytes.all.peak"),
            "active_peak_gib": gib("active_bytes.all.peak"), "requested_peak_gib": gib("requested_bytes.all.peak"),
            "inactive_split_peak_gib": gib("inactive_split_bytes.all.peak"),
            "large_pool_allocated_peak_gib": gib("allocated_bytes.large_pool.peak"),
            "small_pool_allocated_peak_gib": gib("allocated_bytes.small_pool.peak"),
            "alloc_retries": stats.get("num_alloc_retries", 0), "ooms": stats.get("num_ooms", 0)}


def record_history(device: torch.device) -> bool:
    """Keep the allocator's recent allocation events (with Python stacks) for a snapshot: CUDA only."""
    if device.type != "cuda":
        return False
    torch.cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES)
    return True


def dump_snapshot(device: torch.device, out_dir: Optional[Path], rank: int) -> Optional[str]:
    """The allocator's snapshot written after an out-of-memory error: its file name, None off CUDA."""
    if device.type != "cuda" or out_dir is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / SNAPSHOT.format(rank=rank)
    torch.cuda.memory._dump_snapshot(str(path))
    return path.name
