"""Every training framework tprimat knows: the module of its adapter, what it is, the pip extra it needs.

Data only, so that validation can name the known frameworks without importing any of them;
``tprimat.backends.load`` imports an adapter when a run selects it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from tprimat.spec.schema import ModelConf, freeze


@dataclass(frozen=True)
class FrameworkInfo:
    name: str
    module: str  # import path of the adapter; it defines BACKEND
    description: str
    extra: str = ""  # pip extra that installs what the adapter needs
    llama_style_only: bool = False  # its translation covers RMSNorm / RoPE / SwiGLU decoders without linear biases
    # Megatron's vocabulary padding: embedding and output rows rounded up to vocab_divisible_by x TP (Megatron-LM's
    # and Megatron-DeepSpeed's _vocab_size_with_padding, over make_vocab_size_divisible_by, which tprimat passes);
    # 0: the model's own rows (model.vocab_pad_multiple)
    vocab_divisible_by: int = 0
    lora: str = ""  # how training.peft=lora reaches it (its own API); "": it has none and refuses the key


FRAMEWORKS: dict[str, FrameworkInfo] = {}


def register(info: FrameworkInfo) -> None:
    if info.name in FRAMEWORKS:
        raise ValueError(f"framework {info.name!r} is registered twice")
    FRAMEWORKS[info.name] = info


register(FrameworkInfo("native", "tprimat.backends.native.backend",
                       "plain PyTorch decoder and training loop (CPU, CUDA, ROCm)",
                       lora="tprimat.backends.native.lora's adapters"))
register(FrameworkInfo("transformers", "tprimat.backends.hf.backend", "Hugging Face Transformers Trainer",
                       "transformers", lora="PEFT's LoraConfig and get_peft_model"))
register(FrameworkInfo("deepspeed", "tprimat.backends.ds.backend", "DeepSpeed ZeRO 1-3", "deepspeed"))
# NeMo pads nothing here: tprimat sets the model's vocab_size, which NeMo 2's GPTConfig.configure_model takes as
# preset (nemo_toolkit 2.7.3: get_vocab_size only without one) and Megatron-Bridge's _validate_and_set_vocab_size
# answers with should_pad_vocab=False (0.3.1 to 0.6). Primus builds Megatron-LM's tokenizer, which pads.
for _name, _desc, _divisible_by in (
    ("megatron", "Megatron-LM pretrain_gpt.py under torchrun", 128),
    ("primus", "AMD Primus experiment YAML + run_pretrain.sh", 128),
    ("nemo", "NeMo Framework recipe (NeMo 2 or Megatron-Bridge) in its own environment", 0),
    ("torchtitan", "torchtitan train with config overrides", 0),
    ("megatron_deepspeed", "Megatron-DeepSpeed pretrain_gpt.py under torchrun with a generated DeepSpeed config",
     128),
):
    register(FrameworkInfo(_name, f"tprimat.backends.external.{_name}", _desc, llama_style_only=True,
                           vocab_divisible_by=_divisible_by,
                           lora="Megatron-Bridge's cfg.peft (flavour bridge) or NeMo 2's llm.finetune recipe.peft (flavour "
                           "nemo2), from framework.pretrained_checkpoint"
                           if _name == "nemo" else ""))



def vocab_multiple(spec) -> int:
    """The multiple the run's embedding and output rows are rounded up to: the model's own
    (``model.vocab_pad_multiple``), and for a framework that pads for tensor parallelism, its
    ``vocab_divisible_by`` x ``parallelism.tp`` too (their least common multiple, which such a framework builds
    when given ``make_vocab_size_divisible_by = multiple / tp``)."""
    own = max(1, spec.model.vocab_pad_multiple)
    info = FRAMEWORKS.get(spec.framework.name)
    if info is None or not info.vocab_divisible_by:
        return own
    return math.lcm(own, info.vocab_divisible_by * spec.parallelism.tp)


def model_as_built(spec) -> ModelConf:
    """``spec.model`` as its framework builds it (the vocabulary padded by ``vocab_multiple``): what parameter
    counts, FLOPs and memory are planned from. The spec itself is left as written (its identity unchanged)."""
    multiple = vocab_multiple(spec)
    if multiple == spec.model.vocab_pad_multiple:
        return spec.model
    return freeze(dataclasses.replace(spec.model, vocab_pad_multiple=multiple))


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

