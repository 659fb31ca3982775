"""The per-framework memory model against hand computations and published accounting, a refusal that names what
fits, ``tprimat plan --best``, and a plan that says when it could not check memory.

Oracles: Korthikanti et al. 2022 (34 bytes per token and hidden unit per layer without dropout masks' share,
recomputed here for a Llama layer), Megatron-LM's own loss term and distributed-optimizer bytes
(theoretical_memory_usage.py: 6 + 12/dp B per parameter), the ZeRO paper's Figure 1 (7.5 B parameters on 64 GPUs:
120, 31.4, 16.6 and 1.9 GB for stages 0-3), and Llama 3.1 8B's published parameter count (8,030,261,248)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tprimat.cli import main
from tprimat.compose import compose
from tprimat.execute.fit import fitting
from tprimat.execute.prepare import prepare
from tprimat.spec.build import build_spec
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.plan import make_plan
from tprimat.spec.validate import validate

HOST = DetectedHardware("cpu", "planning host", 1, 0.0, None)
LLAMA31_8B_PARAMS = 8_030_261_248  # meta-llama/Llama-3.1-8B (model card / safetensors index)
GIB = 2**30
CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "logs"
PINNED = ["dry_run=true", "logging.wandb.mode=disabled", "training.max_steps=10", "parallelism.tp=1",
          "parallelism.pp=1", "parallelism.cp=1", "parallelism.fsdp=false", "training.grad_reduce_in_fp32=true",
          "training.activation_checkpointing=none", "training.precision=bf16"]


def spec_of(*overrides: str):
    return build_spec(compose([*PINNED, *overrides]), HOST)


def estimate_of(spec):
    plan = make_plan(spec, HOST)
    return plan.memory


def test_megatron_keeps_what_its_own_accounting_says_for_primus_llama_8b():
    """Primus's Llama 3.1 8B layout on 8 GPUs (TP 1, distributed optimizer, MBS 2, seq 8192): states are Megatron-LM's
    6 + 12/8 B per parameter; activations Korthikanti's 34 B per token and hidden unit per layer (for Llama:
    norm and GEMM inputs 4 x 2, q/k/v 2 x 1.5, attention output 2, FC1 output 2 x 2 x 3.5, FC2 input 2 x 3.5) plus
    Megatron-LM's loss term 4 B per token per (hidden + vocab)."""
    est = estimate_of(spec_of("platform=amd", "platform.gpu=mi300x", "framework=primus", "model=llama",
                              "platform.devices_per_node=8", "parallelism.zero_stage=1", "training.micro_batch_size=2",
                              "training.seq_length=8192", "training.global_batch_size=128"))
    assert (est.weights_gib + est.grads_gib + est.optimizer_gib) * GIB == pytest.approx(
        LLAMA31_8B_PARAMS * (6 + 12 / 8), rel=1e-9)
    tokens = 2 * 8192
    assert est.activations_gib * GIB == pytest.approx(tokens * 32 * 34 * 4096 + tokens * 4 * (4096 + 128256), rel=1e-9)


def test_korthikantis_own_tally_for_its_own_22b_gpt_under_megatron():
    """The paper's own model and tally, by hand, not the code's breakdown: Korthikanti et al. 2022 (arXiv
    2205.05198), Section 4.1, a GPT layer stores 34sbh + 5as^2b bytes in 16-bit: attention 11sbh (QKV input 2, Q and
    K 4, V 2, projection input 2, dropout mask 1) + 5as^2b, MLP 19sbh (input 2, GeLU input 8, FC2 input 8, dropout
    mask 1), two LayerNorms' inputs 4sbh; selective recomputation drops the 5as^2b term and tensor with sequence
    parallelism divides the rest by t (their equation 5: 34sbh/t). This model keeps no dropout masks (its dropout
    is off): 34 - 2 = 32sbh/t per layer. Their 22B GPT (Table 3: 48 layers, hidden 6144, 64 heads, seq 2048, vocab
    51,200, t = 8), micro batch 1, plus Megatron-LM's own loss term (theoretical_memory_usage.py: 4 B per token per
    (hidden + vocab), sharded over t)."""
    s, b, h, layers, t, vocab = 2048, 1, 6144, 48, 8, 51200
    est = estimate_of(spec_of(
        "platform=nvidia", "platform.gpu=h100", "framework=megatron", "model=gpt2", f"model.num_layers={layers}",
        f"model.hidden_size={h}", f"model.ffn_hidden_size={4 * h}", "model.num_attention_heads=64",
        "model.num_kv_heads=64", f"model.vocab_size={vocab}", f"model.max_position_embeddings={s}",
        f"training.seq_length={s}", f"training.micro_batch_size={b}", "training.global_batch_size=8",
        "platform.devices_per_node=8", f"parallelism.tp={t}", "parallelism.sequence_parallel=true",
        "training.activation_checkpointing=selective", "parallelism.zero_stage=1"))
    per_layer = (34 - 2) * s * b * h / t
    assert est.activations_gib * GIB == pytest.approx(layers * per_layer + 4 * s * b * (h + vocab) / t, rel=1e-9)


