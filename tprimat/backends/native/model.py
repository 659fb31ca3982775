"""A Llama / Qwen2 / Mistral / GPT-2 decoder in plain PyTorch.

RMSNorm, rotary embeddings (with Llama 3.1 frequency scaling), grouped-query attention through
``scaled_dot_product_attention``, SwiGLU MLP, optional QKV bias (Qwen2), tied or untied embeddings; for GPT-2
(``model.norm=layernorm``, ``mlp=gelu``, ``position_embedding=learned``, ``linear_bias=true``) LayerNorm, a
learned position table, a GELU MLP and biases, under the same module names, so that every layout applies alike.
This file holds only the model; how it is wrapped (checkpointing, compile, sharding) is parallelize.py.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from tprimat.backends.native.init import initial_value
from tprimat.backends.native.lora import adapter, freeze_base
from tprimat.spec.schema import LoraConf, ModelConf, head_dim_of, padded_vocab


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self.weight.float()).type_as(x)


def make_norm(cfg: ModelConf) -> nn.Module:
    if cfg.norm == "layernorm":
        return nn.LayerNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
    return RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


def rope_frequencies(cfg: ModelConf, head_dim: int) -> torch.Tensor:
    """Inverse frequencies; with ``rope_scaling_factor`` set, Llama 3.1's piecewise scaling."""
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if cfg.rope_scaling_factor is None:
        return inv_freq.float()
    factor, original = cfg.rope_scaling_factor, cfg.rope_original_max_position
    low_wavelen = original / cfg.rope_low_freq_factor
    high_wavelen = original / cfg.rope_high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    smooth = (original / wavelen - cfg.rope_low_freq_factor) / (cfg.rope_high_freq_factor - cfg.rope_low_freq_factor)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    medium = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
    return torch.where(medium, blended, scaled).float()


def rope_cache(inv_freq: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=inv_freq.device), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)  # [seq, head_dim], rotate-half layout (as HF Llama)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos + rotated * sin).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConf, head_dim: int, lora: Optional[LoraConf] = None):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_kv_heads, head_dim
        qkv_bias = cfg.qkv_bias or cfg.linear_bias
        self.wq = nn.Linear(cfg.hidden_size, self.n_heads * head_dim, bias=qkv_bias)
        self.wk = nn.Linear(cfg.hidden_size, self.n_kv_heads * head_dim, bias=qkv_bias)
        self.wv = nn.Linear(cfg.hidden_size, self.n_kv_heads * head_dim, bias=qkv_bias)
        self.wo = nn.Linear(self.n_heads * head_dim, cfg.hidden_size, bias=cfg.linear_bias)
        qkv_out = (self.n_heads + 2 * self.n_kv_heads) * head_dim
        self.lora_qkv = adapter("linear_qkv", lora, cfg.hidden_size, qkv_out)
        self.lora_proj = adapter("linear_proj", lora, self.n_heads * head_dim, cfg.hidden_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        bsz, seq, _ = x.shape
        # Head counts come from the weights so that a tensor-parallel shard runs its local heads.
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        if self.lora_qkv is not None:
            dq, dk, dv = self.lora_qkv(x).split([q.shape[-1], k.shape[-1], v.shape[-1]], dim=-1)
            q, k, v = q + dq, k + dk, v + dv
        q = q.view(bsz, seq, -1, self.head_dim).transpose(1, 2)
        k = k.view(bsz, seq, -1, self.head_dim).transpose(1, 2)
        v = v.view(bsz, seq, -1, self.head_dim).transpose(1, 2)
        if cos is not None:  # rotary positions (learned positions were added to the embeddings)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
        out = out.transpose(1, 2).reshape(bsz, seq, -1)
        if self.lora_proj is not None:
            return self.wo(out) + self.lora_proj(out)
        return self.wo(out)


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x); GELU (GPT-2, tanh approximation): w2(gelu(w1 x))."""

    def __init__(self, cfg: ModelConf, lora: Optional[LoraConf] = None):
        super().__init__()
        self.gated = cfg.mlp == "swiglu"
        self.w1 = nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size, bias=cfg.linear_bias)  # gate (SwiGLU) | up
        if self.gated:
            self.w3 = nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size, bias=cfg.linear_bias)  # up
        self.w2 = nn.Linear(cfg.ffn_hidden_size, cfg.hidden_size, bias=cfg.linear_bias)  # down
        fc1_out = cfg.ffn_hidden_size * (2 if self.gated else 1)  # Megatron's linear_fc1: gate and up fused
        self.lora_fc1 = adapter("linear_fc1", lora, cfg.hidden_size, fc1_out)
        self.lora_fc2 = adapter("linear_fc2", lora, cfg.ffn_hidden_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = self.w1(x)  # gate (SwiGLU) | up
        second = self.w3(x) if self.gated else None  # up
        if self.lora_fc1 is not None:  # one adapter over Megatron's fused fc1: [gate; up]
            deltas = self.lora_fc1(x).split(first.shape[-1], dim=-1)
            first = first + deltas[0]
            second = second + deltas[1] if self.gated else None
        h = F.silu(first) * second if self.gated else F.gelu(first, approximate="tanh")
        return self.w2(h) if self.lora_fc2 is None else self.w2(h) + self.lora_fc2(h)


class Block(nn.Module):
    def __init__(self, cfg: ModelConf, head_dim: int, lora: Optional[LoraConf] = None):
        super().__init__()
        self.attention_norm = make_norm(cfg)
        self.attention = Attention(cfg, head_dim, lora)
        self.ffn_norm = make_norm(cfg)
        self.feed_forward = FeedForward(cfg, lora)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Decoder(nn.Module):
    def __init__(self, cfg: ModelConf, seed: int = 0, lora: Optional[LoraConf] = None):
        super().__init__()
        self.cfg = cfg
        head_dim = head_dim_of(cfg)
        self.tok_embeddings = nn.Embedding(padded_vocab(cfg), cfg.hidden_size)
        self.learned_positions = cfg.position_embedding == "learned"
        self.pos_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size) \
            if self.learned_positions else None
        # A dict keyed by layer index keeps parameter names stable when pipeline stages drop layers.
        self.layers = nn.ModuleDict({str(i): Block(cfg, head_dim, lora) for i in range(cfg.num_layers)})
        self.norm = make_norm(cfg)
        self.output = nn.Linear(cfg.hidden_size, padded_vocab(cfg), bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.register_buffer("inv_freq", rope_frequencies(cfg, head_dim), persistent=False)
        if lora is not None:
            freeze_base(self)
        if self.inv_freq.device.type != "meta":  # on the meta device, init.materialize fills each rank's shards
            self.init_weights(seed)

    def init_weights(self, seed: int) -> None:
        """Every parameter from ``init.initial_value``: the same values a laid-out model's shards get."""
        with torch.no_grad():
            for name, param in self.named_parameters():
                param.copy_(initial_value(name, param.shape, self.cfg, seed, param.device))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids -> logits. A pipeline stage without embeddings takes hidden states instead, and one
        without the output head returns hidden states (parallelize.py removes those modules)."""
        cos, sin = (None, None) if self.learned_positions else rope_cache(self.inv_freq, tokens.shape[1])
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        if self.pos_embeddings is not None:
            h = h + self.pos_embeddings(torch.arange(tokens.shape[1], device=tokens.device))
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        if self.output is None:
            return h
        return self.output(self.norm(h))
