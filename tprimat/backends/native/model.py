"""A Llama / Qwen2 / Mistral decoder in plain PyTorch.

RMSNorm, rotary embeddings (with Llama 3.1 frequency scaling), grouped-query attention through
``scaled_dot_product_attention``, SwiGLU MLP, optional QKV bias (Qwen2), tied or untied embeddings.
This file holds only the model; how it is wrapped (checkpointing, compile, sharding) is parallelize.py.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tprimat.backends.native.init import initial_value
from tprimat.spec.schema import ModelConf, head_dim_of


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self.weight.float()).type_as(x)


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
    def __init__(self, cfg: ModelConf, head_dim: int):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_kv_heads, head_dim
        self.wq = nn.Linear(cfg.hidden_size, self.n_heads * head_dim, bias=cfg.qkv_bias)
        self.wk = nn.Linear(cfg.hidden_size, self.n_kv_heads * head_dim, bias=cfg.qkv_bias)
        self.wv = nn.Linear(cfg.hidden_size, self.n_kv_heads * head_dim, bias=cfg.qkv_bias)
        self.wo = nn.Linear(self.n_heads * head_dim, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        bsz, seq, _ = x.shape
        # Head counts come from the weights so that a tensor-parallel shard runs its local heads.
        q = self.wq(x).view(bsz, seq, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(bsz, seq, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(bsz, seq, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
        return self.wo(out.transpose(1, 2).reshape(bsz, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConf):
        super().__init__()
        self.w1 = nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size, bias=False)  # gate
        self.w3 = nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size, bias=False)  # up
        self.w2 = nn.Linear(cfg.ffn_hidden_size, cfg.hidden_size, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConf, head_dim: int):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attention = Attention(cfg, head_dim)
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Decoder(nn.Module):
    def __init__(self, cfg: ModelConf, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        head_dim = head_dim_of(cfg)
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        # A dict keyed by layer index keeps parameter names stable when pipeline stages drop layers.
        self.layers = nn.ModuleDict({str(i): Block(cfg, head_dim) for i in range(cfg.num_layers)})
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.register_buffer("inv_freq", rope_frequencies(cfg, head_dim), persistent=False)
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
        cos, sin = rope_cache(self.inv_freq, tokens.shape[1])
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        if self.output is None:
            return h
        return self.output(self.norm(h))
