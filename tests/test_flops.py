"""FLOPs conventions and parameter counts against published numbers (FACTS.md section 1)."""

import pytest
from omegaconf import OmegaConf

from tests.conftest import compose_config
from tprimat.spec import flops
from tprimat.spec.schema import ModelConf


def model(name, **over):
    cfg = compose_config([f"model={name}"])
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConf), cfg.model, over))


def test_llama3_8b_flops_per_token_at_8192():
    m = model("llama")
    assert flops.flops_per_token(m, 8192) / 1e9 == pytest.approx(51.47, abs=0.01)
    assert flops.flops_per_token(m, 8192, flops.TORCHTITAN) / 1e9 == pytest.approx(57.91, abs=0.01)
    assert flops.flops_per_token(m, 8192, flops.SIX_N) / 1e9 == pytest.approx(45.03, abs=0.01)


@pytest.mark.parametrize("name,params", [("llama", 8_030_261_248), ("qwen", 7_615_616_512),
                                         ("mistral", 7_248_023_552), ("llama70b", 70_553_706_496)])
def test_parameter_counts_match_published_models(name, params):
    assert flops.param_counts(model(name))[0] == params


def test_primus_legacy_convention_reproduces_printed_tflops():
    """primus_4: Llama-2-7B width, 4 layers, GBS 256, s=4096, 8 GPUs, 2018.5 ms -> Primus printed 418.8."""
    m = model("llama", num_layers=4, ffn_hidden_size=11008, num_kv_heads=32, vocab_size=32000,
              rope_scaling_factor=None)
    tokens = 256 * 4096
    def per_gpu(conv):
        return flops.flops_per_token(m, 4096, conv) * tokens / (2.0185 * 1e12 * 8)

    assert per_gpu(flops.MEGATRON_LEGACY) == pytest.approx(418.75, abs=0.05)
    assert per_gpu(flops.MEGATRON) == pytest.approx(392.6, abs=0.05)


def test_unknown_convention_is_an_error():
    with pytest.raises(ValueError, match="unknown FLOPs convention"):
        flops.flops_per_token(model("llama_tiny"), 256, "palm")
