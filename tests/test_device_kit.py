"""The device kit rehearsed on CPU (scripts/device_kit.py; docs/frameworks.md): it installs offline into a fresh
virtualenv, and Megatron-LM's own argument parser and validation (the kit's ``megatron/training``, at the tag
that released the kit's megatron-core) accept every command line tprimat generates for the default matrix's
Megatron points. Skipped, with the reason, where the kit has not been built."""

import json
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

import pytest
import torch

from bench.gpu_frameworks import FRAMEWORKS
from scripts.device_kit import wheels_for
from tests.conftest import ROOT
from tprimat.compose import compose
from tprimat.execute.run import execute

pytestmark = pytest.mark.slow  # a virtualenv and a framework's own parser in subprocesses

KIT = ROOT / ".device_kit"
if not (KIT / "MANIFEST.json").exists():
    pytest.skip("no device kit: build it with python scripts/device_kit.py --megatron-lm <Megatron-LM git directory>",
                allow_module_level=True)
MANIFEST = json.loads((KIT / "MANIFEST.json").read_text())
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"

# Megatron-LM's parse_args and validate_args, as pretrain_gpt.py runs them, over each point's command line
PARSE = """
import json, os, sys, traceback
from megatron.training.arguments import parse_args, validate_args
points, out, checked = json.load(open(sys.argv[1])), sys.argv[2], []
for point in points:
    os.environ.update(WORLD_SIZE=str(point["world_size"]), RANK="0")
    sys.argv = ["pretrain_gpt.py", *point["argv"]]
    try:
        args = parse_args()
        validate_args(args, {})
        checked.append({"point": point["point"], "error": None, "dp": args.data_parallel_size})
    except BaseException as exc:
        frames = [f.name for f in traceback.extract_tb(exc.__traceback__)]
        checked.append({"point": point["point"], "error": f"{type(exc).__name__}: {exc}", "frames": frames})
open(out, "w").write(json.dumps(checked))
"""


def normal(name: str) -> str:
    return name.lower().replace("_", "-")


@pytest.fixture(scope="module")
def kit_env(tmp_path_factory):
    """A fresh virtualenv with the kit's wheels for this Python installed offline (no index, no dependencies:
    the device brings torch, numpy and packaging); its site-packages."""
    env = tmp_path_factory.mktemp("kit") / "venv"
    venv.create(env, with_pip=True)
    wheels = wheels_for(KIT / "wheels", TAG)
    proc = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index",
                           "--find-links", str(KIT / "wheels"), "--no-deps", *map(str, wheels)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    listed = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, check=True).stdout
    site = next((env / "lib").glob("python3*/site-packages"))
    return {normal(p["name"]): p["version"] for p in json.loads(listed)}, site


def test_the_kit_installs_offline_into_a_fresh_virtualenv(kit_env):
    installed, _ = kit_env
    for name, version in MANIFEST["wheels"].items():
        assert installed.get(normal(name)) == version, (name, installed.get(normal(name)))
    assert MANIFEST["total_mib"] <= 60 and (KIT / "megatron-lm" / "pretrain_gpt.py").exists()


def megatron_points(out: Path) -> list[dict]:
    """The default matrix's Megatron points (NVIDIA H100, H200, B200 x Llama 3.1 8B, Qwen 2.5 7B, Mistral 7B x both
    methodologies), each dry-run by tprimat: the command line its launch would run, after pretrain_gpt.py."""
    points = []
    for gpu in ("h100", "h200", "b200"):
        for model in ("llama", "qwen", "mistral"):
            for methodology in ("identical_config", "maximum_performance"):
                overrides = ["platform=nvidia", f"platform.gpu={gpu}", f"model={model}", f"methodology={methodology}",
                             "framework=megatron", "dry_run=true", "logging.wandb.mode=disabled"]
                result = execute(compose(overrides), Path(tempfile.mkdtemp(dir=out)), overrides).result
                argv = result["plan"]["backend_config"]["argv"]
                script = next(i for i, a in enumerate(argv) if a.endswith("pretrain_gpt.py"))
                points.append({"point": [gpu, model, methodology], "world_size": result["plan"]["world_size"],
                               "argv": argv[script + 1:], "dp": result["plan"]["dp"],
                               "asks_the_gpu": result["plan"]["tp"] > 1 or result["plan"]["cp"] > 1
                               or result["spec"]["parallelism"]["fsdp"]})
    return points


