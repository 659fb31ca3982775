"""Framework ``transformers``: the HF Trainer on the same synthetic data, optimizer and schedule as every
other backend (tprimat's AdamW and warm-up + cosine schedule are handed to the Trainer), with a callback that
turns each optimizer step into tprimat's step record. Data parallelism through the same launch path: plain DDP,
or the Trainer's own DeepSpeed integration (``TrainingArguments(deepspeed=...)``) with ZeRO 1-3 from
``parallelism.zero_stage``, its config generated from the spec as for framework=deepspeed."""

from __future__ import annotations

import tempfile
from contextlib import nullcontext

import torch

from tprimat.backends.base import Backend, RunOutcome, StepSink
from tprimat.backends.common import (
    SyntheticTokens,
    batch_phrase,
    build_optimizer,
    lr_at,
    optimizer_settings,
    pick_device,
    run_repeats,
    set_lr,
    single_process_group,
)
from tprimat.backends.ds.config import engine_config
from tprimat.measure.step import MemoryProbe, StepClock
from tprimat.results.records import StepRecord
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf, lora_of


class SyntheticDataset(torch.utils.data.Dataset):
    """Item i is row i % gbs of step i // gbs's global batch: consumed in order, every step sees the same
    global batch as the native backend."""

    def __init__(self, spec: TprimatConf, steps: int):
        tr = spec.training
        self.data = SyntheticTokens(spec.model.vocab_size, tr.seq_length, tr.seed, tr.global_batch_size)
        self.gbs, self.steps = tr.global_batch_size, steps

    def __len__(self) -> int:
        return self.gbs * self.steps

    def __getitem__(self, i: int) -> dict:
        inputs, _ = self.data.rows(i // self.gbs, i % self.gbs, 1)
        return {"input_ids": inputs[0], "labels": inputs[0].clone()}  # the model shifts labels itself


def effective_settings(optimizer, args, scheduler_name: str) -> dict:
    return {**optimizer_settings(optimizer), "grad_clip": args.max_grad_norm,
            "micro_batch_size": args.per_device_train_batch_size,
            "grad_accum_steps": args.gradient_accumulation_steps, "lr_schedule": scheduler_name,
            "precision": "bf16" if args.bf16 else "fp32"}


class TransformersBackend(Backend):
    name = "transformers"

    def version(self) -> str:
        import transformers

        return f"transformers {transformers.__version__}, torch {torch.__version__}"

    def describe(self, spec: TprimatConf, plan: Plan) -> str:
        from tprimat.backends.hf.model import CLASSES

        tr = spec.training
        zero = f" with DeepSpeed ZeRO-{spec.parallelism.zero_stage}" if spec.parallelism.zero_stage else ""
        return (f"Hugging Face {CLASSES[spec.model.family][1]} (random init, sdpa) trained by the Trainer{zero}: "
                + batch_phrase(tr.micro_batch_size, tr.seq_length, plan.dp, plan.grad_accum_steps, tr.precision))

    def check(self, spec: TprimatConf, plan: Plan) -> list[str]:
        par, problems = spec.parallelism, []
        if plan.tp > 1 or plan.pp > 1 or plan.cp > 1:
            problems.append(f"parallelism.tp={plan.tp}, pp={plan.pp}, cp={plan.cp}: framework=transformers runs data "
                            "parallelism only (use framework=native for TP/PP)")
        if par.fsdp:
            problems.append("parallelism.fsdp=true: framework=transformers shards through its DeepSpeed integration "
                            "here; set parallelism.zero_stage (1-3) instead")
        if spec.training.precision == "fp8":
            problems.append("training.precision=fp8: framework=transformers trains in bf16 or fp32")
        if spec.training.activation_checkpointing == "selective":
            problems.append("training.activation_checkpointing=selective: the Trainer checkpoints every layer; "
                            "use none or full")
        return problems

    def generated_config(self, spec: TprimatConf, plan: Plan) -> dict:
        return engine_config(spec, plan) if spec.parallelism.zero_stage else {}

    def run(self, spec: TprimatConf, plan: Plan, on_step: StepSink, run_dir=None) -> RunOutcome:
        # DeepSpeed needs a process group even on one rank
        group = single_process_group(pick_device(spec)) if spec.parallelism.zero_stage else nullcontext()
        with group:
            return RunOutcome(effective=run_repeats(spec, lambda repeat: self._run_once(spec, plan, on_step, repeat)))

    def _run_once(self, spec: TprimatConf, plan: Plan, on_step: StepSink, repeat: int) -> dict:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        from tprimat.backends.hf.model import build_model, with_lora

        tr = spec.training
        device = pick_device(spec)
        torch.manual_seed(tr.seed)
        # built before the arguments exist, so never under deepspeed.zero.Init: the engine partitions it at start
        # (zero.Init inside a tprimat rank validates the batch against a world of 1)
        model = build_model(spec.model)
        if lora_of(spec) is not None:
            model = with_lora(model, spec.model, lora_of(spec))
        recorder = step_recorder(spec, plan, device, on_step, repeat)
        with tempfile.TemporaryDirectory() as out:
            args = training_arguments(spec, plan, device, out)
            try:
                trainer = sequential_trainer(tr)(model=model, args=args,
                                                 train_dataset=SyntheticDataset(spec, tr.max_steps),
                                                 callbacks=[recorder])
                trainer.train()
            finally:  # the arguments register their DeepSpeed config process-wide: a later run must not inherit it
                unset_hf_deepspeed_config()
            effective = effective_settings(trainer.optimizer, args, "tprimat warmup_cosine (LambdaLR)")
            effective["distributed_type"] = str(trainer.accelerator.distributed_type)
            effective["trained_params"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
            effective["data_parallel_processes"] = trainer.accelerator.num_processes
            if trainer.is_deepspeed_enabled:
                effective["zero_stage"] = trainer.model_wrapped.zero_optimization_stage()
                effective["ds_config"] = args.hf_deepspeed_config.config
            return effective


def training_arguments(spec: TprimatConf, plan: Plan, device: torch.device, output_dir: str):
    """The Trainer's arguments, every one from the spec: batch, accumulation, clipping, precision, recompute."""
    from transformers import TrainingArguments

    tr = spec.training
    return TrainingArguments(
        output_dir=output_dir, max_steps=tr.max_steps, per_device_train_batch_size=tr.micro_batch_size,
        gradient_accumulation_steps=plan.grad_accum_steps, max_grad_norm=tr.optimizer.grad_clip,
        bf16=tr.precision == "bf16", use_cpu=device.type == "cpu", seed=tr.seed, data_seed=tr.seed,
        logging_steps=1, logging_first_step=True, save_strategy="no", report_to=[],
        gradient_checkpointing=tr.activation_checkpointing == "full", torch_compile=tr.compile,
        dataloader_num_workers=0, disable_tqdm=True, ddp_find_unused_parameters=False,
        deepspeed=engine_config(spec, plan) if spec.parallelism.zero_stage else None)


def sequential_trainer(tr):
    """The Trainer, reading the synthetic dataset in order (so every step sees the native backend's batch), with
    tprimat's AdamW and warm-up + cosine schedule. They are built where the Trainer asks for its own
    (``create_optimizer`` / ``create_scheduler``), since it refuses ready-made ones under DeepSpeed, whose engine
    then wraps them."""
    from transformers import Trainer

    class SequentialTrainer(Trainer):
        def _get_train_sampler(self, train_dataset=None):
            return torch.utils.data.SequentialSampler(train_dataset or self.train_dataset)

        def create_optimizer(self, model=None):
            if self.optimizer is None:
                self.optimizer = build_optimizer(model or self.model, tr)
                set_lr(self.optimizer, tr.optimizer.lr)  # LambdaLR scales this base lr by lr_at(step) / lr
            return self.optimizer

        def create_scheduler(self, num_training_steps: int, optimizer=None):
            if self.lr_scheduler is None:
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer,
                                                                      lambda s: lr_at(s, tr) / tr.optimizer.lr)
            return self.lr_scheduler

    return SequentialTrainer


def step_recorder(spec: TprimatConf, plan: Plan, device: torch.device, on_step: StepSink, repeat: int):
    """A TrainerCallback turning each optimizer step into a step record (device-synchronised time, memory)."""
    from transformers import TrainerCallback

    clock, probe = StepClock(device), MemoryProbe(device)
    pending: dict = {}

    class Recorder(TrainerCallback):
        def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
            pending["lr"] = optimizer.param_groups[0]["lr"]
            clock.start()

        def on_step_end(self, args, state, control, **kwargs):
            pending["step_time_s"] = clock.stop()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs and "step_time_s" in pending:
                step = state.global_step
                on_step(StepRecord(step=step, step_time_s=pending.pop("step_time_s"), tokens=plan.tokens_per_step,
                                   loss=float(logs["loss"]), lr=pending["lr"],
                                   grad_norm=float(logs["grad_norm"]) if "grad_norm" in logs else None,
                                   memory_gib=probe.current_gib(), peak_memory_gib=probe.peak_gib(),
                                   repeat=repeat, warmup=step <= spec.benchmark.warmup_steps))

    return Recorder()


BACKEND = TransformersBackend()
