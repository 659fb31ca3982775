"""Every training framework tprimat knows: the module of its adapter, what it is, the pip extra it needs.

Data only, so that validation can name the known frameworks without importing any of them;
``tprimat.backends.load`` imports an adapter when a run selects it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class FrameworkInfo:
    name: str
    module: str  # import path of the adapter; it defines BACKEND
    description: str
    extra: str = ""  # pip extra that installs what the adapter needs
    llama_style_only: bool = False  # its translation covers RMSNorm / RoPE / SwiGLU decoders without linear biases


FRAMEWORKS: dict[str, FrameworkInfo] = {}


def register(info: FrameworkInfo) -> None:
    if info.name in FRAMEWORKS:
        raise ValueError(f"framework {info.name!r} is registered twice")
    FRAMEWORKS[info.name] = info


register(FrameworkInfo("native", "tprimat.backends.native.backend",
                       "plain PyTorch decoder and training loop (CPU, CUDA, ROCm)"))
register(FrameworkInfo("transformers", "tprimat.backends.hf.backend", "Hugging Face Transformers Trainer",
                       "transformers"))
register(FrameworkInfo("deepspeed", "tprimat.backends.ds.backend", "DeepSpeed ZeRO 1-3", "deepspeed"))
for _name, _desc in (
    ("megatron", "Megatron-LM pretrain_gpt.py under torchrun"),
    ("primus", "AMD Primus experiment YAML + run_pretrain.sh"),
    ("nemo", "NeMo Framework recipe (NeMo 2 or Megatron-Bridge) in its own environment"),
    ("torchtitan", "torchtitan train with config overrides"),
    ("megatron_deepspeed", "Megatron-DeepSpeed pretrain_gpt.py under torchrun with a generated DeepSpeed config"),
):
    register(FrameworkInfo(_name, f"tprimat.backends.external.{_name}", _desc, llama_style_only=True))

LLAMA_STYLE = {"norm": "rmsnorm", "mlp": "swiglu", "position_embedding": "rope", "linear_bias": False}


def problem_with(name: str) -> Optional[str]:
    """Why ``framework.name`` cannot be used, or None when it names a known framework."""
    if name in FRAMEWORKS:
        return None
    return f"framework.name={name}: unknown backend; known: {', '.join(sorted(FRAMEWORKS))}"


def model_problem(name: str, model) -> Optional[str]:
    """Why framework ``name`` cannot train ``model`` (a ``ModelConf``): the external translations cover
    Llama-style decoders only, and a GPT-2 style model is refused by name rather than translated wrongly."""
    info = FRAMEWORKS.get(name)
    if info is None or not info.llama_style_only:
        return None
    other = {k: getattr(model, k) for k, v in LLAMA_STYLE.items() if getattr(model, k) != v}
    if not other:
        return None
    said = ", ".join(f"model.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in other.items())
    return (f"model.name={model.name} ({said}): framework={name} is translated for Llama-style decoders (RMSNorm, "
            "RoPE, SwiGLU, no linear biases) only; train it with framework=native, transformers or deepspeed")

