"""What torch.compile's fusion would do to the projection of torchtitan, against what torchtitan publishes.

The projection runs every memory-bound operation one by one, as eager PyTorch does, and models no fusion: it
projects torchtitan's compiled runs as its eager ones, where torchtitan's own table (benchmarks/
llama3_h100_202412_torchtitan.md) puts compile at 1.157x eager (Llama 3.1 8B, BF16, 8 H100s; 1.162x on 128).
This bench asks torch's own compiler which of them it fuses: Inductor compiles the native decoder layer (its
forward and backward, a Llama-shaped layer small enough for this CPU), and its scheduler's kernels after fusion are
read (their buffers' bytes, ``get_read_write_buffers_sizes``; matmuls and attention stay extern kernels) beside the
memory-bound operations of the eager trace at the same shapes (``tprimat.backends.native.opcount``). The ratios
(bytes and kernels, forward and backward) are then applied to the layer's memory-bound operations in the
projection of torchtitan's published 8B BF16 rows, eager against compiled: the speedup the roofline would give
compile, beside the published one. A diagnostic: nothing in ``tprimat/`` reads it.

    python bench/compile_fusion.py

Caveat: Inductor's CPU backend (C++ kernels, its outer-loop fusion) decides fusions as its GPU backend (Triton)
does in the main, not in every case; the ratios are this torch's (``torch.__version__`` is printed).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")  # compile for real, so the scheduler runs
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")

import op_gap  # noqa: E402
import projection_rows  # noqa: E402

from tprimat.spec.projection import OpCost, Work, ceilings, project  # noqa: E402

# a Llama-shaped layer (SwiGLU at 8B's 3.5x, GQA 4:1, head dim 128) small enough to run on a CPU
LAYER = ["platform=cpu", "model=llama_tiny", "model.hidden_size=1024", "model.ffn_hidden_size=3584",
         "model.num_attention_heads=8", "model.num_kv_heads=2", "training.precision=bf16", "training.seq_length=1024",
         "training.micro_batch_size=1", "training.global_batch_size=1"]
PUBLISHED = {"H100 8B BF16 FSDP, torchtitan": "H100 8B BF16 FSDP+compile, torchtitan",
             "H100 8B BF16 FSDP x128, torchtitan": "H100 8B BF16 FSDP+compile x128, torchtitan"}


def fused_kernels(block, x, cos, sin) -> list[list[tuple[str, int]]]:
    """Per graph Inductor compiles (forward, backward): (node kind, bytes read and written) of each kernel after
    fusion, as its scheduler holds them when it generates code."""
    import torch
    from torch._inductor import scheduler

    graphs, generate = [], scheduler.Scheduler.codegen

    def capture(self):
        graphs.append([(type(n).__name__, n.get_read_write_buffers_sizes()) for n in self.nodes])
        return generate(self)

    scheduler.Scheduler.codegen = capture
    try:
        out = torch.compile(block)(x, cos, sin)
        out.backward(torch.ones_like(out))
    finally:
        scheduler.Scheduler.codegen = generate
    return graphs


def ratios() -> dict:
    """(bytes, kernels) of Inductor's fused non-matmul kernels over the eager trace's memory-bound operations."""
    import torch

    from tprimat.backends.native.model import Block, head_dim_of, rope_cache, rope_frequencies
    from tprimat.backends.native.opcount import trace_model
    from tprimat.spec.frameworks import model_as_built

    spec, _, _, _ = op_gap.planned(LAYER)
    cfg, tokens = model_as_built(spec), (1, spec.training.seq_length)
    eager = trace_model(cfg, tokens, False, False)
    torch.manual_seed(0)
    block = Block(cfg, head_dim_of(cfg)).to(torch.bfloat16)
    cos, sin = rope_cache(rope_frequencies(cfg, head_dim_of(cfg)), tokens[1])
    x = torch.randn(*tokens, cfg.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    graphs = fused_kernels(block, x, cos, sin)
    assert len(graphs) == 2, f"Inductor compiled {len(graphs)} graphs, not a forward and a backward"
    out = {}
    for phase, graph in zip(("fwd", "bwd"), graphs):
        memory = [o for o in eager.ops("layer", phase) if o.kind == "memory"]
        kernels = [size for kind, size in graph if kind not in ("ExternKernelSchedulerNode", "NopKernelSchedulerNode")]
        out[phase] = (sum(kernels) / sum(o.bytes for o in memory), len(kernels) / len(memory))
        print(f"{phase}: eager {len(memory)} memory-bound operations, {sum(o.bytes for o in memory):,} bytes; "
              f"Inductor {len(kernels)} fused kernels, {sum(kernels):,} bytes")
    return out


def fused(work: Work, by_phase: dict) -> Work:
    """The layer's memory-bound operations as that many fewer kernels moving that much fewer bytes."""
    parts = {part: dict(phases) for part, phases in work.parts.items()}
    for phase, (bytes_ratio, kernel_ratio) in by_phase.items():
        ops = work.ops("layer", phase)
        memory = [o for o in ops if o.kind == "memory"]
        n = max(1, round(len(memory) * kernel_ratio))
        moved = sum(o.bytes for o in memory) * bytes_ratio
        parts["layer"][phase] = [o for o in ops if o.kind != "memory"] + [OpCost("memory", 0.0, moved / n)] * n
    return Work(parts)


def main() -> None:
    import torch

    from tprimat.backends.native.opcount import trace_work

    print(f"torch {torch.__version__}")
    by_phase = ratios()
    for phase, (b, k) in by_phase.items():
        print(f"compile_fusion_{phase}_bytes_ratio={b:.3f} compile_fusion_{phase}_kernel_ratio={k:.3f}")
    rows = {r["name"]: r for r in projection_rows.SCORED}
    for eager_name, compiled_name in PUBLISHED.items():
        spec, plan, _, _ = op_gap.planned(rows[eager_name]["overrides"])
        c, _ = ceilings(spec)
        work = trace_work(spec)
        steps = [project(spec, w, c, plan.dp, plan.grad_accum_steps, plan.peak_tflops)["step_time_s"]
                 for w in (work, fused(work, by_phase))]
        published = rows[compiled_name]["published"] / rows[eager_name]["published"]
        print(f"{eager_name}: compile's speedup at the roofline with Inductor's fusion {steps[0] / steps[1]:.3f}x, "
              f"published {published:.3f}x")


if __name__ == "__main__":
    main()
