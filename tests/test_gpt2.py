"""The GPT-2 family and the 70B proxy: parameter counts against Hugging Face's own GPT2LMHeadModel, FLOPs by
hand, the native GPT-2 computing what Hugging Face's computes from the same weights, training on CPU, and the
external frameworks refusing it by name."""

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import QUICK, ROOT, compose_config, run_inprocess
from tprimat.results.result import read_result
from tprimat.spec import flops
from tprimat.spec.schema import ModelConf, padded_vocab

GPT2 = {"gpt2": 124_439_808, "gpt2_medium": 354_823_168, "gpt2_large": 774_030_080, "gpt2_xl": 1_557_611_200}


def model(name, **over) -> ModelConf:
    cfg = compose_config([f"model={name}"])
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConf), cfg.model, over))


@pytest.mark.parametrize("name", list(GPT2))
def test_parameter_counts_equal_hugging_faces_gpt2(name):
    """The unpadded vocabulary (50,257) against GPT2LMHeadModel built from the same config on the meta device
    (its published sizes: 124M, 355M, 774M, 1.5B); padding adds 47 rows to the tied table."""
    from transformers import GPT2Config, GPT2LMHeadModel

    m = model(name, vocab_pad_multiple=1)
    with torch.device("meta"):
        hf = GPT2LMHeadModel(GPT2Config(n_layer=m.num_layers, n_embd=m.hidden_size, n_head=m.num_attention_heads))
    assert flops.param_counts(m)[0] == hf.num_parameters() == GPT2[name]
    padded = model(name)
    assert padded_vocab(padded) == 50_304 and flops.param_counts(padded)[0] == GPT2[name] + 47 * m.hidden_size


def test_gpt2_flops_per_token_by_hand():
    """Megatron's formula with a plain (2-matrix) MLP, MHA and the padded head, at seq 1024:
    dense = 12 layers x (4 x 768^2 attention + 2 x 768 x 3072 MLP) + 768 x 50,304 = 84,934,656 + 38,633,472;
    6 x dense = 741,408,768; causal attention 6 x 1024 x 768 x 12 = 56,623,104; total 798,031,872.
    Learned positions are a lookup: no FLOPs."""
    assert flops.flops_per_token(model("gpt2"), 1024) == 798_031_872
    # 6N (Hugging Face): 6 x parameters without the token and position tables
    non_embedding = GPT2["gpt2"] + 47 * 768 - (50_304 + 1024) * 768
    assert flops.param_counts(model("gpt2"))[1] == non_embedding == 85_056_000
    assert flops.flops_per_token(model("gpt2"), 1024, flops.SIX_N) == 6 * 85_056_000


def test_the_70b_proxy_has_the_70bs_layers_and_fewer_of_them():
    proxy, full = model("llama70b_proxy"), model("llama70b")
    assert (proxy.num_layers, full.num_layers) == (8, 80)
    assert flops.layer_params(proxy) == flops.layer_params(full) == 855_654_400
    assert model("llama70b_proxy", num_layers=16).num_layers == 16


