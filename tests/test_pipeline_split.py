"""Megatron-core's uneven pipeline split (parallelism.account_for_embedding_in_pipeline_split and
account_for_loss_in_pipeline_split): the embedding and the loss each count as a layer, as Megatron-Bridge's Llama 3.1
405B recipe runs 126 layers over PP 8 x VP 8. Each stage's layers against Megatron-core's own
``get_num_layers_to_build``; the rules, the projection, the memory and the launch on hand-computed cases."""

from __future__ import annotations

import pytest

from tests.test_projection import LAYER_S, ROUND, WORK
from tprimat.backends.external.megatron import as_cli, megatron_settings
from tprimat.compose import compose
from tprimat.spec import flops
from tprimat.spec.build import build_spec
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.plan import make_plan
from tprimat.spec.projection import project
from tprimat.spec.validate import validate

HW = DetectedHardware("none", "test", 0, 0.0, None)
BOTH = ["parallelism.account_for_embedding_in_pipeline_split=true", "parallelism.account_for_loss_in_pipeline_split=true"]
L405B = ["platform=nvidia", "platform.gpu=h100", "framework=megatron", "model=llama405b", "platform.devices_per_node=8",
         "platform.nodes=128", "parallelism.tp=8", "parallelism.pp=8", "parallelism.cp=2", "parallelism.vp=8",
         "parallelism.sequence_parallel=true", "training.global_batch_size=512", "training.micro_batch_size=1",
         "training.precision=fp8", "training.activation_checkpointing=none"]


def spec_of(*overrides):
    return build_spec(compose(list(overrides)), HW)


@pytest.mark.parametrize("layers,pp,vp,embedding,loss", [(126, 8, 8, True, True), (126, 16, 4, True, True),
                                                         (127, 16, 1, True, False), (127, 8, 1, False, True),
                                                         (80, 4, 5, False, False)])
def test_each_stage_holds_the_layers_megatron_core_builds_there(layers, pp, vp, embedding, loss):
    """Megatron-core's own get_num_layers_to_build (the installed megatron-core), summed over a rank's virtual
    stages, against tprimat's split."""
    torch = pytest.importorskip("torch")
    core = pytest.importorskip("megatron.core.transformer")
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    config = core.TransformerConfig(num_layers=layers, hidden_size=256, num_attention_heads=8,
                                    pipeline_model_parallel_size=pp, pipeline_dtype=torch.bfloat16,
                                    virtual_pipeline_model_parallel_size=vp if vp > 1 else None,
                                    account_for_embedding_in_pipeline_split=embedding,
                                    account_for_loss_in_pipeline_split=loss)
    built = [sum(get_num_layers_to_build(config, vp_stage=v if vp > 1 else None, pp_rank=r) for v in range(vp))
             for r in range(pp)]
    assert flops.stage_layers(layers, pp, embedding, loss) == built


def test_126_layers_split_over_pp_8_x_vp_8_only_with_the_embedding_and_loss_counted():
    """126 is not a multiple of 64; 126 + 2 is: refused by key without the split, valid with it, and refused by
    key under a framework that cannot split so."""
    plain = [p for p in validate(spec_of(*L405B), HW, dry_run=True) if "divisible" in p]
    assert any(p.startswith("model.num_layers=126, parallelism.pp=8: num_layers must be divisible by pp")
               for p in plain), plain
    assert any("parallelism.vp=8, parallelism.pp=8, model.num_layers=126: an interleaved" in p for p in plain), plain
    assert not [p for p in validate(spec_of(*L405B, *BOTH), HW, dry_run=True) if "divisible" in p or "split" in p]
    titan = validate(spec_of(*L405B, *BOTH, "framework=torchtitan", "parallelism.vp=1", "parallelism.pp=2",
                             "parallelism.tp=8", "parallelism.cp=1"), HW, dry_run=True)
    assert any(p.startswith("parallelism.account_for_embedding_in_pipeline_split=true, "
                            "parallelism.account_for_loss_in_pipeline_split=true, framework.name=torchtitan: only the "
                            "Megatron-core frameworks") for p in titan), titan


