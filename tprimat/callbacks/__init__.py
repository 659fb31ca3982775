"""Record users' own training scripts as tprimat results: ``Recorder`` (a context manager for plain PyTorch
loops), ``TprimatCallback`` (a Hugging Face ``TrainerCallback``, from ``tprimat.callbacks.hf``) and
``TprimatLightningCallback`` (Lightning 2, from ``tprimat.callbacks.lightning``)."""

from tprimat.callbacks.recorder import Recorder, Step

__all__ = ["Recorder", "Step"]
