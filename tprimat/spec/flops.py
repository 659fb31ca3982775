"""Model FLOPs per token and parameter counts for a dense decoder (Llama / Qwen2 / Mistral).

The canonical convention is Megatron-LM's ``num_floating_point_operations`` (causal halving of core
attention; activation recompute not counted). The others are kept so that a framework's own printed
TFLOP/s can be put beside the canonical one with its convention named.
"""

from __future__ import annotations

from dataclasses import dataclass

from tprimat.spec.schema import ModelConf, head_dim_of

MEGATRON = "megatron"  # causal halving of core attention (Megatron-LM since 2025, NeMo 2 llama3())
MEGATRON_LEGACY = "megatron_legacy"  # no causal halving (older Megatron-LM, Primus builds of 2025)
TORCHTITAN = "torchtitan"  # 6 * non-embedding params + 12 * L * heads * head_dim * seq
SIX_N = "6n"  # 6 * non-embedding params (Hugging Face floating_point_ops), no attention term
CANONICAL = MEGATRON


@dataclass(frozen=True)
class Dims:
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @property
    def q_size(self) -> int:
        return self.head_dim * self.heads

    @property
    def kv_size(self) -> int:
        return self.head_dim * self.kv_heads


def dims(model: ModelConf) -> Dims:
    return Dims(model.num_layers, model.hidden_size, model.ffn_hidden_size, model.num_attention_heads,
                model.num_kv_heads, head_dim_of(model), model.vocab_size)


def layer_params(model: ModelConf) -> int:
    """One decoder layer: attention (with Qwen's QKV bias), SwiGLU FFN, two RMSNorms."""
    d = dims(model)
    attn = d.hidden * (d.q_size + 2 * d.kv_size) + d.q_size * d.hidden
    if model.qkv_bias:
        attn += d.q_size + 2 * d.kv_size
    return attn + 3 * d.hidden * d.ffn + 2 * d.hidden


def heaviest_stage_params(model: ModelConf, pp: int) -> int:
    """Parameters of the heaviest pipeline stage: its share of the layers plus the embedding (first stage) or
    the final norm and output head (last stage), whichever is larger; the whole model when pp == 1."""
    if pp == 1:
        return param_counts(model)[0]
    d = dims(model)
    return d.layers // pp * layer_params(model) + max(d.vocab * d.hidden, d.vocab * d.hidden + d.hidden)


def param_counts(model: ModelConf) -> tuple[int, int]:
    """(total, non-embedding) parameters; non-embedding excludes only the input token embedding."""
    d = dims(model)
    layer = layer_params(model)
    embedding = d.vocab * d.hidden
    output = 0 if model.tie_embeddings else d.vocab * d.hidden
    total = embedding + d.layers * layer + d.hidden + output
    return total, total - embedding


def flops_per_token(model: ModelConf, seq_length: int, convention: str = CANONICAL) -> float:
    d = dims(model)
    if convention in (MEGATRON, MEGATRON_LEGACY):
        dense = (d.hidden * d.ffn * 3 * d.layers
                 + (d.hidden * (d.q_size + 2 * d.kv_size) + d.q_size * d.hidden) * d.layers
                 + d.hidden * d.vocab)
        attention_factor = 1 if convention == MEGATRON else 2  # causal halving
        return 6.0 * dense + 6.0 * attention_factor * seq_length * d.q_size * d.layers
    _, non_embedding = param_counts(model)
    if convention == TORCHTITAN:
        return 6.0 * non_embedding + 12.0 * d.layers * d.heads * d.head_dim * seq_length
    if convention == SIX_N:
        return 6.0 * non_embedding
    raise ValueError(f"unknown FLOPs convention {convention!r}; known: {MEGATRON}, {MEGATRON_LEGACY}, "
                     f"{TORCHTITAN}, {SIX_N}")
