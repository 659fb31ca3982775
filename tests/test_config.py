"""Every config group member composes into a valid run spec and a plan (dry runs, on CPU)."""


from dataclasses import FrozenInstanceError

import pytest

from tests.conftest import CONF, compose_config, run_inprocess
from tprimat.compose import compose
from tprimat.measure.devices import detect
from tprimat.spec.build import build_spec

MEMBERS = {group: sorted(p.stem for p in (CONF / group).glob("*.yaml"))
           for group in ("platform", "model", "framework", "methodology", "parallelism", "training", "benchmark",
                         "logging")}
TINY = [m for m in MEMBERS["model"] if m.endswith("_tiny")]
FULL = [m for m in MEMBERS["model"] if not m.endswith("_tiny")]


def test_groups_have_the_members_the_docs_promise():
    assert MEMBERS["platform"] == ["amd", "auto", "cpu", "nvidia"]
    assert set(MEMBERS["model"]) == {"llama", "qwen", "mistral", "llama70b", "llama70b_proxy", "llama2_70b", "llama405b",
                                     "llama_tiny", "qwen_tiny",
                                     "mistral_tiny", "gpt2", "gpt2_medium", "gpt2_large", "gpt2_xl", "gpt2_tiny"}
    assert MEMBERS["methodology"] == ["identical_config", "maximum_performance"]
    assert "native" in MEMBERS["framework"]


@pytest.mark.parametrize("platform", MEMBERS["platform"])
@pytest.mark.parametrize("methodology", MEMBERS["methodology"])
@pytest.mark.parametrize("model", TINY)
def test_tiny_models_plan_on_every_platform(tmp_path, platform, methodology, model):
    gpu = {"nvidia": ["platform.gpu=h100"], "amd": ["platform.gpu=mi300x"]}.get(platform, [])
    gpu += ["platform.devices_per_node=1"]
    out = run_inprocess(tmp_path, [f"platform={platform}", f"methodology={methodology}", f"model={model}",
                                   "dry_run=true", *gpu])
    assert out.status == "dry_run", out.result["error"]
    plan = out.result["plan"]
    assert plan["tokens_per_step"] == 8 * 256
    assert plan["world_size"] == plan["dp"] * plan["tp"] * plan["pp"] * plan["cp"]
    assert plan["backend"] == "native"
    assert (tmp_path / "result.json").exists()


# 8B-class models on their platforms' tuned settings, 70B with tensor parallelism over 4 nodes, 405B over 16 at 2,048 tokens.
@pytest.mark.parametrize("model", FULL)
@pytest.mark.parametrize("platform,gpu", [("nvidia", "h100"), ("nvidia", "b200"), ("amd", "mi300x"),
                                          ("amd", "mi355x")])
def test_full_size_models_plan_on_gpu_nodes(tmp_path, model, platform, gpu):
    extra = {"llama70b": ["platform.nodes=4", "parallelism.tp=8", "training.activation_checkpointing=full"],
             # Llama 2's 4,096-token context (MLPerf's LoRA sets 8,192 itself); 405B over 16 nodes at 2,048 tokens
             "llama2_70b": ["platform.nodes=4", "parallelism.tp=8", "training.activation_checkpointing=full",
                            "training.seq_length=4096"],
             "llama405b": ["platform.nodes=16", "parallelism.tp=8", "training.activation_checkpointing=full",
                           "training.seq_length=2048"],
             }.get(model, [])
    out = run_inprocess(tmp_path, [f"platform={platform}", f"platform.gpu={gpu}", f"model={model}",
                                   "dry_run=true", *extra])
    assert out.status == "dry_run", out.result["error"]
    plan = out.result["plan"]
    assert plan["peak_tflops"] > 0 and plan["memory_estimate_gib"] <= plan["device_memory_gib"]
    # maximum_performance applies the platform's tuned settings; a node of 8 GPUs is 8-way data parallel.
    assert out.result["spec"]["parallelism"]["fsdp"] is True
    tr = out.result["spec"]["training"]  # GPT-2: GBS 64 x MBS 8 at seq 1024; the others GBS 128 x MBS 1
    assert (tr["global_batch_size"], tr["micro_batch_size"]) == ((64, 8) if model.startswith("gpt2") else (128, 1))
    assert plan["grad_accum_steps"] == tr["global_batch_size"] // (plan["dp"] * tr["micro_batch_size"])


