"""The Hugging Face ``config.json`` that Megatron-Bridge's and NeMo 2's recipes read at import (their
``AutoBridge.from_hf_pretrained(<repo>)`` / ``HFAutoConfig``), for an offline cache: meta-llama's repositories are
gated and this machine reaches no hub. Each is the model's published config.json, its architecture fields as the
repository states them (the source beside each); tprimat overrides every architecture value on the recipe anyway,
so these only let the recipe function run, and the rehearsal reads back what the recipe then holds."""

from __future__ import annotations

import json
from pathlib import Path

# huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "vocab_size": 128256, "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
    "mlp_bias": False, "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128001,
    "initializer_range": 0.02}
CONFIGS = {
    "meta-llama/Meta-Llama-3.1-8B": LLAMA31_8B,
    # huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json: the 8B's but for these
    "meta-llama/Meta-Llama-3.1-70B": {**LLAMA31_8B, "hidden_size": 8192, "intermediate_size": 28672,
                                      "num_attention_heads": 64, "num_hidden_layers": 80},
    # huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json: Llama 3.1 8B's but for these
    "meta-llama/Meta-Llama-3-8B": {**LLAMA31_8B, "max_position_embeddings": 8192, "rope_scaling": None},
    # huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json
    "Qwen/Qwen2.5-7B": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
        "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "vocab_size": 152064,
        "tie_word_embeddings": False, "hidden_act": "silu", "sliding_window": 131072, "max_window_layers": 28,
        "use_sliding_window": False, "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151643,
        "initializer_range": 0.02},
    # huggingface.co/mistralai/Mistral-7B-v0.3/blob/main/config.json
    "mistralai/Mistral-7B-v0.3": {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
        "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": None,
        "vocab_size": 32768, "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02},
}
# Other names the recipes ask for, the same published files
ALIASES = {"meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
           "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B"}


def write_cache(home: Path) -> Path:
    """An offline Hugging Face cache (HF_HOME=home, HF_HUB_OFFLINE=1) holding each config.json, as the hub's
    client lays out a download: hub/models--org--name/{refs/main, snapshots/<revision>/config.json}."""
    revision = "0" * 40
    for repo, source in {**{r: r for r in CONFIGS}, **ALIASES}.items():
        folder = home / "hub" / ("models--" + repo.replace("/", "--"))
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / "main").write_text(revision)
        snapshot = folder / "snapshots" / revision
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / "config.json").write_text(json.dumps(CONFIGS[source], indent=2) + "\n")
    return home