def test_megatron_bf16_gradients_and_fp8_weight_copies():
    """grad_reduce_in_fp32=false halves the gradient buffer (NVIDIA's performance recipes); under fp8 Transformer
    Engine keeps a 1-byte copy of every decoder-layer weight."""
    base = ["platform=nvidia", "platform.gpu=h100", "framework=megatron", "model=llama", "platform.devices_per_node=8",
            "parallelism.zero_stage=1", "training.micro_batch_size=1", "training.global_batch_size=128"]
    fp32_grads = estimate_of(spec_of(*base))
    bf16_grads = estimate_of(spec_of(*base, "training.grad_reduce_in_fp32=false"))
    assert fp32_grads.grads_gib * GIB == pytest.approx(4 * LLAMA31_8B_PARAMS, rel=1e-9)
    assert bf16_grads.grads_gib * GIB == pytest.approx(2 * LLAMA31_8B_PARAMS, rel=1e-9)
    fp8 = estimate_of(spec_of(*base, "training.precision=fp8"))
    embeddings = 2 * 128256 * 4096 + 4096  # input and output embeddings, final norm: not cast to fp8
    assert (fp8.weights_gib - fp32_grads.weights_gib) * GIB == pytest.approx(LLAMA31_8B_PARAMS - embeddings, rel=1e-9)


@pytest.mark.parametrize("stage,paper_gb", [(0, 120.0), (1, 31.4), (2, 16.6)])
def test_deepspeed_zero_stages_match_the_zero_paper(stage, paper_gb):
    """ZeRO paper, Figure 1: 7.5 B parameters, 64 GPUs, mixed precision with K = 12: 120 / 31.4 / 16.6 GB per GPU
    for stages 0 / 1 / 2, i.e. that many GB per 7.5 B parameters whatever the model."""
    spec = spec_of("platform=nvidia", "platform.gpu=h200", "framework=deepspeed", "model=llama",
                   "platform.devices_per_node=8", "platform.nodes=8", f"parallelism.zero_stage={stage}",
                   "training.micro_batch_size=1", "training.global_batch_size=64", "training.seq_length=1024")
    est = estimate_of(spec)
    bucket = 5e8 * 2 if stage else 0  # DeepSpeed's reduce bucket: an implementation buffer the paper does not count
    per_param = ((est.weights_gib + est.grads_gib + est.optimizer_gib) * GIB - bucket) / LLAMA31_8B_PARAMS
    assert per_param == pytest.approx(paper_gb * 1e9 / 7.5e9, rel=0.005)


