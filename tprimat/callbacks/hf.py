"""A Hugging Face ``TrainerCallback`` that records a Trainer's optimizer steps as a tprimat result.

    trainer = Trainer(..., callbacks=[TprimatCallback("outputs/mine", ["model=llama_tiny"], seq_length=2048)])

Each optimizer step is timed from ``on_step_begin`` to ``on_step_end`` (device-synchronised); its tokens are
the global batch (per-device batch x gradient accumulation x processes) x ``seq_length`` when given; loss and
learning rate are taken from the Trainer's logs of that step (set ``logging_steps=1`` to have them on every
step). The result is written by rank 0 at ``on_train_end``.
"""

from __future__ import annotations

from typing import Optional

from transformers import TrainerCallback

from tprimat.callbacks.recorder import Recorder, Step


class TprimatCallback(TrainerCallback):
    def __init__(self, out_dir, overrides: Optional[list[str]] = None, seq_length: Optional[int] = None,
                 warmup_steps: int = 1, wandb: str = "disabled") -> None:
        import transformers

        self.seq_length = seq_length
        self.recorder = Recorder(out_dir, overrides, framework="transformers",
                                 framework_version=f"transformers {transformers.__version__}",
                                 warmup_steps=warmup_steps, wandb=wandb)
        self.pending: Optional[tuple[Step, float]] = None  # a finished step waiting for its logs

    def _tokens(self, args) -> Optional[int]:
        if not self.seq_length:
            return None
        return args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size * self.seq_length

    def on_step_begin(self, args, state, control, **kwargs):
        self._flush()
        self.recorder.clock.start()

    def on_step_end(self, args, state, control, **kwargs):
        self.pending = (Step(self._tokens(args)), self.recorder.clock.stop())

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.pending is not None and logs and "loss" in logs:  # a step's log (not the end-of-training summary)
            step = self.pending[0]
            step.loss, step.lr, step.grad_norm = logs["loss"], logs.get("learning_rate"), logs.get("grad_norm")

    def on_train_end(self, args, state, control, **kwargs):
        self._flush()
        self.recorder.finish()

    def _flush(self) -> None:
        if self.pending is not None:
            step, seconds = self.pending
            self.recorder.record(step, seconds)
            self.pending = None

