"""Backend registry: every framework tprimat knows, whether it is built here, and how to load it.

Backends are small adapters behind ``tprimat.backends.base.Backend``; each is imported only when
selected, so that heavy or optional frameworks never slow down or break configuration and planning.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from tprimat.backends.base import Backend


@dataclass(frozen=True)
class BackendInfo:
    name: str
    module: str  # import path of the adapter, "" while not built yet
    description: str
    extra: str = ""  # pip extra that installs what the adapter needs

    @property
    def built(self) -> bool:
        return bool(self.module)


REGISTRY: dict[str, BackendInfo] = {}


def register(info: BackendInfo) -> None:
    if info.name in REGISTRY:
        raise ValueError(f"backend {info.name!r} is registered twice")
    REGISTRY[info.name] = info


register(BackendInfo("native", "tprimat.backends.native.backend",
                     "plain PyTorch decoder and training loop (CPU, CUDA, ROCm)"))
register(BackendInfo("transformers", "tprimat.backends.hf.backend", "Hugging Face Transformers Trainer",
                     "transformers"))
register(BackendInfo("deepspeed", "tprimat.backends.ds.backend", "DeepSpeed ZeRO 1-3", "deepspeed"))
for _name, _desc in (
    ("megatron", "Megatron-LM pretrain_gpt.py under torchrun"),
    ("primus", "AMD Primus experiment YAML + run_pretrain.sh"),
    ("nemo", "NeMo Framework recipe (NeMo 2 or Megatron-Bridge) in its own environment"),
    ("torchtitan", "torchtitan train with config overrides"),
):
    register(BackendInfo(_name, f"tprimat.backends.external.{_name}", _desc))


class BackendUnavailable(RuntimeError):
    pass


def problem_with(name: str) -> str | None:
    """Why ``framework.name`` cannot be used, or None when it can."""
    info = REGISTRY.get(name)
    if info is None:
        return f"framework.name={name}: unknown backend; known: {', '.join(sorted(REGISTRY))}"
    if not info.built:
        return (f"framework.name={name}: the {info.description} backend is not built yet in tprimat "
                f"{_version()}; built: {', '.join(n for n, i in sorted(REGISTRY.items()) if i.built)}")
    return None


def load(name: str) -> Backend:
    problem = problem_with(name)
    if problem:
        raise BackendUnavailable(problem)
    info = REGISTRY[name]
    try:
        module = importlib.import_module(info.module)
    except ImportError as exc:
        hint = f" (pip install 'tprimat[{info.extra}]')" if info.extra else ""
        raise BackendUnavailable(f"framework.name={name}: not installed: {exc}{hint}") from exc
    return module.BACKEND


def _version() -> str:
    from tprimat import __version__

    return __version__
