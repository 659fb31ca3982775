"""The native backend adapter: checks what it can run and drives NativeTrainer through the measured loop. torch is
imported where a run starts, not here: a sweep that only plans and submits its points checks them without it."""

from __future__ import annotations

import importlib.util
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from tprimat.backends.base import Backend, RunOutcome, StepSink
from tprimat.spec.compat import CUDA_GRAPH_MODES, TE_RECIPES
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf
from tprimat.spec.validate import profiled_steps

if TYPE_CHECKING:
    import torch

    from tprimat.measure.profile import StepProfiler


class NativeBackend(Backend):
    name = "native"

    def version(self) -> str:
        import torch

        return f"torch {torch.__version__}"

    def describe(self, spec: TprimatConf, plan: Plan) -> str:
        device = "cpu" if spec.platform.name == "cpu" else f"{spec.platform.name} GPU ({spec.platform.gpu})"
        return (f"native PyTorch {spec.model.family} decoder, {spec.model.num_layers} layers, "
                f"{plan.params_total / 1e6:.1f}M params; AdamW, {spec.training.precision}, "
                f"{plan.grad_accum_steps} micro batches of {spec.training.micro_batch_size} x "
                f"{spec.training.seq_length} tokens per step; {plan.world_size} process(es) on {device}")

    def check(self, spec: TprimatConf, plan: Plan) -> list[str]:
        par, problems = spec.parallelism, []
        if plan.cp > 1:
            problems.append(f"parallelism.cp={plan.cp}: framework=native has no context parallelism; use cp=1")
        if par.zero_stage:
            problems.append(f"parallelism.zero_stage={par.zero_stage}: framework=native shards with "
                            "parallelism.fsdp=true (ZeRO stages are for framework=deepspeed)")
        if plan.dp > 1 and (plan.tp > 1 or plan.pp > 1) and not par.fsdp:
            problems.append(f"parallelism.dp={plan.dp} with tp={plan.tp}, pp={plan.pp}: combine data parallelism "
                            "with tensor or pipeline parallelism through parallelism.fsdp=true (FSDP2 on a 2-D mesh)")
        if plan.pp > 1 and spec.model.tie_embeddings:
            problems.append(f"parallelism.pp={plan.pp}, model.tie_embeddings=true: tied input/output embeddings "
                            "cannot be split across pipeline stages")
        if plan.pp > 1 and plan.grad_accum_steps < plan.pp:
            problems.append(f"parallelism.pp={plan.pp}, grad_accum_steps={plan.grad_accum_steps}: a pipeline needs at "
                            "least pp micro batches per step (raise global_batch_size or lower micro_batch_size)")
        if spec.model.position_embedding == "learned" and plan.tp > 1 and par.sequence_parallel:
            problems.append("model.position_embedding=learned, parallelism.sequence_parallel=true: framework=native "
                            "adds the learned positions to the full sequence; use sequence_parallel=false")
        tr = spec.training
        gpu = spec.platform.name in ("nvidia", "amd")
        if tr.compile and tr.compile_mode in CUDA_GRAPH_MODES and gpu and plan.world_size > 1:
            problems.append(f"training.compile_mode={tr.compile_mode} on {plan.world_size} GPUs: framework=native runs "
                            "CUDA graphs on one GPU only (verified on an H100, 2026-11-24, one graph generation per "
                            "optimizer step); under DDP they are unverified; use default or max-autotune-no-cudagraphs")
        if spec.profile.enabled and spec.profile.tool != "torch":
            problems.append(f"profile.tool={spec.profile.tool}: framework=native profiles with the PyTorch profiler "
                            f"(profile.tool=torch); run {spec.profile.tool} around launch.py for a whole-process trace")
        if spec.training.precision == "fp8" and spec.training.fp8.recipe in TE_RECIPES:
            te = "installed" if importlib.util.find_spec("transformer_engine") else "not installed"
            problems.append(f"training.fp8.recipe={spec.training.fp8.recipe}: framework=native trains fp8 through torchao "
                            f"(recipes tensorwise, rowwise); Transformer Engine's recipes (transformer_engine: {te}) "
                            "are not wired into it")
        return problems

    def check_install(self, spec: TprimatConf, plan: Plan) -> list[str]:
        problems = []
        if spec.training.precision == "fp8" and spec.training.fp8.recipe not in TE_RECIPES and \
                importlib.util.find_spec("torchao") is None:
            problems.append("training.precision=fp8: framework=native trains fp8 through torchao float8, which is "
                            "not installed (pip install torchao)")
        return problems

    def run(self, spec: TprimatConf, plan: Plan, on_step: StepSink, run_dir=None) -> RunOutcome:
        import torch
        import torch.distributed as dist

        from tprimat.backends.common import measure_steps, pick_device, run_repeats, single_process_group
        from tprimat.backends.native.train import NativeTrainer
        from tprimat.measure import memory_profile

        device = pick_device(spec)
        sections: dict = {}

        def run_once(repeat: int) -> dict:
            trainer = NativeTrainer(spec, plan, device)
            profiler = step_profiler(spec, device, run_dir) if spec.profile.enabled and repeat == 0 else None
            if profiler is not None:
                profiler.track_memory(trainer.model, trainer.optimizer, unsupported=untracked_memory(spec))
            records: list = []

            def sink(record) -> None:
                records.append(record)
                on_step(record)

            measure_steps(profiler.wrap(trainer.step) if profiler else trainer.step, spec, plan, device, repeat, sink)
            if profiler is not None and profiler.active:
                sections["profile"] = profiler.section(records)
            return trainer.effective_settings()

        if spec.profile.enabled:
            memory_profile.record_history(device)  # an out-of-memory snapshot then holds the allocation history
        # FSDP2 needs a process group: one process gets a one-rank group for the run (torchrun's ranks have theirs)
        group = single_process_group(device) if spec.parallelism.fsdp and not dist.is_initialized() else nullcontext()
        try:
            with group:
                effective = run_repeats(spec, run_once)
        except torch.OutOfMemoryError as exc:
            raise out_of_memory(exc, device, run_dir) from exc
        return RunOutcome(effective=effective, sections=sections, audit_failures=untied(spec, plan, effective))