def test_dry_run_plan_section(tmp_path):
    out = run_inprocess(tmp_path, ["platform=nvidia", "platform.gpu=h100", "model=llama", "dry_run=true"])
    plan = out.result["plan"]
    assert plan["world_size"] == 8 and plan["dp"] == 8 and plan["grad_accum_steps"] == 16
    assert plan["tokens_per_step"] == 128 * 8192
    assert plan["flops_per_token"] / 1e9 == pytest.approx(51.47, abs=0.01)
    assert plan["flops_convention"] == "megatron"
    assert plan["backend_problems"] == [] and "8 process(es)" in plan["backend_description"]
    assert out.result["steps"] == [] and out.result["summary"] is None


def test_a_dry_run_refuses_what_the_backend_cannot_run_as_a_launch_does(tmp_path):
    out = run_inprocess(tmp_path, ["platform=nvidia", "platform.gpu=h100", "model=llama", "parallelism.cp=2",
                                   "dry_run=true"])
    assert out.status == "invalid"
    assert "parallelism.cp=2" in out.result["error"] and "context parallelism" in out.result["error"]
    assert any("context parallelism" in p for p in out.result["plan"]["backend_problems"])  # the plan is kept
    real = run_inprocess(tmp_path / "real", ["platform=cpu", "platform.devices_per_node=2", "parallelism.cp=2"])
    assert real.status == "invalid" and "context parallelism" in real.result["error"]


def test_auto_platform_resolves_to_detected_hardware():
    spec = build_spec(compose([]), detect())
    assert spec.platform.name == detect().kind


def test_without_a_gpu_on_this_machine_detect_answers_as_torch_does_without_importing_it():
    """No GPU device node, driver module or NVIDIA/AMD GPU on the PCI bus of this Linux machine: ``detect()`` answers
    a CPU without importing torch (a fresh interpreter, read back), and torch itself sees no device here either."""
    import json
    import subprocess
    import sys

    import torch

    from tprimat.measure import devices

    if not devices.no_gpu_here():
        pytest.skip("a GPU shows on this machine: detect() asks torch")
    code = ("import json, sys; from tprimat.measure.devices import detect; d = detect(); "
            "print(json.dumps([d.kind, d.device_count, 'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=CONF.parent, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["cpu", 1, False]
    assert not torch.cuda.is_available()  # the library's own answer on the same machine


def test_the_same_overrides_compose_once_a_process_and_each_caller_gets_its_own_copy(monkeypatch):
    """The second compose of the same overrides asks Hydra nothing and equals Hydra's own composition, resolved by
    OmegaConf; a caller's edit never reaches the next caller; an override that reads the environment composes again."""
    import uuid

    from omegaconf import OmegaConf

    import tprimat.compose as composing

    asked = []
    hydra = composing.hydra_compose
    monkeypatch.setattr(composing, "hydra_compose", lambda overrides: asked.append(overrides) or hydra(overrides))
    overrides = ["model=llama", "training.max_steps=7", f"logging.wandb.group={uuid.uuid4().hex}"]  # new here
    first = compose(overrides)
    first["training"]["max_steps"] = 1
    second = compose(overrides)
    second["training"]["max_steps"] = 2
    third = compose(overrides)
    expected = OmegaConf.to_container(hydra(overrides), resolve=True)
    expected.pop("hydra", None)
    assert len(asked) == 1 and third == expected and third["training"]["max_steps"] == 7
    for name in ("first", "second"):
        monkeypatch.setenv("TPRIMAT_TEST_GROUP", name)
        assert compose(["logging.wandb.group=${oc.env:TPRIMAT_TEST_GROUP}"])["logging"]["wandb"]["group"] == name


def test_spec_is_frozen():
    spec = build_spec(compose([]), detect())
    with pytest.raises(FrozenInstanceError):
        spec.training.max_steps = 3
    with pytest.raises(FrozenInstanceError):
        spec.training = None


def test_tiny_models_select_tiny_training_and_command_line_wins():
    assert compose_config(["model=llama_tiny"]).training.seq_length == 256
    assert compose_config(["model=llama"]).training.seq_length == 8192
    assert compose_config(["model=llama_tiny", "training=default"]).training.seq_length == 8192


def test_methodologies_set_precision_and_parallelism():
    tuned = compose_config(["platform=nvidia", "methodology=maximum_performance"])
    same = compose_config(["platform=nvidia", "methodology=identical_config"])
    assert tuned.parallelism.fsdp is True and tuned.training.activation_checkpointing == "selective"
    # identical_config: one layout everywhere, the model state sharded as each framework shards it
    assert same.parallelism.fsdp is True and same.training.activation_checkpointing == "selective"
    assert same.training.precision == "bf16" and same.parallelism.tp == 1 and same.parallelism.zero_stage == 0
    ds = compose_config(["platform=nvidia", "methodology=identical_config", "framework=deepspeed"])
    assert ds.parallelism.fsdp is False and ds.parallelism.zero_stage == 3
    trainer = compose_config(["platform=nvidia", "methodology=identical_config", "framework=transformers"])
    assert trainer.training.activation_checkpointing == "full"  # the Trainer recomputes whole layers or none
    assert trainer.parallelism.zero_stage == 3 and trainer.parallelism.fsdp is False  # its DeepSpeed integration


def test_maximum_performance_takes_the_frameworks_published_recipe():
    """NeMo 24.07's published 8 x H100 Llama 3 8B run (FP8, CP 2) and Primus's MI300X config (TP 1, bf16, the
    distributed optimizer) are what maximum_performance composes for those frameworks on those GPUs; with no GPU
    named, the platform's tuned settings."""
    nemo = compose_config(["platform=nvidia", "platform.gpu=h100", "model=llama", "framework=nemo"])
    assert (nemo.training.precision, nemo.parallelism.cp, nemo.parallelism.tp) == ("fp8", 2, 1)
    assert nemo.training.grad_reduce_in_fp32 is False and nemo.parallelism.zero_stage == 1
    primus = compose_config(["platform=amd", "platform.gpu=mi300x", "model=llama", "framework=primus"])
    assert (primus.training.precision, primus.parallelism.tp, primus.parallelism.zero_stage) == ("bf16", 1, 1)
    assert primus.training.activation_checkpointing == "none"
    unnamed = compose_config(["platform=nvidia", "model=llama", "framework=nemo"])
    assert unnamed.training.precision == "bf16" and unnamed.parallelism.cp == 1


def test_unknown_key_in_a_yaml_file_is_rejected(tmp_path):
    import shutil

    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "model" / "typo.yaml").write_text((conf / "model" / "llama_tiny.yaml").read_text() + "num_layer: 2\n")
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        with pytest.raises(ConfigCompositionException) as err:
            compose("config", overrides=["model=typo"])
    assert "num_layer" in str(err.value.__cause__ or err.value)


