"""Model FLOPs per token and parameter counts for a dense decoder (Llama / Qwen2 / Mistral / GPT-2).

Gated (SwiGLU: gate, up, down) and plain (GELU: up, down) MLPs; learned position embeddings add parameters
(an embedding, as the token table) but no matmul FLOPs; the output head's FLOPs use the padded vocabulary,
as Megatron-LM's ``padded_vocab_size`` does.

The canonical convention is Megatron-LM's ``num_floating_point_operations`` (causal halving of core
attention; activation recompute not counted). The others are kept so that a framework's own printed
TFLOP/s can be put beside the canonical one with its convention named.
"""

from __future__ import annotations

from dataclasses import dataclass

from tprimat.spec.schema import ModelConf, head_dim_of, padded_vocab

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
                model.num_kv_heads, head_dim_of(model), padded_vocab(model))


def mlp_matrices(model: ModelConf) -> int:
    """Weight matrices of hidden x ffn in one MLP: 3 gated (gate, up, down), 2 plain (up, down)."""
    return 3 if model.mlp == "swiglu" else 2


def norm_params(model: ModelConf) -> int:
    return model.hidden_size * (2 if model.norm == "layernorm" else 1)  # LayerNorm: weight and bias


def layer_params(model: ModelConf) -> int:
    """One decoder layer: attention (with Qwen's QKV bias or GPT-2's biases), the MLP, two norms."""
    d = dims(model)
    attn = d.hidden * (d.q_size + 2 * d.kv_size) + d.q_size * d.hidden
    mlp = mlp_matrices(model) * d.hidden * d.ffn
    if model.qkv_bias or model.linear_bias:
        attn += d.q_size + 2 * d.kv_size
    if model.linear_bias:
        attn += d.hidden
        mlp += d.ffn * (mlp_matrices(model) - 1) + d.hidden
    return attn + mlp + 2 * norm_params(model)


def lora_layer_params(model: ModelConf, lora) -> int:
    """One decoder layer's LoRA adapters (``lora``: a ``LoraConf``): rank x (in + out) per target, Megatron-core's
    fused linears (QKV; FC1 gate and up together when gated) each one adapter."""
    d = dims(model)
    fc1_out = d.ffn * (mlp_matrices(model) - 1)
    shapes = {"linear_qkv": (d.hidden, d.q_size + 2 * d.kv_size), "linear_proj": (d.q_size, d.hidden),
              "linear_fc1": (d.hidden, fc1_out), "linear_fc2": (d.ffn, d.hidden)}
    return sum(lora.rank * sum(shapes[target]) for target in lora.targets)


def embedding_params(model: ModelConf) -> int:
    """The input tables: tokens (padded vocabulary) and, for learned positions, positions."""
    positions = model.max_position_embeddings if model.position_embedding == "learned" else 0
    return (padded_vocab(model) + positions) * model.hidden_size


def stage_layers(num_layers: int, pp: int, embedding: bool = False, loss: bool = False) -> list[int]:
    """Decoder layers on each pipeline rank: an even split, or Megatron-core's uneven one where the embedding
    (first rank) and the loss (last rank) count as a layer each (``get_num_layers_to_build``, core_v0.16.1:
    (layers + embedding + loss) / pp per rank, one fewer on the first and the last)."""
    if pp <= 1:
        return [num_layers]
    per = -(-(num_layers + embedding + loss) // pp)  # exact where validation holds; rounded up where it does not
    return [per - embedding, *[per] * (pp - 2), per - loss]


def stages_of(spec) -> list[int]:
    """Each pipeline rank's decoder layers under a spec's pp and Megatron split (``stage_layers``)."""
    par = spec.parallelism
    return stage_layers(spec.model.num_layers, par.pp, par.account_for_embedding_in_pipeline_split,
                        par.account_for_loss_in_pipeline_split)


def heaviest_stage_params(model: ModelConf, pp: int, embedding: bool = False, loss: bool = False) -> int:
    """Parameters of the heaviest pipeline stage: its layers plus the embedding (first stage) or the final norm
    and output head (last stage); the whole model when pp == 1. ``embedding``, ``loss``: Megatron's uneven split."""
    if pp == 1:
        return param_counts(model)[0]
    d = dims(model)
    layers, per_layer = stage_layers(d.layers, pp, embedding, loss), layer_params(model)
    head = d.vocab * d.hidden + norm_params(model)
    return max(layers[0] * per_layer + embedding_params(model), *(n * per_layer for n in layers[1:-1]),
               layers[-1] * per_layer + head)


def trained_stage_params(model: ModelConf, pp: int, lora=None, embedding: bool = False, loss: bool = False) -> int:
    """Parameters of the heaviest stage that have gradients and optimizer state: all of them, or (``lora``) the
    stage's adapters alone."""
    if lora is None:
        return heaviest_stage_params(model, pp, embedding, loss)
    return lora_layer_params(model, lora) * max(stage_layers(model.num_layers, pp, embedding, loss))


def param_counts(model: ModelConf) -> tuple[int, int]:
    """(total, non-embedding) parameters; non-embedding excludes the input tables (tokens, learned positions)."""
    d = dims(model)
    embedding = embedding_params(model)
    output = 0 if model.tie_embeddings else d.vocab * d.hidden
    total = embedding + d.layers * layer_params(model) + norm_params(model) + output
    return total, total - embedding


def flops_per_token(model: ModelConf, seq_length: int, convention: str = CANONICAL, lora=None) -> float:
    """Training FLOPs per token. ``lora`` (a ``LoraConf``: the base frozen): a frozen weight's GEMM runs forward
    and for its input's gradient only (4, not 6, FLOPs per weight per token: no weight gradient), core attention
    still forward and backward (its inputs feed trained adapters), and each adapter is trained whole (6 per
    parameter); Megatron's convention otherwise."""
    d = dims(model)
    if convention in (MEGATRON, MEGATRON_LEGACY):
        dense = (d.hidden * d.ffn * mlp_matrices(model) * d.layers
                 + (d.hidden * (d.q_size + 2 * d.kv_size) + d.q_size * d.hidden) * d.layers
                 + d.hidden * d.vocab)
        attention_factor = 1 if convention == MEGATRON else 2  # causal halving
        attention = 6.0 * attention_factor * seq_length * d.q_size * d.layers
        if lora is not None:
            return 4.0 * dense + attention + 6.0 * lora_layer_params(model, lora) * d.layers
        return 6.0 * dense + attention
    _, non_embedding = param_counts(model)
    if convention == TORCHTITAN:
        return 6.0 * non_embedding + 12.0 * d.layers * d.heads * d.head_dim * seq_length
    if convention == SIX_N:
        return 6.0 * non_embedding
    raise ValueError(f"unknown FLOPs convention {convention!r}; known: {MEGATRON}, {MEGATRON_LEGACY}, "
                     f"{TORCHTITAN}, {SIX_N}")