def test_the_deepspeed_bucket_is_deepspeeds_own_default_and_the_trainer_gets_the_same_engine():
    """ZeRO 1-3 allocate one reduce bucket of reduce_bucket_size elements in bf16 (deepspeed/runtime/zero): its size
    read from DeepSpeed's own config model, stated in the generated config, and counted once for DeepSpeed and for
    the Trainer under its DeepSpeed integration (whose estimate is then DeepSpeed's: 2 + 2 + 12 B per parameter)."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    from tprimat import backends

    default = DeepSpeedZeroConfig().reduce_bucket_size
    base = ("platform=nvidia", "platform.gpu=h100", "model=llama", "platform.devices_per_node=8",
            "training.micro_batch_size=1", "training.global_batch_size=128", "training.activation_checkpointing=full")
    ds = spec_of(*base, "framework=deepspeed", "parallelism.zero_stage=3")
    trainer = spec_of(*base, "framework=transformers", "parallelism.zero_stage=3")
    plain = spec_of(*base, "framework=transformers", "parallelism.zero_stage=0")
    head = 128256 * 4096  # ZeRO-3's largest unit, its fp32 gradient whole before the reduce-scatter
    assert estimate_of(ds).grads_gib * GIB == pytest.approx(LLAMA31_8B_PARAMS * 2 / 8 + head * 4 + default * 2,
                                                            rel=1e-9)
    assert estimate_of(trainer).grads_gib == estimate_of(ds).grads_gib
    assert estimate_of(trainer).optimizer_gib * GIB == pytest.approx(LLAMA31_8B_PARAMS * 12 / 8, rel=1e-9)
    assert estimate_of(plain).grads_gib * GIB == pytest.approx(LLAMA31_8B_PARAMS * 4, rel=1e-9)  # fp32, no bucket
    config = backends.load("transformers").generated_config(trainer, make_plan(trainer, HOST))
    assert config["zero_optimization"]["reduce_bucket_size"] == default


def test_torchtitan_fsdp_shards_fp32_state_over_dp_and_cp_and_gathers_one_unit():
    """torchtitan FSDP2: fp32 parameters, gradients and Adam moments (16 B) over the dp x cp mesh, plus the largest
    unit (the 128,256 x 4096 output head) gathered in bf16 with its unsharded fp32 gradient (2 + 4 B)."""
    est = estimate_of(spec_of("platform=nvidia", "platform.gpu=h100", "framework=torchtitan", "model=llama",
                              "platform.devices_per_node=8", "parallelism.fsdp=true", "parallelism.cp=2",
                              "training.micro_batch_size=1", "training.global_batch_size=128"))
    head = 128256 * 4096
    assert (est.weights_gib + est.grads_gib + est.optimizer_gib) * GIB == pytest.approx(
        LLAMA31_8B_PARAMS * 16 / 8 + head * 6, rel=1e-9)


def test_a_memory_refusal_names_layouts_that_fit_and_each_one_does():
    """The refusal ends with the nearest layouts that fit, each a key=value list with its estimate and projected
    tokens/s; applying any of them through Hydra's own overrides gives a spec that validates."""
    base = ["platform=nvidia", "platform.gpu=h100", "framework=native", "model=llama", "platform.devices_per_node=8",
            "training.micro_batch_size=1", "training.global_batch_size=128"]
    spec = spec_of(*base)
    assert "; fits with " not in prepare(spec, HOST, dry_run=True).problems[0]  # sweeps do not search
    problems = prepare(spec, HOST, dry_run=True, suggest=True).problems
    assert len(problems) == 1 and "exceeds 80.0 GiB" in problems[0] and "; fits with " in problems[0], problems
    suggestions = problems[0].split("; fits with ")[1].split(" or ")
    assert 1 <= len(suggestions) <= 3
    for text in suggestions:
        keys, figures = text.rsplit(" (", 1)
        assert "GiB" in figures and "tokens/s/device" in figures
        fixed = spec_of(*base, *keys.split(", "))
        assert validate(fixed, HOST, dry_run=True) == []


@pytest.mark.slow
@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(framework=st.sampled_from(["native", "torchtitan", "deepspeed", "megatron", "nemo"]),
       model=st.sampled_from(["llama", "qwen", "mistral"]), gpu=st.sampled_from(["h100", "h200", "b200"]))