def test_megatron_lms_own_parser_accepts_every_default_matrix_command_line(kit_env, tmp_path):
    _, site = kit_env
    points = megatron_points(tmp_path)
    assert len(points) == 18
    (tmp_path / "points.json").write_text(json.dumps(points))
    proc = subprocess.run([sys.executable, "-c", PARSE, str(tmp_path / "points.json"), str(tmp_path / "out.json")],
                          cwd=KIT / "megatron-lm", capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": f"{KIT / 'megatron-lm'}:{site}"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    checked = json.loads((tmp_path / "out.json").read_text())
    for point, check in zip(points, checked):
        if point["asks_the_gpu"] and not torch.cuda.is_available():
            # with tp or cp > 1, or Megatron FSDP, validate_args asks the GPU's architecture (get_device_arch_version)
            # after the checks before it passed: the rest is the device's to check (docs/frameworks.md)
            assert check["error"] is None or "get_device_arch_version" in check["frames"], check
        else:
            assert check["error"] is None, check
            assert check["dp"] == point["dp"], (point["point"], check["dp"], point["dp"])  # Megatron's own division
    assert any(c["error"] is None for c in checked)



# megatron-core's GPTModel, built by Megatron-LM's own gpt_builder from the parsed command line on the meta device
# (an 8B model's shapes without its memory), in a one-rank gloo group
BUILD = """
import json, os, sys, tempfile
import torch, torch.distributed as dist
os.environ.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0")
sys.argv = ["pretrain_gpt.py", *json.loads(sys.argv[1]), "--use-cpu-initialization"]
from megatron.training.arguments import parse_args, validate_args
from megatron.training.global_vars import set_global_variables
args = parse_args()
validate_args(args, {})
set_global_variables(args)  # builds the null tokenizer: the padded vocabulary
dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/rendezvous", rank=0, world_size=1)
from megatron.core import parallel_state
parallel_state.initialize_model_parallel()
from gpt_builders import gpt_builder
with torch.device("meta"):
    model = gpt_builder(args, True, True)
print(json.dumps({"params": sum(p.numel() for p in model.parameters()), "padded_vocab": args.padded_vocab_size}))
"""


@pytest.mark.parametrize("model", ["llama", "qwen", "mistral"])
def test_megatron_core_builds_each_model_with_the_specs_parameter_count(kit_env, tmp_path, model):
    """Each default-matrix model at full size (B200, identical_config, unsharded: tp = pp = cp = 1) built by
    megatron-core from the command line tprimat generates has exactly the plan's parameter count."""
    _, site = kit_env
    overrides = ["platform=nvidia", "platform.gpu=b200", f"model={model}", "methodology=identical_config",
                 "parallelism.fsdp=false", "framework=megatron", "dry_run=true", "logging.wandb.mode=disabled",
                 *FRAMEWORKS["megatron"][0]]  # the device's flags: local layers, no TE/apex fusions
    result = execute(compose(overrides), tmp_path, overrides).result
    argv = result["plan"]["backend_config"]["argv"]
    script = next(i for i, a in enumerate(argv) if a.endswith("pretrain_gpt.py"))
    proc = subprocess.run([sys.executable, "-c", BUILD, json.dumps(argv[script + 1:])], cwd=KIT / "megatron-lm",
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": f"{KIT / 'megatron-lm'}:{site}"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = json.loads(proc.stdout.strip().splitlines()[-1])
    assert built["padded_vocab"] == result["spec"]["model"]["vocab_size"]
    assert built["params"] == result["plan"]["params_total"], (model, built, result["plan"]["params_total"])
