"""tprimat's analytical per-device memory for model states (weights + gradients + AdamW state) beside the same
figure traced from the real native layout, built full size in a fake world on this CPU (``tprimat plan --deep``):
Llama 3.1 8B and 70B, Qwen 2.5 7B and Mistral 7B on one 8-GPU H100 node under DP, FSDP, TP+SP, PP and FSDP x TP.

One line per (model, layout) with the estimate, the traced figure of the heaviest pipeline stage and the error;
last line ``memory_states_median_abs_error=<x>`` (relative). With ``--activations`` each stage also traces one
micro batch's forward and backward over fake tensors (``torch.distributed._tools.MemTracker``, 0.5-2 minutes a
stage on 2 cores) beside the analytical figure for one micro batch, and the last line is
``memory_activations_median_abs_error=<x>``; ``--models`` chooses the models.

    python bench/memory.py [--activations] [--models llama,qwen]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tprimat.backends.native.deep import deep_check  # noqa: E402
from tprimat.compose import compose  # noqa: E402
from tprimat.spec.build import build_spec, spec_to_dict  # noqa: E402
from tprimat.spec.detect import DetectedHardware  # noqa: E402
from tprimat.spec.memory import GIB, activation_bytes  # noqa: E402
from tprimat.spec.plan import make_plan  # noqa: E402
from tprimat.spec.validate import check_layout, check_model  # noqa: E402

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


def layout_spec(model: str, layout: str):
    """The row's spec; a tp the model's heads do not divide (Qwen 2.5 7B: 28 heads) halves until valid."""
    overrides = [*NODE, f"model={model}", *LAYOUTS[layout]]
    while True:
        spec = build_spec(compose(overrides), PLANNING_HOST)
        problems = check_layout(spec) + check_model(spec)  # the layout's rules; whether it fits is the point here
        if not problems or spec.parallelism.tp == 1:
            return spec, problems
        overrides.append(f"parallelism.tp={spec.parallelism.tp // 2}")


def row(model: str, layout: str, activations: bool) -> dict:
    spec, problems = layout_spec(model, layout)
    if problems:
        raise SystemExit(f"{model} {layout}: {problems[0]}")
    plan = make_plan(spec, PLANNING_HOST)
    m = plan.memory
    t0 = time.perf_counter()
    roles, error = deep_check(spec_to_dict(spec), plan.pp, plan.dp, plan.tp, activations=activations, timeout_s=900)
    if error:
        raise SystemExit(f"{model} {layout}: {error}")
    traced = [r["activations_gib"] for r in roles if r["activations_gib"] is not None]
    return {"states": (m.weights_gib + m.grads_gib + m.optimizer_gib,
                       max(r["weights_gib"] + r["grads_gib"] + r["optimizer_gib"] for r in roles)),
            "activations": (activation_bytes(spec, plan.grad_accum_steps, in_flight=1) / GIB,
                            max(traced) if traced else None),
            "seconds": time.perf_counter() - t0, "tp": spec.parallelism.tp}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--activations", action="store_true", help="also trace one micro batch's activations")
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    kind = "activations" if args.activations else "states"
    errors = []
    print(f"{'model':<10} {'layout':<10} {kind + ' est GiB':>18} {'traced GiB':>11} {'error':>8} {'check s':>8}")
    for model in args.models.split(","):
        for layout in LAYOUTS:
            r = row(model, layout, args.activations)
            estimate, traced = r[kind]
            if "TP" in layout and r["tp"] != 8 and "x" not in layout:
                layout = f"{layout} tp={r['tp']}"
            if traced is None:
                print(f"{model:<10} {layout:<10} {estimate:>18.2f} {'n/a':>11}")
                continue
            errors.append(abs(estimate / traced - 1))
            print(f"{model:<10} {layout:<10} {estimate:>18.2f} {traced:>11.2f} {estimate / traced - 1:>+8.1%} "
                  f"{r['seconds']:>8.1f}", flush=True)
    print(f"memory_{kind}_median_abs_error={statistics.median(errors):.4f}")


if __name__ == "__main__":
    main()
