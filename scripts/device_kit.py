"""Build the device kit: what a lent GPU machine (CUDA and PyTorch, no network) lacks to train the external
frameworks under tprimat, in one folder ignored by git (``.device_kit/`` by default, at most 60 MiB).

    python scripts/device_kit.py --megatron-lm <Megatron-LM git directory>

It holds:

- ``wheels/``: the pinned wheels below for each Python the device may run (``--python``, repeatable), downloaded
  from the package registry without their dependencies (the device brings torch, numpy and packaging; each
  small dependency a framework imports is listed here by name);
- ``megatron-lm/``: Megatron-LM's training entry (``pretrain_gpt.py``, the two modules it imports from the
  repository's top level, and ``megatron/training``) exported with ``git archive`` at the commit of the tag that
  released the pinned megatron-core, so the scripts and the library are one release;
- ``MANIFEST.json``: every file with its size and sha256, the Megatron-LM commit, the Pythons, and what was left
  out and why.

Install on the device (docs/frameworks.md): ``pip install --no-index --find-links .device_kit/wheels --no-deps
.device_kit/wheels/*<python tag>*.whl ...`` and ``framework.path=.device_kit/megatron-lm``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
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
}
MEGATRON_TAG = "core_v0.16.1"  # the Megatron-LM tag that released megatron-core 0.16.1
MEGATRON_PATHS = ["pretrain_gpt.py", "gpt_builders.py", "model_provider.py", "megatron/training", "megatron/legacy",
                  "megatron/rl", "megatron/post_training"]  # what megatron/training imports besides megatron.core
LEFT_OUT = {
    "transformer-engine": "compiled against one CUDA and torch build (hundreds of MiB); Megatron-LM runs with "
                          "--transformer-impl local instead",
    "apex": "built from source against the device's CUDA; Megatron-LM's local implementation does without it",
    "nemo_toolkit": "hundreds of MiB with its dependencies; NeMo is read from its logs (tprimat ingest)",
    "datasets, pyarrow, tokenizers": "about 50 MiB for torchtitan's text datasets; the device runs use synthetic "
                                     "or mock data",
    "deepspeed, transformers": "the device's own PyTorch image, or the dev extra's; not needed for the kit's frameworks",
}
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux_2_17_x86_64", "any"]


def wheels_for(wheels: Path, python_tag: str) -> list[Path]:
    """The kit's wheels that install on one Python (``cp311``): pure and abi3 ones, and those built for it."""
    return [w for w in sorted(wheels.glob("*.whl"))
            if "-cp3" not in w.name or f"-{python_tag}-" in w.name or "abi3" in w.name]


def download(python: str, dest: Path) -> None:
    """Every pinned wheel built for ``python`` (``3.12``), without dependencies, from the registry."""
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", python, *platforms, "--dest", str(dest),
           *(f"{name}=={version}" for name, version in WHEELS.items())]
    subprocess.run(cmd, check=True)


def export_megatron(repo: Path, dest: Path) -> str:
    """Megatron-LM's training entry at ``MEGATRON_TAG`` (``git archive``); returns the commit."""
    commit = subprocess.run(["git", "--git-dir", str(repo), "rev-parse", f"{MEGATRON_TAG}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "--git-dir", str(repo), "archive", "--format=tar", commit, *MEGATRON_PATHS],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return commit


def git_dir(path: Path) -> Path:
    """A clone's ``.git`` or a bare repository (what the workplace's ``fetch`` mirrors)."""
    return path / ".git" if (path / ".git").exists() else path


def manifest(out: Path, pythons: list[str], commit: str) -> dict:
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != "MANIFEST.json")
    total = sum(p.stat().st_size for p in files)
    return {"pythons": pythons, "wheels": WHEELS, "megatron_lm": {"tag": MEGATRON_TAG, "commit": commit,
                                                                   "paths": MEGATRON_PATHS},
            "left_out": LEFT_OUT, "total_mib": round(total / 2**20, 2),
            "files": {str(p.relative_to(out)): {"bytes": p.stat().st_size,
                                                "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in files}}


def build(out: Path, megatron_lm: Path, pythons: list[str]) -> dict:
    (out / "wheels").mkdir(parents=True, exist_ok=True)
    for python in pythons:
        download(python, out / "wheels")
    commit = export_megatron(git_dir(megatron_lm), out / "megatron-lm")
    made = manifest(out, pythons, commit)
    if made["total_mib"] > LIMIT_MIB:
        raise SystemExit(f"device kit: {made['total_mib']} MiB is over the {LIMIT_MIB} MiB a device call carries")
    (out / "MANIFEST.json").write_text(json.dumps(made, indent=2) + "\n")
    return made


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megatron-lm", type=Path, required=True,
                        help="a Megatron-LM git repository (a clone or a bare mirror) holding the tag " + MEGATRON_TAG)
    parser.add_argument("--out", type=Path, default=ROOT / ".device_kit")
    parser.add_argument("--python", action="append", default=None,
                        help="a Python the device may run (repeatable; default 3.11 and 3.12: torchtitan 0.3 needs 3.11+)")
    args = parser.parse_args(argv)
    made = build(args.out, args.megatron_lm, args.python or ["3.11", "3.12"])
    print(f"device kit: {len(made['files'])} files, {made['total_mib']} MiB in {args.out}; Megatron-LM "
          f"{MEGATRON_TAG} at {made['megatron_lm']['commit'][:12]}; left out: {', '.join(LEFT_OUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
