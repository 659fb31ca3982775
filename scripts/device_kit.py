"""Build the device kit: what a lent GPU machine (CUDA and PyTorch, no network) lacks to train the external
frameworks under tprimat, in one folder ignored by git (``.device_kit/`` by default, at most 60 MiB).

    python scripts/device_kit.py --megatron-lm <Megatron-LM git directory> --torchtitan <torchtitan git directory>

It holds:

- ``wheels/``: the pinned wheels below for each Python the device may run (``--python``, repeatable), downloaded
  from the package registry without their dependencies (the device brings torch, numpy and packaging; each
  small dependency a framework imports is listed here by name);
- ``megatron-lm/``: Megatron-LM's training entry (``pretrain_gpt.py``, the two modules it imports from the
  repository's top level, and ``megatron/training``) exported with ``git archive`` at the commit of the tag that
  released the pinned megatron-core, so the scripts and the library are one release;
- ``megatron-core/``: Megatron-LM's ``megatron/core/datasets/Makefile`` at the same tag (the wheel leaves it out);
- ``torchtitan/``: torchtitan 0.2.2's Llama TOMLs and test tokenizer (tag v0.2.2) and a ``c4_test``-shaped corpus;
- ``MANIFEST.json``: every file with its size and sha256, the commits, the Pythons, and what was left out and why.

Install on the device (docs/frameworks.md; ``bench/gpu_frameworks.py`` does it): ``pip install --no-index --no-deps
--target .device_kit/installed <wheels_for(the device's Python and torch)>``, that folder first on PYTHONPATH,
``framework.path=.device_kit/megatron-lm`` or ``.device_kit/torchtitan``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT_MIB = 60

# name -> version: the frameworks, then the small pure-Python modules they import at start-up. The versions are the
# ones the CPU rehearsal (tests/test_device_kit.py) runs against in the dev extra.
WHEELS = {
    "megatron-core": "0.16.1",      # compiled per Python (cp311, cp312 ...)
    "torchtitan": "0.3.0",
    "torchao": "0.18.0",            # one abi3 wheel; its CUDA kernels load where the device's torch matches
    "torchdata": "0.11.0",          # torchtitan's dataloader
    "torch_checkpointing": "0.1.1",  # torchtitan's checkpoint helpers
    "spmd_types": "0.2.3",          # torchtitan's parallel types
    "tyro": "1.0.17",               # torchtitan's command line and config manager
    "docstring_parser": "0.18.0",   # tyro's
    "typeguard": "4.6.1",           # tyro's
    "einops": "0.8.2",              # megatron-core's and torchtitan's tensor rearranging
    "six": "1.17.0",                # Megatron-LM's tokenizer module (megatron/training)
    "datasets": "4.7.0",            # torchtitan.train imports its text datasets at start (pyarrow: DEVICE_IMAGE)
    "dill": "0.4.0",                # datasets'
    "multiprocess": "0.70.18",      # datasets'
    # tprimat's own dependencies the device image lacks (DEVICE_IMAGE): launch.py's Hydra, the result's columns
    # and schema, DeepSpeed's config models
    "hydra-core": "1.3.8",
    "omegaconf": "2.3.1",
    "orjson": "3.13.0",             # compiled per Python
    "jsonschema": "4.26.0",
    "jsonschema-specifications": "2025.9.1",
    "referencing": "0.37.0",
    "rpds-py": "2026.9.1",          # compiled per Python (referencing's)
    "hjson": "3.1.0",               # DeepSpeed's config reader
    "pydantic": "2.14.4",           # DeepSpeed's config models
    "pydantic-core": "2.50.5",      # compiled per Python
    "annotated-types": "0.8.0",
    "typing-inspection": "0.4.5",
}
# where the device's torch is older than a framework release needs, the release before it, beside it in the kit:
# torchtitan 0.3 imports torch.distributed.fsdp.DataParallelMeshDims (torch >= 2.12; the first device run's torch
# 2.11 has none), so there torchtitan 0.2.2 runs, with its TOML configs (framework.flavour=toml)
OLDER_TORCH = {"torchtitan": {"below_torch": "2.12", "version": "0.2.2"}}
TORCHTITAN_TOML = {"tag": "v0.2.2", "paths": ["torchtitan/models/llama3/train_configs/llama3_8b.toml",
                                               "torchtitan/models/llama3/train_configs/debug_model.toml"]}
# published on the registry as source only: built here into pure-Python wheels (no compiled part: DeepSpeed with
# DS_BUILD_OPS=0 compiles its ops just in time where they are used, and tprimat's DeepSpeed runs use torch's AdamW)
FROM_SOURCE = {
    "antlr4-python3-runtime": "4.9.3",  # omegaconf's grammar runtime, pinned to 4.9 by omegaconf 2.3
    "deepspeed": "0.19.8",
}
# what the device's image already holds (read there with pip list), so the kit does not carry it: the rehearsal
# (tests/test_device_kit.py) runs the CPU frameworks with these alone beside the kit
DEVICE_IMAGE = ["torch", "numpy", "packaging", "pyyaml", "psutil", "typing-extensions", "filelock", "fsspec",
                "jinja2", "markupsafe", "sympy", "mpmath", "networkx", "attrs", "transformers", "accelerate",
                "tokenizers", "safetensors", "huggingface-hub", "hf-xet", "regex", "requests", "urllib3", "idna",
                "certifi", "charset-normalizer", "tqdm", "msgpack", "ninja", "py-cpuinfo", "nvidia-ml-py", "rich",
                "markdown-it-py", "mdurl", "pygments", "scipy", "httpx", "httpcore", "h11", "anyio", "click",
                "shellingham", "typer", "pandas", "pyarrow", "xxhash", "aiohttp", "aiosignal", "aiohappyeyeballs",
                "frozenlist", "multidict", "propcache", "yarl", "python-dateutil", "annotated-doc", "triton",
                "setuptools", "tensorboard", "tensorboard-data-server", "absl-py", "protobuf", "grpcio", "markdown",
                "werkzeug", "pytest", "pluggy", "iniconfig", "hypothesis", "sortedcontainers", "matplotlib",
                "contourpy", "cycler", "fonttools", "kiwisolver", "pillow", "pyparsing"]
MEGATRON_TAG = "core_v0.16.1"  # the Megatron-LM tag that released megatron-core 0.16.1
DATASETS_MAKEFILE = "megatron/core/datasets/Makefile"
TORCHTITAN_ASSETS = ["tests/assets/tokenizer/tokenizer.json", "tests/assets/tokenizer/tokenizer_config.json"]
MEGATRON_PATHS = ["pretrain_gpt.py", "gpt_builders.py", "model_provider.py", "megatron/training", "megatron/legacy",
                  "megatron/rl", "megatron/post_training"]  # what megatron/training imports besides megatron.core
LEFT_OUT = {
    "transformer-engine": "compiled against one CUDA and torch build (hundreds of MiB); Megatron-LM runs with "
                          "--transformer-impl local instead",
    "apex": "built from source against the device's CUDA; Megatron-LM's local implementation does without it",
    "nemo_toolkit": "hundreds of MiB with its dependencies; NeMo is read from its logs (tprimat ingest)",
    "transformers, accelerate": "in the device's image (DEVICE_IMAGE)",
    "wandb, plotly": "the device runs log with logging.wandb.mode=disabled and make no report.html",
    "hydra-submitit-launcher, submitit": "one GPU, no Slurm",
}
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux_2_17_x86_64", "any"]


def torch_below(version: str, torch_version: str) -> bool:
    """``torch_version`` (``2.11.0+cu130``) older than ``version`` (``2.12``)?"""
    have = tuple(int(part) for part in torch_version.split("+")[0].split(".")[:2])
    return have < tuple(int(part) for part in version.split("."))


def release_for(name: str, torch_version: str) -> str:
    """The release of ``name`` the kit installs beside ``torch_version``."""
    older = OLDER_TORCH.get(name)
    return older["version"] if older and torch_below(older["below_torch"], torch_version) else WHEELS[name]


def wheels_for(wheels: Path, python_tag: str, torch_version: str | None = None) -> list[Path]:
    """The kit's wheels that install on one CPython (``cp311``) beside one torch (default: this one's): pure ones
    (``py3``), those built for it (``cp311``, ``py311``) and stable-ABI ones (``cp310-abi3``) built for it or an
    older one; of a framework held in two releases (``OLDER_TORCH``), the one for that torch."""
    version = int(python_tag[2:])
    if torch_version is None:
        import torch

        torch_version = torch.__version__

    def fits(wheel: Path) -> bool:
        parts = wheel.name[:-4].split("-")  # name-release[-build]-python-abi-platform
        name, release, python, abi = parts[0], parts[1], parts[-3], parts[-2]
        if name in OLDER_TORCH and release != release_for(name, torch_version):
            return False
        return any(tag in ("py3", "py2", f"cp{version}", f"py{version}") or
                   (abi == "abi3" and tag.startswith("cp") and int(tag[2:]) <= version) for tag in python.split("."))

    return [w for w in sorted(wheels.glob("*.whl")) if fits(w)]


def download(python: str, dest: Path) -> None:
    """Every pinned wheel built for ``python`` (``3.12``), without dependencies, from the registry; the older
    releases (``OLDER_TORCH``) in a second call (pip takes one version of a name per call)."""
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", python, *platforms, "--dest", str(dest)]
    subprocess.run([*cmd, *(f"{name}=={version}" for name, version in WHEELS.items())], check=True)
    subprocess.run([*cmd, *(f"{name}=={older['version']}" for name, older in OLDER_TORCH.items())], check=True)


def build_from_source(dest: Path) -> None:
    """``FROM_SOURCE`` as wheels, built by this interpreter without isolation (DeepSpeed's setup imports torch)."""
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
           "--no-binary=:all:", "--wheel-dir", str(dest), *(f"{n}=={v}" for n, v in FROM_SOURCE.items())]
    subprocess.run(cmd, check=True, env={**os.environ, "DS_BUILD_OPS": "0"})


