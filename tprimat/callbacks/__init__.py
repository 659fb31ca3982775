"""Record users' own training scripts as tprimat results: ``Recorder`` (a context manager for plain PyTorch
loops) and ``TprimatCallback`` (a Hugging Face ``TrainerCallback``, imported from ``tprimat.callbacks.hf``)."""

from tprimat.callbacks.recorder import Recorder, Step

__all__ = ["Recorder", "Step"]
