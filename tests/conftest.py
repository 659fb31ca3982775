"""Shared helpers: compose configs with Hydra, run benchmarks in-process or as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tprimat.compose import compose, hydra_compose
from tprimat.execute.run import execute
from tprimat.results.result import validate_result

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"

# Fast settings for tests that train: few steps, no W&B unless a test asks for it.
QUICK = ["training.max_steps=4", "benchmark.warmup_steps=1", "logging.wandb.mode=disabled"]


def compose_config(overrides=()):
    """The composed DictConfig (tests that read Hydra's composition itself)."""
    return hydra_compose(list(overrides))


def run_inprocess(tmp_path: Path, overrides=()):
    """Compose + execute exactly as launch.py does, in this process; the result must match the schema."""
    outcome = execute(compose(list(overrides)), tmp_path, list(overrides))
    assert validate_result(outcome.result) == [], validate_result(outcome.result)
    return outcome


def run_launch(tmp_path: Path, *overrides: str, env=None, timeout=300) -> subprocess.CompletedProcess:
    """``python launch.py`` as a user runs it, with Hydra's run directory under tmp_path."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "launch.py"), f"hydra.run.dir={tmp_path}", *overrides],
                          cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=full_env)


@pytest.fixture(scope="session")
def default_run(tmp_path_factory):
    """The README's main job (defaults: llama_tiny, native, W&B offline), run once for several tests."""
    run_dir = tmp_path_factory.mktemp("default_run")
    proc = run_launch(run_dir, env={"WANDB_API_KEY": "sk-test-secret-0123456789", "HF_TOKEN": "hf_test_secret_987"})
    return run_dir, proc


@pytest.fixture(scope="session")
def compiled_run(tmp_path_factory):
    """One cold torch.compile run of llama_tiny (whatever earlier runs left in inductor's on-disk caches), in
    reduce-overhead mode, which asks for CUDA graphs: read by the tests of the compile path (its cost stays in
    the warm-up; on a CPU inductor compiles the blocks without graphs). Compiling costs tens of seconds: once."""
    import torch._inductor.config as inductor

    with inductor.patch(force_disable_caches=True):
        out = run_inprocess(tmp_path_factory.mktemp("compiled"), [
            "training.compile=true", "training.compile_mode=reduce-overhead", "training.max_steps=4",
            "benchmark.warmup_steps=1", "training.optimizer.warmup_steps=1", "logging.wandb.mode=disabled",
            "benchmark.telemetry=false"])
    assert out.status == "ok", out.result["error"]
    return out.result


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests need a CUDA/ROCm device: skipped, with the reason, where there is none."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA/ROCm GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
