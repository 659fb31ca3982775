"""tprimat's analytical per-device memory for model states (weights + gradients + AdamW state) beside the same
figure traced from the real native layout, built full size in a fake world on this CPU (``tprimat plan --deep``):
Llama 3.1 8B and 70B, Qwen 2.5 7B and Mistral 7B on one 8-GPU H100 node under DP, FSDP, TP+SP, PP and FSDP x TP.

One line per (model, layout) with the estimate, the traced figure of the heaviest pipeline stage and the error;
last line ``memory_states_median_abs_error=<x>`` (relative).

    python bench/memory.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tprimat.backends.native.deep import deep_check  # noqa: E402
from tprimat.compose import compose  # noqa: E402
from tprimat.spec.build import build_spec, spec_to_dict  # noqa: E402
from tprimat.spec.detect import DetectedHardware  # noqa: E402
from tprimat.spec.plan import make_plan  # noqa: E402

NODE = ["platform=nvidia", "platform.gpu=h100", "platform.devices_per_node=8", "methodology=identical_config",
        "training.precision=bf16"]
MODELS = ["llama", "llama70b", "qwen", "mistral"]
LAYOUTS = {
    "DP": ["parallelism.dp=8"],
    "FSDP": ["parallelism.fsdp=true"],
    "TP+SP": ["parallelism.tp=8", "parallelism.sequence_parallel=true"],
    "PP": ["parallelism.pp=4"],
    "FSDP x TP": ["parallelism.tp=4", "parallelism.fsdp=true"],
}
PLANNING_HOST = DetectedHardware("cpu", "planning host", 1, 0.0, None)


def row(model: str, layout: str) -> tuple[float, float, float]:
    spec = build_spec(compose([*NODE, f"model={model}", *LAYOUTS[layout]]), PLANNING_HOST)
    plan = make_plan(spec, PLANNING_HOST)
    m = plan.memory
    estimate = m.weights_gib + m.grads_gib + m.optimizer_gib
    t0 = time.perf_counter()
    roles, error = deep_check(spec_to_dict(spec), plan.pp, plan.dp, plan.tp, activations=False)
    if error:
        raise SystemExit(f"{model} {layout}: {error}")
    traced = max(r["weights_gib"] + r["grads_gib"] + r["optimizer_gib"] for r in roles)
    return estimate, traced, time.perf_counter() - t0


def main() -> None:
    errors = []
    print(f"{'model':<10} {'layout':<10} {'estimate GiB':>13} {'traced GiB':>11} {'error':>8} {'check s':>8}")
    for model in MODELS:
        for layout in LAYOUTS:
            estimate, traced, seconds = row(model, layout)
            errors.append(abs(estimate / traced - 1))
            print(f"{model:<10} {layout:<10} {estimate:>13.2f} {traced:>11.2f} {estimate / traced - 1:>+8.1%} "
                  f"{seconds:>8.1f}")
    print(f"memory_states_median_abs_error={statistics.median(errors):.4f}")


if __name__ == "__main__":
    main()
