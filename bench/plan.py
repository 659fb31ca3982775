"""How fast ``tprimat plan`` validates and plans sweep points (target: thousands of points in seconds).

Plans a 2,304-point sweep (4 models x tp 1,2,4,8 x pp 1,2,4 x micro batch 1,2,4,8 x nodes 1,2,4,8 x 3 recompute
modes) on planning-only hardware and prints the rate on its last line as ``points_per_s=<x>``.

    python bench/plan.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tprimat.compose import Composer, expand  # noqa: E402
from tprimat.sweep.plan import plan_sweep  # noqa: E402

SWEEP = ["model=llama,qwen,mistral,llama70b", "platform=nvidia", "platform.gpu=h100", "parallelism.tp=1,2,4,8",
         "parallelism.pp=1,2,4", "training.micro_batch_size=1,2,4,8", "platform.nodes=1,2,4,8",
         "training.activation_checkpointing=none,selective,full"]


def main() -> None:
    plan_sweep(expand(SWEEP[:3]), Composer().compose)  # warm-up: imports, first composition
    t0 = time.perf_counter()
    points = plan_sweep(expand(SWEEP), Composer().compose)
    seconds = time.perf_counter() - t0
    valid = sum(p.valid for p in points)
    print(f"{len(points)} points ({valid} valid, {len(points) - valid} invalid) in {seconds:.2f} s")
    print(f"points_per_s={len(points) / seconds:.0f}")


if __name__ == "__main__":
    main()
