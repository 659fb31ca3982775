"""Build LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM / GPT2LMHeadModel from tprimat's model config
(no download)."""

from __future__ import annotations

import inspect

from tprimat.spec.schema import ModelConf, head_dim_of, padded_vocab

CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
           "mistral": ("MistralConfig", "MistralForCausalLM"), "gpt2": ("GPT2Config", "GPT2LMHeadModel")}


def rope_settings(cfg: ModelConf, config_cls) -> dict:
    scaling = None
    if cfg.rope_scaling_factor is not None:
        scaling = {"rope_type": "llama3", "factor": cfg.rope_scaling_factor,
                   "low_freq_factor": cfg.rope_low_freq_factor, "high_freq_factor": cfg.rope_high_freq_factor,
                   "original_max_position_embeddings": cfg.rope_original_max_position}
    if "rope_parameters" in inspect.signature(config_cls).parameters:  # transformers >= 5
        return {"rope_parameters": {**(scaling or {"rope_type": "default"}), "rope_theta": cfg.rope_theta}}
    return {"rope_theta": cfg.rope_theta, "rope_scaling": scaling}


def gpt2_config(cfg: ModelConf, config_cls):
    """GPT-2 with the padded vocabulary (as the native model: the GEMM-friendly rows, never a target)."""
    return config_cls(vocab_size=padded_vocab(cfg), n_positions=cfg.max_position_embeddings, n_embd=cfg.hidden_size,
                      n_layer=cfg.num_layers, n_head=cfg.num_attention_heads, n_inner=cfg.ffn_hidden_size,
                      activation_function="gelu_new", layer_norm_epsilon=cfg.rms_norm_eps, initializer_range=0.02,
                      tie_word_embeddings=cfg.tie_embeddings, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                      use_cache=False)


def hf_config(cfg: ModelConf):
    import transformers

    config_cls = getattr(transformers, CLASSES[cfg.family][0])
    if cfg.family == "gpt2":
        return gpt2_config(cfg, config_cls)
    kwargs = dict(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.ffn_hidden_size,
                  num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_attention_heads,
                  num_key_value_heads=cfg.num_kv_heads, head_dim=head_dim_of(cfg),
                  max_position_embeddings=cfg.max_position_embeddings, rms_norm_eps=cfg.rms_norm_eps,
                  tie_word_embeddings=cfg.tie_embeddings, initializer_range=0.02, use_cache=False,
                  **rope_settings(cfg, config_cls))
    if cfg.family == "llama":
        kwargs["attention_bias"] = cfg.qkv_bias
    if cfg.family == "mistral":
        kwargs["sliding_window"] = None
    return config_cls(**kwargs)


def build_model(cfg: ModelConf):
    import transformers

    model_cls = getattr(transformers, CLASSES[cfg.family][1])
    return model_cls._from_config(hf_config(cfg), attn_implementation="sdpa")


# training.lora.targets (Megatron-core's fused linears) as Hugging Face's modules of the same weights: Llama, Qwen2
# and Mistral keep q, k, v and the MLP's gate and up apart (PEFT adapts each with its own A and B); GPT-2 fuses
# q, k and v (c_attn) and names the attention's and the MLP's output projections alike (c_proj), so its targets are
# full module paths
HF_TARGETS = {"linear_qkv": ("q_proj", "k_proj", "v_proj"), "linear_proj": ("o_proj",),
              "linear_fc1": ("gate_proj", "up_proj"), "linear_fc2": ("down_proj",)}
GPT2_TARGETS = {"linear_qkv": ("attn.c_attn",), "linear_proj": ("attn.c_proj",), "linear_fc1": ("mlp.c_fc",),
                "linear_fc2": ("mlp.c_proj",)}


def with_lora(model, cfg: ModelConf, lora):
    """The model under PEFT's LoRA (``lora``: a ``LoraConf``): its base weights frozen, adapters of rank, alpha and
    dropout as set on ``lora.targets``, through PEFT's own ``LoraConfig`` and ``get_peft_model``."""
    from peft import LoraConfig, get_peft_model

    names = GPT2_TARGETS if cfg.family == "gpt2" else HF_TARGETS
    modules = [module for target in lora.targets for module in names[target]]
    if cfg.family == "gpt2":  # full paths, so that attn.c_proj is not mlp.c_proj
        modules = [name for name, _ in model.named_modules() if name.endswith(tuple(modules))]
    config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=modules,
                        bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, config)
