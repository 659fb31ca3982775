"""Framework ``deepspeed``: the native decoder trained by a DeepSpeed engine (ZeRO 0-3 from
``parallelism.zero_stage``). The DeepSpeed config JSON is generated from the run spec (batch sizes, gradient
accumulation, precision, AdamW, clipping) and saved with the result; the warm-up + cosine schedule is
tprimat's own, handed to the engine, so every framework follows the same learning-rate curve."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tprimat.backends.base import Backend, RunOutcome, StepSink
from tprimat.backends.common import (
    SyntheticTokens,
    batch_phrase,
    lr_at,
    measure_steps,
    optimizer_settings,
    param_groups,
    pick_device,
    run_repeats,
    single_process_group,
)
from tprimat.backends.ds.config import engine_config
from tprimat.backends.native.model import Decoder
from tprimat.backends.native.parallelize import apply_activation_checkpointing
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf, ac_period


def ds_config(spec: TprimatConf, plan: Plan) -> dict:
    opt = spec.training.optimizer
    return {**engine_config(spec, plan),
            "optimizer": {"type": "AdamW", "params": {"lr": opt.lr, "betas": [opt.beta1, opt.beta2], "eps": opt.eps,
                                                      "weight_decay": opt.weight_decay, "torch_adam": True}}}


class DeepSpeedTrainer:
    def __init__(self, spec: TprimatConf, plan: Plan, device: torch.device):
        import deepspeed

        self.spec, self.plan, self.device = spec, plan, device
        tr = spec.training
        torch.manual_seed(tr.seed)
        with torch.device(device):
            model = Decoder(spec.model, tr.seed)
        apply_activation_checkpointing(model, tr.activation_checkpointing, ac_period(tr.ac_frequency))
        self.config = ds_config(spec, plan)
        schedule = lambda optimizer: torch.optim.lr_scheduler.LambdaLR(  # noqa: E731
            optimizer, lambda s: lr_at(s, tr) / tr.optimizer.lr)
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, model_parameters=param_groups(model, tr.optimizer.weight_decay), config=self.config,
            lr_scheduler=schedule)
        self.data = SyntheticTokens(spec.model.vocab_size, tr.seq_length, tr.seed, tr.global_batch_size)
        self.dp_rank = dist.get_rank()

    def step(self, step: int) -> tuple[torch.Tensor, torch.Tensor, float]:
        mbs, dp, accum = self.spec.training.micro_batch_size, self.plan.dp, self.plan.grad_accum_steps
        lr = self.engine.get_lr()[0]
        total = torch.zeros((), device=self.device)
        for micro in range(accum):
            inputs, targets = self.data.rows(step, micro * mbs * dp + self.dp_rank * mbs, mbs)
            logits = self.engine(inputs.to(self.device))
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.to(self.device).reshape(-1))
            self.engine.backward(loss)  # DeepSpeed scales by 1 / gradient_accumulation_steps
            self.engine.step()  # applies the optimizer at the accumulation boundary only
            total += loss.detach() / accum
        if dp > 1:
            dist.all_reduce(total)
            total /= dp
        grad_norm = self.engine.get_global_grad_norm()
        return total, torch.as_tensor(float(grad_norm) if grad_norm is not None else float("nan")), lr

    def effective_settings(self) -> dict:
        return {**optimizer_settings(self.optimizer), "grad_clip": self.engine.gradient_clipping(),
                "micro_batch_size": self.engine.train_micro_batch_size_per_gpu(),
                "grad_accum_steps": self.engine.gradient_accumulation_steps(),
                "zero_stage": self.engine.zero_optimization_stage(),
                "precision": "bf16" if self.engine.bfloat16_enabled() else "fp32",
                "lr_schedule": "tprimat warmup_cosine (LambdaLR)", "ds_config": self.config}


class DeepSpeedBackend(Backend):
    name = "deepspeed"

    def version(self) -> str:
        import deepspeed

        return f"deepspeed {deepspeed.__version__}, torch {torch.__version__}"

    def describe(self, spec: TprimatConf, plan: Plan) -> str:
        tr = spec.training
        return (f"DeepSpeed ZeRO-{spec.parallelism.zero_stage} engine around the native {spec.model.family} decoder: "
                + batch_phrase(tr.micro_batch_size, tr.seq_length, plan.dp, plan.grad_accum_steps, tr.precision))

    def generated_config(self, spec: TprimatConf, plan: Plan) -> dict:
        return ds_config(spec, plan)

    def check(self, spec: TprimatConf, plan: Plan) -> list[str]:
        problems = []
        if plan.tp > 1 or plan.pp > 1 or plan.cp > 1:
            problems.append(f"parallelism.tp={plan.tp}, pp={plan.pp}, cp={plan.cp}: framework=deepspeed runs ZeRO data "
                            "parallelism here (use framework=native for TP/PP)")
        if spec.parallelism.fsdp:
            problems.append("parallelism.fsdp=true: framework=deepspeed shards with parallelism.zero_stage (1-3)")
        if spec.training.precision == "fp8":
            problems.append("training.precision=fp8: framework=deepspeed trains in bf16 or fp32 here")
        if spec.training.compile:
            problems.append("training.compile=true: not wired for framework=deepspeed; use framework=native")
        return problems

    def run(self, spec: TprimatConf, plan: Plan, on_step: StepSink, run_dir=None) -> RunOutcome:
        device = pick_device(spec)

        def run_once(repeat: int) -> dict:
            trainer = DeepSpeedTrainer(spec, plan, device)
            measure_steps(trainer.step, spec, plan, device, repeat, on_step)
            effective = trainer.effective_settings()
            trainer.engine.destroy()
            return effective

        with single_process_group(device):
            return RunOutcome(effective=run_repeats(spec, run_once))


BACKEND = DeepSpeedBackend()