def test_megatron_lm_is_told_the_split_and_the_virtual_stages_of_its_units():
    spec = spec_of(*L405B, *BOTH)
    settings = megatron_settings(spec, make_plan(spec, HW))
    assert settings["num_layers_per_virtual_pipeline_stage"] == 2  # (126 + 2) / (8 x 8), by hand
    argv = as_cli(settings)
    assert "--account-for-embedding-in-pipeline-split" in argv and "--account-for-loss-in-pipeline-split" in argv
    embedding_only = spec_of(*L405B, "model.num_layers=127", "parallelism.vp=1",
                             "parallelism.account_for_embedding_in_pipeline_split=true")
    argv = as_cli(megatron_settings(embedding_only, make_plan(embedding_only, HW)))
    assert "--account-for-embedding-in-pipeline-split" in argv and "--account-for-loss-in-pipeline-split" not in argv
    assert "--num-layers-per-virtual-pipeline-stage" not in argv


def test_the_heaviest_stage_is_a_middle_one_by_hand():
    """llama_tiny at 6 layers over pp 4 with both counted: 8 units, 2 a rank: [1, 2, 2, 1] layers. A layer of it has
    256 x (256 + 2 x 64) + 256 x 256 + 3 x 256 x 896 + 2 x 256 = 852,480 parameters; the output head and final norm
    2,048 x 256 + 256 = 524,544, the embedding 524,288: the middle ranks' 2 layers (1,704,960) outweigh the last
    rank's layer and head (1,377,024). The projection's micro batch is those 2 layers (0.063 s each, no head op in
    the work); the bubble 3 micro batches."""
    model = spec_of("model=llama_tiny", "model.num_layers=6").model
    assert flops.stage_layers(6, 4, True, True) == [1, 2, 2, 1]
    assert flops.heaviest_stage_params(model, 4, True, True) == 2 * 852_480
    spec = spec_of("platform=nvidia", "platform.gpu=h100", "model=llama_tiny", "model.num_layers=6",
                   "framework=megatron", "framework.path=.", "platform.devices_per_node=4", "parallelism.pp=4",
                   "training.global_batch_size=8", "training.micro_batch_size=2", "training.precision=bf16",
                   "training.activation_checkpointing=none", *BOTH)
    p = project(spec, WORK, ROUND, dp=1, accum=4, peak_tflops=None)
    assert p["micro_batch_s"] == pytest.approx(2 * LAYER_S)
    assert p["breakdown_s"]["compute_s"] == pytest.approx(4 * 2 * LAYER_S)
    assert p["breakdown_s"]["bubble_s"] == pytest.approx(3 * 2 * LAYER_S)


@pytest.mark.parametrize("head_tflop,slowest_s", [(0.5, 2 * LAYER_S), (10.0, LAYER_S + 0.1)])
def test_the_slowest_stage_sets_the_micro_batch_head_included(head_tflop, slowest_s):
    """The same [1, 2, 2, 1] split with an output head on the last stage: a 0.5-TFLOP head (0.005 s forward and
    backward at 100 TFLOP/s) leaves the middle stages' 2 layers slowest (0.126 s); a 10-TFLOP head (0.1 s) makes
    the last stage's layer and head (0.163 s) the slowest."""
    from tprimat.spec.projection import OpCost, Work

    half = head_tflop / 2 * 1e12
    work = Work({**WORK.parts, "head": {"fwd": [OpCost("matmul", half, 0.0)], "bwd": [OpCost("matmul", half, 0.0)]}})
    spec = spec_of("platform=nvidia", "platform.gpu=h100", "model=llama_tiny", "model.num_layers=6",
                   "framework=megatron", "framework.path=.", "platform.devices_per_node=4", "parallelism.pp=4",
                   "training.global_batch_size=8", "training.micro_batch_size=2", "training.precision=bf16",
                   "training.activation_checkpointing=none", *BOTH)
    assert project(spec, work, ROUND, dp=1, accum=4, peak_tflops=None)["micro_batch_s"] == pytest.approx(slowest_s)
