"""A fourth held-out set: Megatron-Bridge's GB200 and GB300 rows, committed on its own (2026-11-27) before any was
scored.

No projection had scored a GB200 or GB300 row: the hardware table held neither GPU until MLPerf v5.1's accelerators
were added (spec-sheet facts, not these rows). Every FP8 (current scaling) Llama 3 / 3.1 8B and 70B row of
Megatron-Bridge's archive on them (25.09 to 26.04.01) is here; their MXFP8 and NVFP4 rows and the 405B rows are not
expressible (bench/projection_rows.py). Near-duplicates (the same configuration in another version or at another
batch) share a family and count once: four families. An NVL72 rack's GPUs share one NVLink domain, so a row's GPUs
are one node to the spec (64 of them for the 70B rows). Scored by ``python bench/projection.py``
(``held_out_3_4_median_abs_error``, with bench/held_out_3.py); its first score went to docs/benchmarks.md. Since
then ``tprimat/spec`` changed (2026-11-28: a part without a measured matmul ceiling takes its architecture's measured
fraction of peak), so these rows are no longer held out (docs/benchmarks.md says so).
"""

from projection_rows import CURRENT, MB, MEGATRON_FSDP


def gb(gpu: str, model: str, gpus: int, gbs: int, version: str, published: float, layout: list, family: str) -> dict:
    """A DGX-GB200 / DGX-GB300 row: FP8 (current scaling), micro batch 2, 8,192 tokens, the GPUs in one NVL72 domain."""
    size = "70B" if model == "llama70b" else "8B"
    return dict(name=f"{gpu.upper()} {size} FP8 x{gpus} GBS {gbs}, Megatron-Bridge {version}", gpu=gpu, platform="nvidia",
                gpus=gpus, gbs=gbs, mbs=2, precision="fp8",
                layout=[*layout, CURRENT, f"platform.devices_per_node={gpus}", "platform.nodes=1"], published=published,
                source=f"{MB} ({version})", model=model, framework="megatron", family=family)


PUBLISHED = [
    gb("gb300", "llama", 8, 128, "25.11", 37556, [], "Megatron-Bridge GB300 8B"),
    gb("gb200", "llama", 8, 128, "25.11", 31508, [], "Megatron-Bridge GB200 8B"),
    gb("gb200", "llama", 8, 128, "25.09", 31357, [], "Megatron-Bridge GB200 8B"),
    *[gb("gb300", "llama70b", 64, 256, version, published, MEGATRON_FSDP, "Megatron-Bridge GB300 70B FSDP")
      for version, published in (("25.11", 4520), ("26.04.01", 5248), ("26.04", 5243), ("26.02.01", 5243),
                                 ("26.02", 5003))],
    *[gb("gb200", "llama70b", 64, gbs, version, published, MEGATRON_FSDP, "Megatron-Bridge GB200 70B FSDP")
      for version, gbs, published in (("25.11", 256, 4312), ("26.04.01", 256, 4224), ("26.04", 256, 4143),
                                      ("26.02.01", 256, 4357), ("26.02", 256, 4040), ("25.09", 128, 3986))],
]
