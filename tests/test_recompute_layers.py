"""training.recompute_num_layers: Megatron's full recompute of the first N layers of each pipeline stage (its
``recompute_method=block``), as AMD's MI300X LoRA submissions to MLPerf run it (ACG=full ACM=block ACL=21). The
rules by key, the translation accepted by Megatron-core's own TransformerConfig, and the memory of a recomputed
layer against the same model with every layer kept or every layer recomputed."""

import pytest

from tests.test_external import spec_plan
from tprimat.backends.external.megatron import megatron_settings
from tprimat.backends.external.nemo import values
from tprimat.compose import compose
from tprimat.spec.build import build_spec, spec_identity, spec_to_dict
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.memory import megatron_activation_bytes
from tprimat.spec.validate import validate

MI300X_LORA = ["platform=amd", "platform.gpu=mi300x", "model=llama2_70b", "framework=nemo", "parallelism.tp=1",
               "training.peft=lora", "training.precision=fp8", "training.seq_length=8192",
               "model.max_position_embeddings=8192", "training.global_batch_size=8", "training.micro_batch_size=1",
               "platform.devices_per_node=8"]


HW = DetectedHardware("cpu", "test", 1, 0.0, None)


def spec_of(*overrides):
    return build_spec(compose(list(overrides)), HW)


@pytest.mark.parametrize("overrides,expected", [
    (["framework=native", "training.activation_checkpointing=full", "training.recompute_num_layers=2"],
     "training.recompute_num_layers=2, training.activation_checkpointing=full, framework.name=native"),
    (["framework=nemo", "training.activation_checkpointing=selective", "training.recompute_num_layers=2"],
     "needs activation_checkpointing=full and a Megatron-core framework"),
    (["framework=megatron", "framework.path=.", "training.activation_checkpointing=full",
      "training.recompute_num_layers=5"], "training.recompute_num_layers=5: must be an integer in 1..4"),
])
def test_the_rules_name_the_key(overrides, expected):
    problems = validate(spec_of("model=llama_tiny", *overrides), HW, dry_run=True)
    assert any(expected in p for p in problems), problems


def test_megatron_core_accepts_the_block_method_as_translated():
    core = pytest.importorskip("megatron.core.transformer")
    spec, plan = spec_plan([*MI300X_LORA, "training.activation_checkpointing=full", "training.recompute_num_layers=21"])
    s = megatron_settings(spec, plan)
    assert (s["recompute_granularity"], s["recompute_method"], s["recompute_num_layers"]) == ("full", "block", 21)
    assert {k: values(spec)[k] for k in ("recompute_granularity", "recompute_method", "recompute_num_layers")} == \
        {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 21}
    config = core.TransformerConfig(num_layers=80, hidden_size=8192, num_attention_heads=64, bf16=True,
                                    recompute_granularity=s["recompute_granularity"],
                                    recompute_method=s["recompute_method"], recompute_num_layers=s["recompute_num_layers"])
    assert (config.recompute_method, config.recompute_num_layers) == ("block", 21)
    every, _ = spec_plan([*MI300X_LORA, "training.activation_checkpointing=full"])
    assert megatron_settings(every, plan)["recompute_method"] == "uniform"


def test_each_recomputed_layer_trades_its_saved_tensors_for_its_input():
    """Memory is linear in the layers recomputed (each recomputed layer keeps its input alone, and one layer is
    rebuilt in the backward whatever N is): from 1 to 21 layers frees 20/79 of what 1 to 80 frees; N = 80 is every
    layer (null)."""
    def activations(*extra):
        spec = spec_of(*MI300X_LORA, *extra)
        assert not [p for p in validate(spec, HW, dry_run=True) if "recompute_num_layers" in p]
        return megatron_activation_bytes(spec, grad_accum_steps=1)

    full = ["training.activation_checkpointing=full"]
    one, block, every = (activations(*full, f"training.recompute_num_layers={n}") for n in (1, 21, 80))
    assert every == activations(*full)
    assert (one - block) / (one - every) == pytest.approx(20 / 79, rel=1e-12)
    assert one > block > every and activations() > block  # (one recomputed layer rebuilt costs its input more)


def test_the_key_at_its_default_keeps_a_specs_identity():
    spec = spec_to_dict(spec_of("model=llama_tiny"))
    without = {**spec, "training": {k: v for k, v in spec["training"].items() if k != "recompute_num_layers"}}
    assert spec_identity(spec) == spec_identity(without)
