"""What every in-process backend shares: device choice, the repeat loop, seeded synthetic data, AdamW
parameter groups with the warm-up + cosine schedule, and the settings read back from a live optimizer.

Synthetic data (like Megatron's mock data): every even position holds a uniformly random token and the next
position a fixed, seeded permutation of it. A model that learns the permutation reaches a loss of about
ln(vocab)/2 from ln(vocab): a falling loss is evidence of real learning, and the data is identical for every
framework, rank layout and repeat. The schedule is Megatron-LM's: linear warm-up, cosine decay to min_lr.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from tprimat.measure.step import StepFn, run_measured
from tprimat.results.records import StepRecord
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf, TrainingConf


def pick_device(spec: TprimatConf) -> torch.device:
    """This rank's device: the current CUDA/ROCm device on GPU platforms, else the CPU."""
    if spec.platform.name in ("nvidia", "amd"):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def run_repeats(spec: TprimatConf, run_once: Callable[[int], dict]) -> dict:
    """``benchmark.repeats`` fresh measurements (``run_once(repeat)`` builds its own trainer); returns the
    settings the last repeat read back."""
    effective: dict = {}
    for repeat in range(spec.benchmark.repeats):
        effective = run_once(repeat)
    return effective


def measure_steps(step_fn: StepFn, spec: TprimatConf, plan: Plan, device: torch.device, repeat: int,
                  on_step: Callable[[StepRecord], None]) -> None:
    """One repeat of ``training.max_steps`` timed optimizer steps, the first ``warmup_steps`` marked warm-up."""
    run_measured(step_fn, spec.training.max_steps, plan.tokens_per_step, spec.benchmark.warmup_steps, repeat,
                 device, on_step)


class SyntheticTokens:
    def __init__(self, vocab_size: int, seq_length: int, seed: int, global_batch_size: int):
        self.vocab_size, self.seq_length, self.seed = vocab_size, seq_length, seed
        self.global_batch_size = global_batch_size
        self.successor = torch.randperm(vocab_size, generator=torch.Generator().manual_seed(seed))
        self._cached: tuple[int, torch.Tensor] | None = None

    def global_batch(self, step: int) -> torch.Tensor:
        """All ``global_batch_size`` sequences (+1 token for the targets) of optimizer step ``step``."""
        if self._cached is None or self._cached[0] != step:
            gen = torch.Generator().manual_seed(hash((self.seed, step)) & 0x7FFF_FFFF_FFFF_FFFF)
            tokens = torch.randint(self.vocab_size, (self.global_batch_size, self.seq_length + 1), generator=gen)
            tokens[:, 1::2] = self.successor[tokens[:, 0::2][:, : tokens[:, 1::2].shape[1]]]
            self._cached = (step, tokens)
        return self._cached[1]

    def rows(self, step: int, first_row: int, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) for rows [first_row, first_row + num_rows) of step ``step``'s global batch.

        Micro batch m of data-parallel rank r takes rows m * mbs * dp + r * mbs ...: every layout of micro
        batch size, accumulation and dp trains on the same global batch."""
        tokens = self.global_batch(step)[first_row: first_row + num_rows]
        return tokens[:, :-1], tokens[:, 1:]


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only (not on norms and biases), as Megatron-LM and torchtitan do."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


def lr_at(step: int, training: TrainingConf) -> float:
    """Learning rate for optimizer step ``step`` (0-based): linear warm-up, then cosine to min_lr."""
    opt = training.optimizer
    if opt.warmup_steps and step < opt.warmup_steps:
        return opt.lr * (step + 1) / opt.warmup_steps
    decay_steps = max(training.max_steps - opt.warmup_steps, 1)
    progress = min((step - opt.warmup_steps) / decay_steps, 1.0)
    return opt.min_lr + 0.5 * (opt.lr - opt.min_lr) * (1 + math.cos(math.pi * progress))


def build_optimizer(model: nn.Module, training: TrainingConf) -> torch.optim.Optimizer:
    """AdamW over ``param_groups`` at the schedule's first learning rate."""
    opt = training.optimizer
    return torch.optim.AdamW(param_groups(model, opt.weight_decay), lr=lr_at(0, training),
                             betas=(opt.beta1, opt.beta2), eps=opt.eps)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def optimizer_settings(optimizer) -> dict:
    """What an optimizer actually holds (unwrapping Accelerate / DeepSpeed wrappers): class, betas, eps, decay."""
    groups, inner = optimizer.param_groups, optimizer
    while hasattr(inner, "optimizer"):
        inner = inner.optimizer  # Accelerate's wrapper around DeepSpeed's ZeRO optimizer around the torch one
    return {"optimizer": type(inner).__name__, "betas": list(groups[0]["betas"]),
            "eps": groups[0]["eps"], "weight_decay": max(g["weight_decay"] for g in groups)}


def batch_phrase(micro_batch_size: int, seq_length: int, dp: int, grad_accum_steps: int, precision: str) -> str:
    return (f"{dp} data-parallel process(es), {grad_accum_steps} x {micro_batch_size} sequences of {seq_length} "
            f"per device and step, {precision}")


def restore_torch_linear() -> None:
    """ZeRO-3 puts its own function in place of torch.nn.functional.linear for the rest of the process ("This will
    persist unless manually reset": deepspeed/runtime/zero/partition_parameters.py, which keeps torch's as
    ``InsertPostInitMethodToModuleSubClasses.linear_bk``). Torch's is put back, or a later run in this process (a sweep
    point under Hydra's basic launcher) and a projection's operation trace go through DeepSpeed's linear: the trace
    of a decoder layer's backward held 7 more memory operations after one in-process ZeRO-3 run."""
    zero = sys.modules.get("deepspeed.runtime.zero.partition_parameters")
    saved = getattr(getattr(zero, "InsertPostInitMethodToModuleSubClasses", None), "linear_bk", None)
    current = getattr(torch.nn.functional.linear, "__module__", "") or ""
    if saved is not None and current.startswith("deepspeed."):  # DeepSpeed's (or its quantized wrapper): undone
        torch.nn.functional.linear = saved


class single_process_group:
    """DeepSpeed (alone or under the Trainer) always needs torch.distributed: a one-rank group on loopback when
    tprimat runs one process. The process environment is left as it was found: DeepSpeed and Accelerate write
    RANK, WORLD_SIZE, MASTER_PORT, ACCELERATE_USE_DEEPSPEED, ... into it, which would make a later launch from this
    process look like a torchrun rank, or a later plain Trainer run look like a DeepSpeed one."""

    def __init__(self, device: torch.device):
        self.device, self.created, self.tmp, self.environ = device, False, None, None

    def __enter__(self):
        self.environ = dict(os.environ)
        if not dist.is_initialized():
            self.tmp = tempfile.TemporaryDirectory()
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
            for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_WORLD_SIZE", "1")):
                os.environ.setdefault(key, value)
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo",
                                    init_method=f"file://{self.tmp.name}/rendezvous", rank=0, world_size=1)
            self.created = True
        return self

    def __exit__(self, *exc):
        if self.created:
            dist.destroy_process_group()
            self.tmp.cleanup()
            # DeepSpeed keeps a clone of the world group it was first given (deepspeed.utils.groups._WORLD_GROUP);
            # forget it with the group it belonged to, or the next run in this process (a sweep point) fails.
            groups = sys.modules.get("deepspeed.utils.groups")
            if groups is not None:
                groups._WORLD_GROUP = None
        restore_torch_linear()
        os.environ.clear()
        os.environ.update(self.environ)
        return False
