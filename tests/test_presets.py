"""The presets (conf/experiment): each plans its whole matrix on this CPU as a real Hydra multirun of dry runs,
`frameworks=[...]` selects, and maximum_performance gives each framework the platform's tuned settings in the
form that framework runs them."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT, compose_config
from tprimat.results.result import read_result

pytestmark = pytest.mark.slow  # Hydra multiruns


def sweep(tmp_path, *overrides, code=0):
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), *overrides, "dry_run=true",
                           f"hydra.sweep.dir={tmp_path}"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == code, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [read_result(p) for p in sorted(tmp_path.glob("*/result.json"), key=lambda p: int(p.parent.name))]


@pytest.mark.parametrize("preset,points,keys", [
    ("nvidia_all", 10, {("nemo", "llama"), ("megatron", "qwen"), ("deepspeed", "llama"), ("transformers", "qwen"),
                        ("native", "llama")}),
    ("amd_all", 12, {("primus", "llama"), ("nemo", "qwen"), ("transformers", "llama"), ("deepspeed", "qwen"),
                     ("native", "qwen"), ("megatron_deepspeed", "llama")}),
    ("seed_gpt2_single", 8, {("native", "gpt2"), ("native", "gpt2_xl")}),
    ("seed_gpt2_ddp", 8, {("native", "gpt2"), ("native", "gpt2_xl")}),
    ("seed_70b_proxy_fsdp", 4, {("native", "llama70b_proxy")}),
])
def test_every_preset_plans_its_matrix_on_a_cpu(tmp_path, preset, points, keys):
    # Megatron-DeepSpeed cannot express Qwen's QKV-only bias nor Llama 3.1's RoPE scaling: the dry run refuses those
    # points by name, as the launch does, and the sweep exits 1 (one bad point never stops the others)
    results = sweep(tmp_path, f"experiment={preset}", code=1 if preset == "amd_all" else 0)
    assert len(results) == points
    assert keys <= {(r["spec"]["framework"]["name"], r["spec"]["model"]["name"]) for r in results}
    refused = {(r["spec"]["framework"]["name"], r["spec"]["model"]["name"]): r["error"] for r in results
               if r["status"] != "dry_run"}
    if preset == "amd_all":
        assert sorted(refused) == [("megatron_deepspeed", "llama"), ("megatron_deepspeed", "qwen")]
        assert "qkv_bias" in refused[("megatron_deepspeed", "qwen")]
        assert "model.rope_scaling_factor" in refused[("megatron_deepspeed", "llama")]  # no RoPE scaling there
    else:
        assert refused == {}
    if preset.startswith("seed_gpt2"):
        combos = {(r["spec"]["training"]["precision"], r["spec"]["training"]["compile"]) for r in results}
        assert combos == {("bf16", False), ("bf16", True), ("fp8", False), ("fp8", True)}
        devices = 1 if preset.endswith("single") else 8
        assert {r["plan"]["world_size"] for r in results} == {devices}
    if preset == "seed_70b_proxy_fsdp":
        assert {r["spec"]["training"]["activation_checkpointing"] for r in results} == {"full", "selective"}
        assert {r["spec"]["training"]["ac_frequency"] for r in results} == {"1/4"}
        assert all(r["spec"]["parallelism"]["fsdp"] for r in results)


def test_frameworks_selects_the_points_of_a_platform_preset(tmp_path):
    results = sweep(tmp_path, "experiment=nvidia_all", "frameworks=[deepspeed,transformers]")
    by = {(r["spec"]["framework"]["name"], r["spec"]["model"]["name"]): r for r in results}
    assert set(by) == {("deepspeed", "llama"), ("deepspeed", "qwen"), ("transformers", "llama"), ("transformers", "qwen")}
    # the H100's tuned sharding and recompute, as each framework runs them: ZeRO-3 (the Trainer through its DeepSpeed
    # integration, recomputing full layers)
    assert by[("deepspeed", "llama")]["spec"]["parallelism"]["zero_stage"] == 3
    assert by[("deepspeed", "llama")]["spec"]["parallelism"]["fsdp"] is False
    assert by[("transformers", "qwen")]["spec"]["training"]["activation_checkpointing"] == "full"
    assert by[("transformers", "qwen")]["spec"]["parallelism"]["zero_stage"] == 3
    assert all(r["plan"]["backend_problems"] == [] for r in results)


@pytest.mark.parametrize("framework,fsdp,zero,recompute", [("native", True, 0, "selective"),
                                                           ("deepspeed", False, 3, "selective"),
                                                           ("transformers", False, 3, "full"),
                                                           ("megatron", False, 1, "selective"),
                                                           ("megatron_deepspeed", False, 1, "selective")])
def test_maximum_performance_maps_the_tuned_settings_per_framework(framework, fsdp, zero, recompute):
    cfg = compose_config(["platform=nvidia", f"framework={framework}"])
    assert (cfg.parallelism.fsdp, cfg.parallelism.zero_stage, cfg.training.activation_checkpointing) == \
        (fsdp, zero, recompute)


@pytest.mark.parametrize("platform,frameworks,points,tuned", [
    (["platform=nvidia", "platform.gpu=h100"], ["nemo", "megatron"], 8, ("fp8", 4)),
    (["platform=amd", "platform.gpu=mi300x", "frameworks=[primus]"], ["primus"], 4, ("bf16", 1)),
])
def test_the_seeds_matrix_plans_on_the_seeds_hardware(tmp_path, platform, frameworks, points, tuned):
    """experiment=seed_llama_qwen: the original toolkit's matrix (seq 2048, GBS 128, MBS 1, 10 steps; H100 TP 4 FP8,
    MI300X TP 1 BF16, identical TP 4 PP 1 DP 2) plans on the device named, every point within its memory."""
    results = sweep(tmp_path, "experiment=seed_llama_qwen", *platform)
    assert len(results) == points and {r["status"] for r in results} == {"dry_run"}
    assert {r["spec"]["framework"]["name"] for r in results} == set(frameworks)
    for r in results:
        spec, plan = r["spec"], r["plan"]
        assert (spec["training"]["seq_length"], spec["training"]["global_batch_size"]) == (2048, 128)
        assert plan["memory_estimate_gib"] <= plan["device_memory_gib"]
        layout = (spec["training"]["precision"], spec["parallelism"]["tp"])
        if spec["methodology"]["name"] == "identical_config":
            assert layout == ("bf16", 4) and plan["dp"] == 2 and spec["parallelism"]["pp"] == 1
        else:
            assert layout == tuned


def test_plan_expands_a_presets_own_sweep():
    """`tprimat plan experiment=seed_llama_qwen ...` plans the preset's matrix (its hydra.sweeper.params, the
    `frameworks` list resolved) as launch.py's multirun would; it used to be refused as an unknown key."""
    from tprimat.compose import expand

    points = expand(["experiment=seed_llama_qwen", "platform=amd", "platform.gpu=mi300x", "frameworks=[primus]"])
    assert sorted(" ".join(p) for p in points) == sorted(
        f"experiment=seed_llama_qwen platform=amd platform.gpu=mi300x frameworks=[primus] model={m} "
        f"framework=primus methodology={x}" for m in ("llama", "qwen")
        for x in ("maximum_performance", "identical_config"))
    typed = expand(["experiment=seed_llama_qwen", "model=qwen"])  # the command line wins for a key it names
    assert {p[-1] for p in typed} == {"methodology=maximum_performance", "methodology=identical_config"}
    assert all("model=qwen" in p for p in typed) and len(typed) == 4