def test_every_layout_plan_best_proposes_is_accepted_by_validate(framework, model, gpu):
    """Each proposal, written back as overrides and composed by Hydra from scratch, validates on the same GPU."""
    base = ["platform=nvidia", f"platform.gpu={gpu}", f"framework={framework}", f"model={model}",
            "platform.devices_per_node=8", "training.micro_batch_size=1", "training.global_batch_size=128"]
    assume(framework != "torchtitan" or model == "llama")  # torchtitan ships configs for Llama only: no layout
    spec = spec_of(*base)
    fits = fitting(spec, HOST)
    assert fits, "no layout fits"
    speeds = [f.tokens_per_s_per_device or 0 for f in fits]
    assert speeds == sorted(speeds, reverse=True)
    for fit in (fits[0], fits[len(fits) // 2], fits[-1]):
        overrides = [f"{k}={'null' if v is None else str(v).lower() if isinstance(v, bool) else v}"
                     for k, v in fit.settings.items()]
        assert validate(spec_of(*base, *overrides), HOST, dry_run=True) == [], fit.text()


def test_plan_best_lists_the_fitting_layouts_fastest_first():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main(["plan", "--best", "platform=nvidia", "platform.gpu=h100", "model=llama", "framework=megatron"])
    assert done.value.code == 0
    lines = out.getvalue().splitlines()
    assert "fit llama on 8 x h100" in lines[0]
    speeds = [float(line.rsplit("~", 1)[1].split(" ")[0].replace(",", "")) for line in lines[1:]]
    assert len(speeds) > 10 and speeds == sorted(speeds, reverse=True)


def test_a_plan_without_a_device_says_memory_was_not_checked():
    plan = make_plan(build_spec(compose(["platform=nvidia", "model=llama", "dry_run=true"]), HOST), HOST)
    assert plan.device_memory_gib is None
    said = [w for w in plan.warnings if w.startswith("memory was not checked")]
    assert len(said) == 1 and "platform.gpu=h100" in said[0]


@pytest.mark.skipif(not (CORPUS / "primus_3.log").exists(), reason="corpus not present")
def test_the_estimate_lands_within_15_percent_of_measured_corpus_runs():
    """bench/memory_frameworks.py's cases whose measurement is in the corpus: each estimate within 15% of the
    framework's own allocated figure. Where the log gives only what the allocator reserved (torchtitan's
    ``memory:``), which holds the allocated bytes and the cache's slack, the estimate of the allocated bytes must
    not exceed it and stay within 20% of it (its compiled-loss term is traced, bench/loss_memory.py, not fitted to
    this case: -16.9% on 2026-11-27)."""
    path = Path(__file__).resolve().parent.parent / "bench" / "memory_frameworks.py"
    module_spec = importlib.util.spec_from_file_location("memory_frameworks", path)
    bench = importlib.util.module_from_spec(module_spec)
    sys.modules["memory_frameworks"] = bench  # dataclasses look their module up there
    module_spec.loader.exec_module(bench)
    checked = 0
    for case in bench.CASES:
        if case.log is None or not (CORPUS / case.log).exists():
            continue
        est = bench.estimated(case)
        measured = bench.measured(case, CORPUS)
        ratio = (est.total_gib - est.overhead_gib) / measured
        if case.measure == "max reserved":
            assert 0.80 <= ratio <= 1.0, (case.name, ratio)
        else:
            assert abs(ratio - 1) <= 0.15, (case.name, ratio)
        checked += 1
    assert checked >= 3
    assert os.path.exists(path)


@pytest.mark.slow
@pytest.mark.machine  # DeepSpeed's CPU op, from the suite's set-up
@pytest.mark.parametrize("name", ["DeepSpeed ZeRO-3", "Transformers Trainer + DeepSpeed ZeRO-3"])
def test_the_estimate_lands_within_15_percent_of_a_real_cpu_run(name):
    """DeepSpeed and the Trainer under its DeepSpeed integration, trained here through tprimat's launch path: the
    peak torch's CPU allocator held (torch.profiler's memory events) within 15% of the estimate."""
    pytest.importorskip("deepspeed")
    pytest.importorskip("transformers")
    path = Path(__file__).resolve().parent.parent / "bench" / "memory_frameworks.py"
    module_spec = importlib.util.spec_from_file_location("memory_frameworks", path)
    bench = importlib.util.module_from_spec(module_spec)
    sys.modules["memory_frameworks"] = bench
    module_spec.loader.exec_module(bench)
    case = next(c for c in bench.CASES if c.run_on_cpu and c.name.startswith(name + ","))
    est = bench.estimated(case)
    assert abs((est.total_gib - est.overhead_gib) / bench.run_here(case) - 1) <= 0.15


@pytest.mark.slow
def test_the_default_matrix_is_never_refused_for_memory():
    """Every platform's GPUs x Llama 3.1 8B / Qwen 2.5 7B / Mistral 7B x every framework of the platform x both
    methodologies (216 points): none is refused for memory (the issue counted 66 refusals; the last three were the
    Transformers Trainer on an 80 GiB H100, which now shards through its DeepSpeed integration)."""
    from tprimat.compose import Composer
    from tprimat.sweep.plan import plan_point

    frameworks = {"nvidia": ("nemo", "megatron", "deepspeed", "transformers", "native", "torchtitan"),
                  "amd": ("primus", "nemo", "transformers", "deepspeed", "native", "megatron_deepspeed")}
    gpus = {"nvidia": ("h100", "h200", "b200"), "amd": ("mi300x", "mi325x", "mi355x")}
    composer, refused, points = Composer(), [], 0
    for platform, names in frameworks.items():
        for gpu in gpus[platform]:
            for model in ("llama", "qwen", "mistral"):
                for methodology in ("identical_config", "maximum_performance"):
                    for name in names:
                        point = plan_point(composer.compose, [f"platform={platform}", f"platform.gpu={gpu}",
                                                              f"model={model}", f"methodology={methodology}",
                                                              f"framework={name}", "dry_run=true"], HOST,
                                                  suggest=True)
                        points += 1
                        if "GiB" in point.reason and "exceeds" in point.reason:
                            refused.append((gpu, model, methodology, name, point.reason))
    assert points == 216
    assert refused == []


@pytest.mark.parametrize("platform,gpu", [("amd", "mi300x"), ("amd", "mi325x"), ("amd", "mi355x"),
                                          ("nvidia", "h100"), ("nvidia", "h200"), ("nvidia", "b200")])
def test_the_design_cards_command_plans_on_every_gpu_its_platform_names(platform, gpu):
    """`python launch.py platform=amd model=llama methodology=identical_config` (and its NVIDIA twin), with the GPU
    named: validated and planned, memory checked (the issue's MI300X refusal: 208.8 GiB over 192)."""
    from tprimat.compose import Composer
    from tprimat.sweep.plan import plan_point

    point = plan_point(Composer().compose, [f"platform={platform}", f"platform.gpu={gpu}", "model=llama",
                                            "methodology=identical_config", "dry_run=true"], HOST, suggest=True)
    assert point.valid and point.reason == ""
    assert point.device_memory_gib is not None and point.memory_estimate_gib <= point.device_memory_gib