def test_the_native_gpt2_computes_what_hugging_faces_computes():
    """gpt2_tiny's native weights copied into Hugging Face's GPT2LMHeadModel (its fused, transposed Conv1D
    layout): the same logits in fp32, so LayerNorm placement, GELU (tanh), learned positions, biases and tied
    embeddings are GPT-2's."""
    from transformers import GPT2LMHeadModel

    from tprimat.backends.hf.model import hf_config
    from tprimat.backends.native.model import Decoder

    cfg = model("gpt2_tiny")
    native = Decoder(cfg, seed=3).eval()
    hf = GPT2LMHeadModel(hf_config(cfg)).eval()
    state = {"transformer.wte.weight": native.tok_embeddings.weight, "transformer.wpe.weight": native.pos_embeddings.weight,
             "transformer.ln_f.weight": native.norm.weight, "transformer.ln_f.bias": native.norm.bias}
    for i, block in native.layers.items():
        a, f, p = block.attention, block.feed_forward, f"transformer.h.{i}."
        state.update({
            p + "ln_1.weight": block.attention_norm.weight, p + "ln_1.bias": block.attention_norm.bias,
            p + "ln_2.weight": block.ffn_norm.weight, p + "ln_2.bias": block.ffn_norm.bias,
            p + "attn.c_attn.weight": torch.cat([a.wq.weight, a.wk.weight, a.wv.weight]).T,
            p + "attn.c_attn.bias": torch.cat([a.wq.bias, a.wk.bias, a.wv.bias]),
            p + "attn.c_proj.weight": a.wo.weight.T, p + "attn.c_proj.bias": a.wo.bias,
            p + "mlp.c_fc.weight": f.w1.weight.T, p + "mlp.c_fc.bias": f.w1.bias,
            p + "mlp.c_proj.weight": f.w2.weight.T, p + "mlp.c_proj.bias": f.w2.bias})
    missing, unexpected = hf.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=False)
    assert unexpected == [] and set(missing) <= {"lm_head.weight"}  # tied to wte
    tokens = torch.randint(0, cfg.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = native(tokens), hf(tokens).logits
    assert ours.shape == theirs.shape == (2, 64, 2048)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_gpt2_tiny_trains_and_its_plan_states_the_padded_vocabulary(tmp_path):
    out = run_inprocess(tmp_path, ["model=gpt2_tiny", *QUICK, "training.max_steps=8", "training.seq_length=256"])
    assert out.status == "ok", out.result["error"]
    plan, steps = out.result["plan"], out.result["steps"]
    assert plan["vocab_size_padded"] == 2048 and out.result["spec"]["model"]["vocab_size"] == 2000
    # by hand from conf/model/gpt2_tiny.yaml, independent of the plan: the model's own parameters, counted live
    import yaml

    tiny = yaml.safe_load((ROOT / "conf" / "model" / "gpt2_tiny.yaml").read_text())
    h, layers, positions = tiny["hidden_size"], tiny["num_layers"], tiny["max_position_embeddings"]
    per_layer = 4 * h * h + 4 * h + 2 * h * tiny["ffn_hidden_size"] + tiny["ffn_hidden_size"] + h + 4 * h  # 2 LNs
    assert plan["params_total"] == 2048 * h + positions * h + layers * per_layer + 2 * h  # tied head, final LN
    assert steps[-1]["loss"] < steps[0]["loss"]


@pytest.mark.parametrize("framework", ["nemo", "megatron", "torchtitan"])
def test_external_frameworks_refuse_a_gpt2_by_name(tmp_path, framework):
    out = run_inprocess(tmp_path, ["model=gpt2", f"framework={framework}", "platform=nvidia", "platform.gpu=h100",
                                   "framework.path=.", "dry_run=true", "logging.wandb.mode=disabled"])
    assert out.status == "invalid"
    assert f"framework={framework} is translated for Llama-style decoders" in out.result["error"]
    assert "model.norm=layernorm" in out.result["error"] and "model.mlp=gelu" in out.result["error"]


def test_learned_positions_with_sequence_parallelism_are_refused(tmp_path):
    out = run_inprocess(tmp_path, ["model=gpt2_tiny", "platform=cpu", "platform.devices_per_node=2", "parallelism.tp=2",
                                   "parallelism.sequence_parallel=true", *QUICK])  # refused before any training
    assert out.status == "invalid" and "model.position_embedding=learned, parallelism.sequence_parallel=true" in \
        out.result["error"]


@pytest.mark.slow
@pytest.mark.parametrize("layout", [["platform.devices_per_node=2"],
                                    ["platform.devices_per_node=2", "parallelism.fsdp=true"],
                                    ["platform.devices_per_node=2", "parallelism.tp=2"],
                                    ["platform.devices_per_node=2", "parallelism.pp=2", "model.tie_embeddings=false"]],
                         ids=["DP", "FSDP", "TP", "PP"])
def test_the_gpt2_activation_estimate_matches_the_traced_layout(layout):
    """The estimate's GELU-MLP terms (one up projection and its GELU saved; four autocast input copies) against
    MemTracker's trace of the real GPT-2 layout over fake tensors."""
    from tests.test_meta_init import _spec_dict
    from tprimat.backends.native.deep import deep_check
    from tprimat.spec.memory import activation_bytes

    spec, plan, spec_dict = _spec_dict(["platform=nvidia", "platform.gpu=h100", "methodology=identical_config",
                                        "training.precision=bf16", "model=gpt2", "training.micro_batch_size=1",
                                        *layout])
    roles, error = deep_check(spec_dict, plan.pp, plan.dp, plan.tp)
    assert error is None
    traced = max(r["activations_gib"] for r in roles) * 2**30
    assert activation_bytes(spec, plan.grad_accum_steps, in_flight=1) == pytest.approx(traced, rel=0.05)


TIED_LAYOUTS = {"ddp": ["parallelism.tp=1"], "tp": ["parallelism.tp=2"], "fsdp": ["parallelism.fsdp=true"]}


def train_gpt2_tiny(tmp_path, *layout):
    """GPT-2 tiny, 5 steps on this CPU, run as launch.py runs it (in this process; ranks forked from its
    forkserver); its result as written."""
    out = run_inprocess(tmp_path, ["model=gpt2_tiny", "platform=cpu", "training.max_steps=5", "benchmark.warmup_steps=1",
                                   "training.optimizer.warmup_steps=1", "logging.wandb.mode=disabled", *layout])
    assert out.status == "ok", out.result["error"]
    return read_result(tmp_path / "result.json")


@pytest.fixture(scope="module")
def tied_layouts(tmp_path_factory):
    """GPT-2 tiny under DDP, TP and FSDP2 on two ranks, fp32 (read by the strategy and the tie tests)."""
    return {name: train_gpt2_tiny(tmp_path_factory.mktemp(name), "platform.devices_per_node=2",
                                   "training.precision=fp32", *layout)
            for name, layout in TIED_LAYOUTS.items()}


@pytest.mark.slow
@pytest.mark.parametrize("layout", [None, None, None,
                                    ["platform.devices_per_node=2", "parallelism.pp=2", "model.tie_embeddings=false"],
                                    ["framework=transformers"], ["framework=deepspeed", "parallelism.zero_stage=2"]],
                         ids=["ddp", "fsdp", "tp", "pp", "transformers", "deepspeed"])
def test_gpt2_tiny_trains_under_every_strategy_and_framework_that_builds_it(tmp_path, request, layout):
    """ddp, fsdp and tp: the tie test's fp32 runs (``tied_layouts``); the others launched here."""
    name = request.node.callspec.id
    result = request.getfixturevalue("tied_layouts")[name] if layout is None else train_gpt2_tiny(tmp_path, *layout)
    steps = result["steps"]
    assert steps[-1]["loss"] < steps[0]["loss"]


def test_a_tied_model_stays_tied_through_meta_initialisation():
    """Built on the meta device and materialised (as every native run is), GPT-2's output head is still the
    embedding's parameter: the trained model has the parameters the plan counts (Hugging Face's count)."""
    import torch

    from tprimat.backends.native.train import NativeTrainer, embeddings_tied
    from tprimat.compose import compose
    from tprimat.spec.build import build_spec
    from tprimat.spec.detect import DetectedHardware
    from tprimat.spec.plan import make_plan

    hw = DetectedHardware("none", "no live hardware", 0, 0.0, None)
    spec = build_spec(compose(["model=gpt2_tiny", "platform=cpu", "training.seq_length=32"]), hw)
    plan = make_plan(spec, hw)
    trainer = NativeTrainer(spec, plan, torch.device("cpu"))
    trainer.step(0)
    assert embeddings_tied(trainer.model) is True
    assert sum(p.numel() for p in trainer.model.parameters()) == plan.params_total
    assert trainer.effective_settings()["embeddings_tied"] is True


@pytest.mark.slow
def test_tensor_parallel_and_fsdp_keep_the_tie_and_the_losses_of_data_parallel(tied_layouts):
    """Under tp=2 the output head shares the vocabulary-sharded embedding (as Megatron's tied embedding does), and
    FSDP2 shards the one tied parameter: the same model as DDP's, so the same losses from the same initial
    values, and no untied warning. fp32 pinned: a layout's different reduction order moves bf16 losses by its
    rounding (about 1e-5 relative), which would hide a real difference at this tolerance."""
    losses = {name: [s["loss"] for s in result["steps"]] for name, result in tied_layouts.items()}
    assert all(result["framework"]["effective"]["embeddings_tied"] is True for result in tied_layouts.values())
    assert losses["tp"] == pytest.approx(losses["ddp"], rel=1e-5) and losses["fsdp"] == pytest.approx(losses["ddp"],
                                                                                                      rel=1e-5)
    assert not any("tie_embeddings" in w for result in tied_layouts.values() for w in result["warnings"])
