"""A Lightning callback (Lightning 2 trainers, NeMo 2 included) that records optimizer steps as a tprimat result.

    trainer = L.Trainer(..., callbacks=[TprimatLightningCallback("outputs/mine", ["model=llama"], seq_length=8192)])

An optimizer step is the ``accumulate_grad_batches`` micro batches from the first one's ``on_train_batch_start``
to the last one's ``on_train_batch_end`` (device-synchronised). Its tokens: the token ids of those micro batches
(a tensor batch, or a dict's ``input_ids`` / ``tokens``) x the trainer's world size, else ``seq_length`` x
micro batch size x accumulation x world size; loss: the mean over the step's micro batches of what
``training_step`` returned (Lightning hands each one over divided by the accumulation: their sum); lr: the
first optimizer's. Rank 0 writes the result at ``on_train_end``, or a ``failed`` one on an exception.
"""

from __future__ import annotations

from typing import Optional

import lightning
import torch
from lightning.pytorch.callbacks import Callback

from tprimat.callbacks.recorder import Recorder, Step


def batch_tokens(batch) -> Optional[int]:
    """Token ids in one micro batch: a tensor batch, or a dict's ``input_ids`` / ``tokens``."""
    if isinstance(batch, dict):
        batch = batch.get("input_ids", batch.get("tokens"))
    elif isinstance(batch, (list, tuple)) and batch:
        batch = batch[0]
    return batch.numel() if isinstance(batch, torch.Tensor) else None


class TprimatLightningCallback(Callback):
    def __init__(self, out_dir, overrides: Optional[list[str]] = None, seq_length: Optional[int] = None,
                 warmup_steps: int = 1, wandb: str = "disabled") -> None:
        self.seq_length = seq_length
        self.recorder = Recorder(out_dir, overrides, framework="lightning",
                                 framework_version=f"lightning {lightning.__version__}",
                                 warmup_steps=warmup_steps, wandb=wandb)
        self.tokens: Optional[int] = 0
        self.loss: Optional[float] = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx % trainer.accumulate_grad_batches == 0:
            self.recorder.clock.start()
            self.tokens, self.loss = 0, 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        here = batch_tokens(batch)
        if here is None and self.seq_length:
            first = batch[0] if isinstance(batch, (list, tuple)) else batch
            here = len(first) * self.seq_length if hasattr(first, "__len__") else None
        self.tokens = self.tokens + here * trainer.world_size if here is not None and self.tokens is not None else None
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        self.loss = self.loss + float(loss) if isinstance(loss, torch.Tensor) and self.loss is not None else None
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return
        seconds = self.recorder.clock.stop()
        step = Step(self.tokens)
        step.loss = self.loss
        step.lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else None
        self.recorder.record(step, seconds)

    def on_train_end(self, trainer, pl_module):
        self.recorder.finish()

    def on_exception(self, trainer, pl_module, exception):
        self.recorder.finish(f"{type(exception).__name__}: {exception}")