def test_wrong_type_in_a_yaml_file_is_rejected(tmp_path):
    import shutil

    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    text = (conf / "model" / "llama_tiny.yaml").read_text().replace("num_layers: 4", "num_layers: four")
    (conf / "model" / "typo.yaml").write_text(text)
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        with pytest.raises(ConfigCompositionException) as err:
            compose("config", overrides=["model=typo"])
    assert "num_layers" in str(err.value.__cause__ or err.value)


@pytest.mark.parametrize("flags,expected", [
    (frozenset({"sse2", "avx", "avx2", "fma"}), "fp32"),  # AVX2 only: bf16 matmul is emulated (100x slower here)
    (frozenset({"avx2", "avx512f", "avx512_bf16"}), "bf16"),  # Zen 4 / Cooper Lake
    (frozenset({"avx512f", "amx_bf16", "amx_tile"}), "bf16"),  # Sapphire Rapids
    (frozenset({"fp", "asimd", "bf16"}), "bf16"),  # Arm (Neoverse V1/V2 ``Features``)
    (frozenset(), "fp32"),  # unreadable /proc/cpuinfo
])
def test_the_cpu_best_precision_follows_its_instruction_set(flags, expected):
    from tprimat.spec.detect import precision_for

    assert precision_for(flags) == expected


def test_maximum_performance_on_cpu_takes_this_cpus_precision():
    """platform=cpu's tuned precision is ``auto``, resolved at the typed boundary from this machine's
    /proc/cpuinfo (read here independently); a GPU platform detected at run time resolves it to bf16."""
    from tprimat.spec.detect import DetectedHardware

    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    words = set(text.split())
    native = bool(words & {"avx512_bf16", "amx_bf16"}) or any(
        line.startswith("Features") and "bf16" in line.split() for line in text.splitlines())
    expected = "bf16" if native else "fp32"
    cpu = DetectedHardware("cpu", "this CPU", 1, 16.0, None)
    h100 = DetectedHardware("nvidia", "NVIDIA H100 80GB HBM3", 8, 79.6, "h100")
    assert compose(["platform=cpu"])["training"]["precision"] == "auto"
    assert build_spec(compose(["platform=cpu"]), cpu).training.precision == expected
    assert build_spec(compose([]), cpu).training.precision == expected  # platform=auto on a CPU host
    assert build_spec(compose([]), h100).training.precision == "bf16"  # platform=auto on a GPU host
    assert build_spec(compose(["platform=cpu", "methodology=identical_config"]), cpu).training.precision == "bf16"
    assert build_spec(compose(["platform=nvidia"]), cpu).training.precision == "bf16"