def export_megatron(repo: Path, dest: Path) -> str:
    """Megatron-LM's training entry at ``MEGATRON_TAG`` (``git archive``); returns the commit."""
    commit = subprocess.run(["git", "--git-dir", str(repo), "rev-parse", f"{MEGATRON_TAG}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "--git-dir", str(repo), "archive", "--format=tar", commit, *MEGATRON_PATHS],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return commit


def export_datasets_makefile(repo: Path, commit: str, dest: Path) -> None:
    """Megatron-LM's ``megatron/core/datasets/Makefile``: Megatron-LM's initialize runs ``make`` in the installed
    megatron-core's datasets folder, and the wheel ships the built ``helpers_cpp`` without the Makefile, so make
    finds no target and Megatron-LM exits. The device's install puts it back (``restore_datasets_makefile``)."""
    text = subprocess.run(["git", "--git-dir", str(repo), "show", f"{commit}:{DATASETS_MAKEFILE}"], check=True,
                          capture_output=True).stdout
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(text)


def restore_datasets_makefile(kit: Path, python: str) -> str:
    """Put the kit's Makefile beside the installed megatron-core's built helpers (where the wheel left it out)."""
    where = subprocess.run([python, "-c", "import importlib.util as u; "
                            "print(u.find_spec('megatron.core.datasets').submodule_search_locations[0])"],
                           capture_output=True, text=True)
    if where.returncode != 0:
        return f"megatron-core not importable: {where.stderr.strip()[-200:]}"
    target = Path(where.stdout.strip().splitlines()[-1]) / "Makefile"
    if not target.exists():
        target.write_bytes((kit / "megatron-core" / DATASETS_MAKEFILE).read_bytes())
    return f"{target} in place"


def export_torchtitan_assets(repo: Path, dest: Path) -> str:
    """torchtitan's test tokenizer (its own ``tests/assets/tokenizer``) at the TOMLs' tag, and a text corpus in the
    layout of its ``c4_test`` sample (JSON lines of ``{"text": ...}``), which torchtitan's loader reads from
    ``tests/assets/c4_test`` under the run's directory. The sample itself is too large for the fetched mirror, so the
    corpus is the kit's own Megatron-LM sources, one file a document: throughput does not depend on the text."""
    commit = subprocess.run(["git", "--git-dir", str(repo), "rev-parse", f"{TORCHTITAN_TOML['tag']}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    for path in TORCHTITAN_TOML["paths"]:  # torchtitan 0.2's own model config, at its tag
        blob = subprocess.run(["git", "--git-dir", str(repo), "show", f"{TORCHTITAN_TOML['tag']}:{path}"], check=True,
                              capture_output=True).stdout
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        (dest / path).write_bytes(blob)
    for path in TORCHTITAN_ASSETS:
        blob = subprocess.run(["git", "--git-dir", str(repo), "show", f"{commit}:{path}"], check=True,
                              capture_output=True).stdout
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        (dest / path).write_bytes(blob)
    corpus = dest / "tests/assets/c4_test/data.json"
    corpus.parent.mkdir(parents=True, exist_ok=True)
    sources = sorted((dest.parent / "megatron-lm").rglob("*.py"))
    corpus.write_text("".join(json.dumps({"text": p.read_text(errors="replace")}) + "\n" for p in sources))
    return commit


def git_dir(path: Path) -> Path:
    """A clone's ``.git`` or a bare repository (what the workplace's ``fetch`` mirrors)."""
    return path / ".git" if (path / ".git").exists() else path


def manifest(out: Path, pythons: list[str], commit: str) -> dict:
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != "MANIFEST.json")
    total = sum(p.stat().st_size for p in files)
    return {"pythons": pythons, "wheels": {**WHEELS, **FROM_SOURCE}, "older_torch": OLDER_TORCH,
            "torchtitan_toml": TORCHTITAN_TOML, "built_from_source": sorted(FROM_SOURCE),
            "device_image": DEVICE_IMAGE, "megatron_lm": {"tag": MEGATRON_TAG, "commit": commit,
                                                                   "paths": MEGATRON_PATHS},
            "left_out": LEFT_OUT, "total_mib": round(total / 2**20, 2),
            "files": {str(p.relative_to(out)): {"bytes": p.stat().st_size,
                                                "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in files}}


def build(out: Path, megatron_lm: Path, torchtitan: Path, pythons: list[str]) -> dict:
    for part in ("wheels", "megatron-lm", "megatron-core", "torchtitan", "installed"):  # a rebuild starts clean
        shutil.rmtree(out / part, ignore_errors=True)
    (out / "wheels").mkdir(parents=True, exist_ok=True)
    for python in pythons:
        download(python, out / "wheels")
    build_from_source(out / "wheels")
    commit = export_megatron(git_dir(megatron_lm), out / "megatron-lm")
    export_datasets_makefile(git_dir(megatron_lm), commit, out / "megatron-core" / DATASETS_MAKEFILE)
    titan_commit = export_torchtitan_assets(git_dir(torchtitan), out / "torchtitan")
    made = manifest(out, pythons, commit)
    made["torchtitan_assets"] = {"commit": titan_commit, "paths": TORCHTITAN_ASSETS,
                                 "corpus": "tests/assets/c4_test/data.json: the kit's Megatron-LM sources"}
    if made["total_mib"] > LIMIT_MIB:
        raise SystemExit(f"device kit: {made['total_mib']} MiB is over the {LIMIT_MIB} MiB a device call carries")
    (out / "MANIFEST.json").write_text(json.dumps(made, indent=2) + "\n")
    return made


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megatron-lm", type=Path, required=True,
                        help="a Megatron-LM git repository (a clone or a bare mirror) holding the tag " + MEGATRON_TAG)
    parser.add_argument("--torchtitan", type=Path, required=True,
                        help="a torchtitan git repository (a clone or a bare mirror): its test tokenizer")
    parser.add_argument("--out", type=Path, default=ROOT / ".device_kit")
    parser.add_argument("--python", action="append", default=None,
                        help="a Python the device may run (repeatable; default 3.11 and 3.12: torchtitan 0.3 needs 3.11+)")
    args = parser.parse_args(argv)
    made = build(args.out, args.megatron_lm, args.torchtitan, args.python or ["3.11", "3.12"])
    print(f"device kit: {len(made['files'])} files, {made['total_mib']} MiB in {args.out}; Megatron-LM "
          f"{MEGATRON_TAG} at {made['megatron_lm']['commit'][:12]}; left out: {', '.join(LEFT_OUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
