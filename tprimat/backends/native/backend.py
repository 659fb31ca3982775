"""The native backend adapter: checks what it can run and drives NativeTrainer through the measured loop."""

from __future__ import annotations

import torch

from tprimat.backends.base import StepSink
from tprimat.backends.native.train import NativeTrainer, pick_device
from tprimat.config.schema import TprimatConf
from tprimat.measure import run_measured
from tprimat.plan import Plan


class NativeBackend:
    name = "native"

    def version(self) -> str:
        return f"torch {torch.__version__}"

    def describe(self, spec: TprimatConf, plan: Plan) -> str:
        device = "cpu" if spec.platform.name == "cpu" else f"{spec.platform.name} GPU ({spec.platform.gpu})"
        return (f"native PyTorch {spec.model.family} decoder, {spec.model.num_layers} layers, "
                f"{plan.params_total / 1e6:.1f}M params; AdamW, {spec.training.precision}, "
                f"{plan.grad_accum_steps} micro batches of {spec.training.micro_batch_size} x "
                f"{spec.training.seq_length} tokens per step; {plan.world_size} process(es) on {device}")

    def check(self, spec: TprimatConf, plan: Plan) -> list[str]:
        problems = []
        if plan.world_size > 1:
            problems.append(f"platform.devices_per_node * platform.nodes = {plan.world_size}: framework=native "
                            "runs a single process in this version (multi-process launch is not built yet)")
        if spec.training.precision == "fp8":
            problems.append("training.precision=fp8: framework=native has no fp8 path yet (torchao float8 "
                            "is not built yet); use bf16")
        return problems

    def run(self, spec: TprimatConf, plan: Plan, on_step: StepSink) -> None:
        device = pick_device(spec)
        for repeat in range(spec.benchmark.repeats):
            trainer = NativeTrainer(spec, plan, device)
            run_measured(trainer.step, spec.training.max_steps, plan.tokens_per_step,
                         spec.benchmark.warmup_steps, repeat, device, on_step)
            del trainer


BACKEND = NativeBackend()