def untied(spec: TprimatConf, plan: Plan, effective: dict) -> list[str]:
    """A tied model that this layout trains with its embedding and output head as two weights: flagged."""
    if not spec.model.tie_embeddings or effective.get("embeddings_tied") is not False:
        return []
    return [f"model.tie_embeddings=true: this layout (tp={plan.tp}, pp={plan.pp}) trains the embedding and the "
            "output head as two weights on this rank, a larger model than the plan counts"]


def untracked_memory(spec: TprimatConf) -> Optional[str]:
    """Why MemTracker cannot attribute this run's memory by category (it follows eager modules on one stage)."""
    if spec.training.compile:
        return "not tracked: training.compile=true (compiled graphs run below MemTracker's dispatch mode)"
    if spec.parallelism.fsdp:
        return "not tracked: parallelism.fsdp=true (FSDP2 re-gathers parameters inside the step)"
    if spec.parallelism.pp > 1:
        return "not tracked: parallelism.pp > 1 (the pipeline schedule runs the stage's micro batches)"
    return None


def out_of_memory(exc: torch.OutOfMemoryError, device: torch.device, run_dir) -> torch.OutOfMemoryError:
    """The error again, naming the allocator snapshot written beside the result (CUDA)."""
    import torch
    import torch.distributed as dist

    from tprimat.measure import memory_profile

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    out = Path(run_dir) / "profile" if run_dir is not None else None
    name = memory_profile.dump_snapshot(device, out, rank)
    where = f"; allocator snapshot: profile/{name} (open at https://pytorch.org/memory_viz)" if name else ""
    return torch.OutOfMemoryError(f"{exc}{where}")


def step_profiler(spec: TprimatConf, device: torch.device, run_dir) -> StepProfiler:
    """The PyTorch profiler over ``profile.steps`` of the first repeat, on this rank when it is listed."""
    import torch.distributed as dist

    from tprimat.measure.profile import StepProfiler

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    out = Path(run_dir) / "profile" if run_dir is not None else None
    return StepProfiler(profiled_steps(spec), rank, tuple(spec.profile.ranks), device, out)


BACKEND = NativeBackend()
