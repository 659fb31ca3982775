"""LoRA fine-tuning (training.peft=lora): the native adapters against PEFT's, the frozen base read back from a
trained model, the projection's trace and the memory model against hand counts, the rules by key."""

from pathlib import Path

import pytest
import torch

from tests.conftest import QUICK, run_inprocess
from tests.test_training import trainer_for
from tprimat.backends.native.model import Decoder
from tprimat.backends.native.opcount import trace_work
from tprimat.compose import compose
from tprimat.spec.build import build_spec, spec_identity, spec_to_dict
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.memory import GIB
from tprimat.spec.plan import make_plan
from tprimat.spec.validate import validate

TINY = ["model=llama_tiny", "training.seq_length=64"]
LORA = ["training.peft=lora"]
HW = DetectedHardware("cpu", "test", 1, 0.0, None)
# llama_tiny by hand: hidden 256, 8 query heads and 2 key-value heads of 32, FFN 896, 4 layers; rank 16
QKV_OUT = (8 + 2 * 2) * 32  # 384
ATTENTION_ADAPTERS = 16 * (256 + QKV_OUT) + 16 * (256 + 256)  # linear_qkv, linear_proj: 18,432 per layer


def spec_of(*overrides):
    return build_spec(compose(list(overrides)), HW)


def test_a_lora_model_starts_as_the_model_it_adapts():
    """B starts at zero (Hu et al. 2021), so the adapted model's logits are the base model's, and every base
    parameter keeps its name and initial value."""
    spec = spec_of(*TINY, *LORA)
    base, adapted = Decoder(spec.model, 7), Decoder(spec.model, 7, spec.training.lora)
    tokens = torch.randint(0, spec.model.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(adapted(tokens), base(tokens), rtol=0, atol=0)
    adapted_params = dict(adapted.named_parameters())
    for name, param in base.named_parameters():
        assert torch.equal(adapted_params[name], param), name
    extra = sorted(set(adapted_params) - set(dict(base.named_parameters())))
    assert len(extra) == 4 * 2 * 2 and all(".lora_" in name for name in extra)  # 4 layers x 2 targets x (A, B)
    assert sorted(n for n, p in adapted.named_parameters() if p.requires_grad) == extra


def test_the_native_adapter_computes_what_peft_computes():
    """The same A and B (B non-zero) in PEFT's own LoRA layer around a copy of the attention's output projection:
    the native wo(x) + lora_proj(x) equals PEFT's output (dropout off in eval mode)."""
    peft = pytest.importorskip("peft")
    spec = spec_of(*TINY, *LORA, "training.lora.targets=[linear_proj]")
    attention = Decoder(spec.model, 3, spec.training.lora).layers["0"].attention.eval()
    with torch.no_grad():
        attention.lora_proj.b.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))

    holder = torch.nn.Module()
    holder.o = torch.nn.Linear(256, 256, bias=False)
    holder.o.weight.data.copy_(attention.wo.weight)
    config = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.1, target_modules=["o"])
    holder = peft.inject_adapter_in_model(config, holder).eval()
    holder.o.lora_A["default"].weight.data.copy_(attention.lora_proj.a.weight)
    holder.o.lora_B["default"].weight.data.copy_(attention.lora_proj.b.weight)
    x = torch.randn(2, 5, 256, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(attention.wo(x) + attention.lora_proj(x), holder.o(x))


def test_a_lora_run_trains_the_adapters_alone():
    """Steps of a real LoRA run: every base weight bitwise as it started, every adapter's B moved off zero, the
    loss falls with adapters on all four targets, and the live model's trained parameters are the hand count."""
    everything = "training.lora.targets=[linear_qkv,linear_proj,linear_fc1,linear_fc2]"
    trainer = trainer_for(["model=llama_tiny", *LORA, everything, "training.precision=fp32"])  # on any CPU, as measured
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    losses = [trainer.step(s)[0].item() for s in range(12)]
    for name, param in trainer.model.named_parameters():
        if ".lora_" not in name:
            assert torch.equal(param, before[name]), name
        elif name.endswith(".b.weight"):
            assert param.abs().sum() > 0, name
    assert sum(losses[-3:]) / 3 < losses[0] - 0.03, losses
    fc = 16 * (256 + 2 * 896) + 16 * (896 + 256)  # linear_fc1 (gate and up fused), linear_fc2
    assert trainer.effective_settings()["trained_params"] == 4 * (ATTENTION_ADAPTERS + fc)


@pytest.mark.slow
def test_launch_runs_lora_and_the_result_reads_back_the_trained_parameters(tmp_path):
    out = run_inprocess(tmp_path, ["model=llama_tiny", *QUICK, *LORA])
    assert out.status == "ok", out.result["error"]
    assert out.result["spec"]["training"]["peft"] == "lora"
    assert out.result["framework"]["effective"]["trained_params"] == 4 * ATTENTION_ADAPTERS


@pytest.mark.slow
def test_the_trainer_runs_lora_through_peft(tmp_path):
    """framework=transformers under PEFT's LoRA: Hugging Face keeps q, k and v apart, so linear_qkv is three
    adapters there, rank 16 x (256 + 256), (256 + 64), (256 + 64), and o_proj's 16 x (256 + 256) per layer."""
    pytest.importorskip("peft")
    out = run_inprocess(tmp_path, ["model=llama_tiny", "framework=transformers", *QUICK, *LORA])
    assert out.status == "ok", out.result["error"]
    assert out.result["framework"]["effective"]["trained_params"] == 4 * 16 * (512 + 320 + 320 + 512)


def matmul_flops(work, part, phase):
    return sum(op.flops for op in work.ops(part, phase) if op.kind == "matmul")


def test_the_projection_traces_no_weight_gradient_of_a_frozen_weight():
    """One layer's GEMMs counted by hand: the base's forward F (2 x tokens x weights), the adapters' A. Full
    training's backward is 2F (input and weight gradients); LoRA's is F (input gradients through frozen weights)
    plus 2A (both gradients of the trained adapters). The frozen head's backward is its forward, and a frozen
    embedding has none."""
    tokens = 2 * 64  # training.micro_batch_size 2 (llama_tiny's tiny training), seq 64
    base = 2 * tokens * (256 * QKV_OUT + 256 * 256 + 3 * 256 * 896)
    adapters = 2 * tokens * ATTENTION_ADAPTERS
    full = trace_work(spec_of(*TINY, "training.micro_batch_size=2", "training.global_batch_size=8"))
    lora = trace_work(spec_of(*TINY, *LORA, "training.micro_batch_size=2", "training.global_batch_size=8"))
    assert matmul_flops(full, "layer", "fwd") == base and matmul_flops(full, "layer", "bwd") == 2 * base
    assert matmul_flops(lora, "layer", "fwd") == base + adapters
    assert matmul_flops(lora, "layer", "bwd") == base + 2 * adapters
    assert matmul_flops(lora, "head", "bwd") == matmul_flops(lora, "head", "fwd") == matmul_flops(full, "head", "fwd")
    assert lora.ops("embedding", "bwd") == [] and full.ops("embedding", "bwd") != []


def test_memory_holds_gradients_and_optimizer_state_for_the_adapters_alone():
    """Llama 3.1 70B under NeMo at tp 4 by hand: per layer rank 16 x ((8192 + 10,240) + (8192 + 8192)) adapter
    weights, 80 layers over tp 4; fp32 gradients (4 B) of them alone, and Adam's fp32 master and moments (12 B) of
    them alone, sharded over dp 2 by Megatron's distributed optimizer; the base's bf16 weights (2 B) all kept."""
    common = ["platform=nvidia", "platform.gpu=h100", "model=llama70b", "framework=nemo", "parallelism.tp=4",
              "parallelism.pp=1", "platform.devices_per_node=8", "training.global_batch_size=8",
              "training.micro_batch_size=1"]
    full, lora = make_plan(spec_of(*common), HW).memory, make_plan(spec_of(*common, *LORA), HW).memory
    adapters = 16 * ((8192 + 10240) + (8192 + 8192)) * 80 / 4
    assert lora.grads_gib == pytest.approx(adapters * 4 / GIB)
    assert lora.optimizer_gib == pytest.approx(adapters * 12 / 2 / GIB)
    assert lora.weights_gib == pytest.approx(full.weights_gib + adapters * 2 / GIB)
    # Transformer Engine frees a frozen GEMM's input (Linear saves it only if weight.requires_grad; LayerNormMLP
    # clears FC1's and FC2's): FC1's normalised input (8192) and FC2's input (28,672 over tp 4) go, in bf16; QKV's
    # stays, saved by its adapter (the projection's input is flash attention's output, kept either way)
    spec = spec_of(*common, *LORA)
    seq_shard = 4 if spec.parallelism.sequence_parallel else 1
    gone = spec.training.seq_length * 80 * (8192 * 2 / seq_shard + 28672 * 2 / 4)
    assert full.activations_gib - lora.activations_gib == pytest.approx(gone / GIB)


def test_lora_under_fp8_frees_the_fp8_copies_megatron_keeps_for_frozen_gemms():
    """Llama 2 70B under NeMo, fp8, tp 1 (MLPerf's MI300X layout): trained, each GEMM saves its fp8 input (1 B), the
    projection's beside flash attention's bf16 output; under LoRA the adapted QKV's input is saved in bf16 by its
    adapter (2 B instead of 1), FC1's (8192), FC2's (28,672) and the projection's fp8 copy (8192) are not: 36,864 B
    less per token per layer, 80 layers of 8192 tokens."""
    common = ["platform=amd", "platform.gpu=mi300x", "model=llama2_70b", "model.max_position_embeddings=8192",
              "framework=nemo", "parallelism.tp=1", "parallelism.pp=1", "parallelism.cp=1", "training.precision=fp8",
              "training.seq_length=8192", "platform.devices_per_node=8", "training.global_batch_size=8",
              "training.micro_batch_size=1"]
    full, lora = make_plan(spec_of(*common), HW).memory, make_plan(spec_of(*common, *LORA), HW).memory
    per_token_layer = (8192 * 1 - 8192 * 2) + 8192 * 1 + 28672 * 1 + 8192 * 1  # QKV (1 B -> 2 B), FC1, FC2, projection copy
    assert full.activations_gib - lora.activations_gib == pytest.approx(8192 * 80 * per_token_layer / GIB)


def test_lora_counts_no_weight_gradient_flops_in_the_plan():
    """Megatron's FLOPs per token with the base frozen: dense GEMMs at 4 per weight (forward, input gradient), not
    6; attention and the adapters as in training (hand sum from the plan of full training)."""
    full = make_plan(spec_of(*TINY), HW).flops_per_token
    lora = make_plan(spec_of(*TINY, *LORA), HW).flops_per_token
    dense = 4 * (256 * QKV_OUT + 256 * 256 + 3 * 256 * 896) + 256 * 2048  # 4 layers' weights and the head
    assert full - lora == pytest.approx(2 * dense - 6 * 4 * ATTENTION_ADAPTERS)


@pytest.mark.parametrize("overrides, expected", [
    (["framework=deepspeed"], "training.peft=lora, framework.name=deepspeed: deepspeed has no LoRA"),
    (["framework=megatron", "platform=nvidia", "platform.gpu=h100"], "framework.name=megatron: megatron has no LoRA"),
    (["platform.devices_per_node=2", "parallelism.tp=2"], "training.peft=lora, parallelism.tp=2: the native adapters"),
    (["training.lora.targets=[linear_qkv,q_proj]"], "training.lora.targets=['linear_qkv', 'q_proj']: must name"),
    (["training.lora.rank=0"], "training.lora.rank=0: must be >= 1"),
    (["training.lora.dropout=1.0"], "training.lora.dropout=1.0: must be in [0, 1)"),
    (["training.peft=qlora"], "training.peft=qlora: must be one of none, lora"),
])
def test_lora_rules_name_the_key(overrides, expected):
    spec = spec_of(*TINY, *LORA, *overrides)
    problems = validate(spec, HW, dry_run=True)
    assert any(expected in p for p in problems), problems


def test_megatron_bridge_and_nemo2_set_lora_through_their_own_api():
    """Megatron-Bridge: cfg.peft = LoRA(); NeMo 2: the model's finetune_recipe (llm.finetune) and its recipe.peft.
    Every value is set through ``put`` (a name their LoRA does not declare stops the script) and read back after
    the framework's own finalisation (bench/rehearse.py); a base checkpoint named, as both restore one. Without
    one, each flavour refuses by key."""
    from tprimat import backends
    from tprimat.backends.external import nemo

    gpu = ["platform=nvidia", "platform.gpu=h100", "model=llama", "framework=nemo"]
    spec = spec_of(*gpu, "framework.flavour=bridge", *LORA, "framework.pretrained_checkpoint=/base")
    rows = {row[0]: row[1:] for row in nemo.bridge_settings(spec)}
    assert rows["lora_rank"] == ("peft.dim", "peft.dim", 16) and rows["lora_alpha"] == ("peft.alpha", "peft.alpha", 32)
    assert rows["lora_targets"][2] == ["linear_qkv", "linear_proj"] and rows["lora_dropout"][2] == 0.1
    assert rows["pretrained_checkpoint"] == ("checkpoint.pretrained_checkpoint",) * 2 + ("/base",)
    script = backends.load("nemo").launch(spec, make_plan(spec, HW), Path("l")).files["nemo_pretrain.py"]
    assert "cfg.peft = LoRA()" in script and "finetune(cfg, forward_step)" in script
    assert not backends.load("nemo").check(spec, make_plan(spec, HW))

    nemo2 = spec_of(*gpu, "framework.flavour=nemo2", *LORA, "framework.pretrained_checkpoint=/base",
                    "parallelism.zero_stage=1")
    rows = {row[0]: row[1:] for row in nemo.nemo2_settings(nemo2)}
    assert rows["lora_rank"] == ("peft.dim", "peft.dim", 16) and rows["lora_targets"][2] == ["linear_qkv", "linear_proj"]
    assert rows["pretrained_checkpoint"] == ("resume.restore_config.path",) * 2 + ("/base",)
    # the fine-tuning recipe turns the optimizer's own switch off under LoRA; the spec's ZeRO 1 turns it back on
    assert rows["optimizer_distributed"][2] is True and rows["tokenizer"][2] == "data"
    script = backends.load("nemo").launch(nemo2, make_plan(nemo2, HW), Path("l")).files["nemo_pretrain.py"]
    assert ".finetune_recipe(" in script and 'peft_scheme="lora"' in script
    assert not backends.load("nemo").check(nemo2, make_plan(nemo2, HW))
    plain = {row[0] for row in nemo.nemo2_settings(spec_of(*gpu, "framework.flavour=nemo2"))}
    assert not {"lora_rank", "pretrained_checkpoint", "tokenizer"} & plain
    for flavour, expected in (("nemo2", "NeMo 2's llm.finetune restores"), ("bridge", "Megatron-Bridge's PEFT")):
        other = spec_of(*gpu, f"framework.flavour={flavour}", *LORA)
        assert not [p for p in validate(other, HW, dry_run=True) if "peft" in p or "lora" in p]  # planned, projected
        problems = backends.load("nemo").check(other, make_plan(other, HW))
        assert problems and "framework.pretrained_checkpoint=null" in problems[0] and expected in problems[0], problems


def test_lora_keys_at_their_defaults_keep_a_specs_identity():
    """A result written before training.peft and training.lora existed keeps its identity (resume, repeats)."""
    now = spec_to_dict(spec_of(*TINY))
    before = {**now, "training": {k: v for k, v in now["training"].items() if k not in ("peft", "lora")}}
    assert spec_identity(now) == spec_identity(before)
    assert spec_identity(spec_to_dict(spec_of(*TINY, *LORA))) != spec_identity(now)


def test_a_part_without_a_measured_ceiling_takes_its_architectures_fraction():
    """GB300 has no published MAMF: its spec peak (2,500) x the B300's measured 1,769 of 2,250 (its die), by hand;
    MI350X's (2,306.9) x the MI355X's 1,565 of 2,516.6; a part with its own measurement keeps it (H100 794.5, GB200
    1,822: ml-engineering's MAMF table)."""
    from tprimat.spec import hardware
    from tprimat.spec.projection import bf16_ceiling

    assert bf16_ceiling(hardware.DEVICES["gb300"])[0] == pytest.approx(2500 * 1769 / 2250)
    assert bf16_ceiling(hardware.DEVICES["gb200"])[0] == 1822.0
    assert bf16_ceiling(hardware.DEVICES["mi350x"])[0] == pytest.approx(2306.9 * 1565 / 2516.6)
    assert bf16_ceiling(hardware.DEVICES["h100"])[0] == 794.5


def test_a_projection_on_a_gpu_carries_its_records_interval(tmp_path, monkeypatch):
    """The record's group for the stack on the GPU class, else the stack on every GPU, else every row; printed
    as the interval beside the number."""
    import json

    from tprimat.execute.project import projection_of
    from tprimat.spec import record

    groups = {"megatron-core stacks on Hopper": {"rows": 3, "families": 2, "low": -0.04, "high": 0.09, "source": "t"},
              "every stack on every GPU": {"rows": 9, "families": 5, "low": -0.2, "high": 0.5, "source": "t"}}
    monkeypatch.setattr(record, "RECORD", tmp_path / "record.json")
    (tmp_path / "record.json").write_text(json.dumps({"groups": groups}))
    record.groups.cache_clear()
    try:
        spec = spec_of("platform=nvidia", "platform.gpu=h200", "model=llama", "framework=nemo")
        found = projection_of(spec, make_plan(spec, HW))["interval"]
        assert found["group"] == "megatron-core stacks on Hopper" and (found["low"], found["high"]) == (-0.04, 0.09)
        assert record.phrase(found).startswith("within -4% to +9% for megatron-core stacks on Hopper (3 rows")
        assert record.interval("torchtitan", "mi300x")["group"] == "every stack on every GPU"
    finally:
        record.groups.cache_clear()
