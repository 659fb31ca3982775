"""Rehearse the external frameworks with their own code on CPU (docs/frameworks.md, "Rehearsed with their own
code"). Each framework's pinned release runs in its own virtual environment (built, or reused, under
``.rehearse/envs/``, ignored by git) or, where the project's own environment already pins it, in that one. Each
point's launch is written by tprimat exactly as a launch writes it (``dry_run=true``), then handed to the
framework's own code up to the point where it holds its whole configuration:

- NeMo 2 and Megatron-Bridge: the generated script with ``TPRIMAT_REHEARSE`` set (``bench/rehearse_runner.py``):
  the framework's finalisation (Bridge's ``runtime_config_update``; NeMo 2's Fiddle build), every setting read back
  from its objects, its model built on the meta device and counted;
- Megatron-LM and Megatron-DeepSpeed: their own ``parse_args`` and ``validate_args`` over the command line
  (``bench/rehearse_argv.py``), every flag's value read back from the validated namespace under the parser's own
  destination name; Megatron-LM's model built on the meta device where the layout is one rank.

    python bench/rehearse.py --megatron-lm <Megatron-LM git dir> --megatron-deepspeed <Megatron-DeepSpeed git dir>
    python bench/rehearse.py --framework bridge --models qwen --platforms h100

Frameworks whose sources are not given are listed as not rehearsed, with the flag that would. For each point it
prints the settings that differ (tprimat's value, the framework's, where it was read) and the parameter count
beside tprimat's plan; the last lines are ``frameworks_rehearsed=<n>`` and ``rehearsal_settings_equal=<e>/<set>``.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.rehearse_hf import write_cache  # noqa: E402
from scripts.device_kit import MEGATRON_TAG, export_megatron  # noqa: E402

HOME = ROOT / ".rehearse"
NVIDIA = ("h100", "h200", "b200")
PLATFORM = {"h100": "nvidia", "h200": "nvidia", "b200": "nvidia", "mi300x": "amd", "mi325x": "amd", "mi355x": "amd"}
MODELS = ("llama", "qwen", "mistral", "llama70b", "llama405b")
METHODOLOGIES = ("maximum_performance", "identical_config")
# The compute capability each GPU reports to torch (NVIDIA's CUDA GPUs table: H100 and H200 9.0, B200 10.0; on ROCm
# torch reports the gfx target: MI300X and MI325X gfx942 -> 9.4, MI355X gfx950 -> 9.5), which Megatron-LM's
# validate_args asks (get_device_arch_version with tp or cp above 1 or Megatron FSDP; get_device_capability with
# grouped GEMMs): the rehearsal answers as the target GPU would
ARCH = {"h100": (9, 0), "h200": (9, 0), "b200": (10, 0), "mi300x": (9, 4), "mi325x": (9, 4), "mi355x": (9, 5)}
MEGATRON_DEEPSPEED_COMMIT = "4efb479d5317ce9b86096b9d8e3e8030b0b5263b"  # its master of 2025-07-16: it has no tags
PRIMUS_TAG = "v26.5.1"
TORCHTITAN_TOML_TAG = "v0.2.2"


@dataclass(frozen=True)
class Framework:
    what: str
    overrides: tuple[str, ...]
    platforms: tuple[str, ...]
    kind: str  # "script": the generated script; "argv": its own argument parser; "primus", "torchtitan": their own
    # configuration paths
    installs: Optional[tuple[tuple[str, ...], ...]] = None  # pip argument lists; None: the project's environment
    source: Optional[str] = None  # the flag that names its git directory
    arguments: str = ""  # its arguments module (argv kind)
    published: tuple[tuple[str, tuple[str, ...]], ...] = ()  # its published layouts: (label, overrides)
    # requirements published for Python 3.12 only (PYTHON312): their 3.12 wheels unpacked into this 3.11 environment
    python312: tuple[str, ...] = ()
    # packages its installs pull in that cannot load on this CPU build of torch and that nothing rehearsed imports
    uninstall: tuple[str, ...] = ()
    lora: bool = False  # also each model under training.peft=lora (its launch sets LoRA through its own API)


# The spec's own values and where each framework holds them once finalised: read from the run spec and plan of the
# point's result (not from tprimat's translation), so a wrong or missing translation shows as a difference.
SPEC = {
    "num_layers": ("model", "num_layers"), "hidden_size": ("model", "hidden_size"),
    "ffn_hidden_size": ("model", "ffn_hidden_size"), "num_attention_heads": ("model", "num_attention_heads"),
    "num_kv_heads": ("model", "num_kv_heads"), "rms_norm_eps": ("model", "rms_norm_eps"),
    "rope_theta": ("model", "rope_theta"), "seq_length": ("training", "seq_length"),
    "micro_batch_size": ("training", "micro_batch_size"), "global_batch_size": ("training", "global_batch_size"),
    "max_steps": ("training", "max_steps"), "seed": ("training", "seed"), "lr": ("training", "optimizer", "lr"),
    "min_lr": ("training", "optimizer", "min_lr"), "warmup_steps": ("training", "optimizer", "warmup_steps"),
    "weight_decay": ("training", "optimizer", "weight_decay"), "beta1": ("training", "optimizer", "beta1"),
    "beta2": ("training", "optimizer", "beta2"), "eps": ("training", "optimizer", "eps"),
    "grad_clip": ("training", "optimizer", "grad_clip"), "tp": ("plan", "tp"), "pp": ("plan", "pp"),
    "cp": ("plan", "cp"), "dp": ("plan", "dp"), "recompute": ("training", "activation_checkpointing"),
    "precision": ("training", "precision"), "fp8_recipe": ("training", "fp8", "recipe")}
MEGATRON_NAMES = {  # spec key -> Megatron-LM's argument (core_v0.16.1)
    "num_layers": "num_layers", "hidden_size": "hidden_size", "ffn_hidden_size": "ffn_hidden_size",
    "num_attention_heads": "num_attention_heads", "num_kv_heads": "num_query_groups",
    "rms_norm_eps": "layernorm_epsilon",  # --norm-epsilon's destination
    "rope_theta": "rotary_base", "seq_length": "seq_length", "micro_batch_size": "micro_batch_size",
    "global_batch_size": "global_batch_size", "max_steps": "train_iters", "seed": "seed", "lr": "lr",
    "min_lr": "min_lr", "warmup_steps": "lr_warmup_iters", "weight_decay": "weight_decay", "beta1": "adam_beta1",
    "beta2": "adam_beta2", "eps": "adam_eps", "grad_clip": "clip_grad", "tp": "tensor_model_parallel_size",
    "pp": "pipeline_model_parallel_size", "cp": "context_parallel_size", "dp": "data_parallel_size",
    "recompute": "recompute_granularity"}  # None where the spec says none (Megatron's default: no recompute)
READ_AS = {
    "megatron": MEGATRON_NAMES,
    # Megatron-DeepSpeed's own names (megatron/arguments.py); it has no context parallelism
    "megatron_deepspeed": {**{k: v for k, v in MEGATRON_NAMES.items() if k != "cp"},
                           "num_kv_heads": "num_key_value_heads", "rms_norm_eps": "layernorm_epsilon",
                           "rope_theta": "rope_theta"},
    "primus": MEGATRON_NAMES,
    # torchtitan's saved config as tprimat's audit reads it (tprimat.backends.external.audit.torchtitan_saved_config)
    "torchtitan_toml": {k: k for k in ("lr", "min_lr", "warmup_steps", "weight_decay", "global_batch_size", "tp",
                                       "pp", "cp", "seq_length", "micro_batch_size", "beta1", "beta2", "recompute",
                                       "precision", "fp8_recipe")},
    "torchtitan": {k: k for k in ("lr", "min_lr", "warmup_steps", "weight_decay", "global_batch_size", "tp", "pp",
                                  "cp", "seq_length", "micro_batch_size", "recompute")} | {"beta1": "beta1", "beta2": "beta2"},
}
def spec_rows(name: str, result: dict) -> list[list]:
    """[spec key, the framework's name for it, the spec's value] for every value the framework's own object is read
    for, taken from the point's own result (its spec and plan)."""
    rows = []
    for key, where in READ_AS.get(name, {}).items():
        node = result if SPEC[key][0] == "plan" else result["spec"]
        for part in SPEC[key]:
            node = node[part]
        if key == "recompute" and where == "recompute_granularity" and node == "none":
            node = None  # Megatron's argument holds no recompute as None
        if key == "fp8_recipe" and result["spec"]["training"]["precision"] != "fp8":
            continue  # a recipe is read back only where the run trains in fp8
        rows.append([key, where, node])
    return rows


# The published Llama 3 70B layouts (docs/planning.md's rows; tests/test_published_layouts.py validates them): each is
# rehearsed as published, on the GPUs and batch it ran with, beside the default matrix (whose one-node 70B points
# tprimat refuses before launch: no layout fits eight GPUs)
NV_70B = ("platform=nvidia", "platform.gpu=h100", "model=llama70b", "platform.devices_per_node=8", "platform.nodes=8",
          "training.seq_length=8192", "training.micro_batch_size=1", "training.precision=fp8",
          "training.grad_reduce_in_fp32=false", "parallelism.zero_stage=1", "parallelism.fsdp=false",
          "parallelism.sequence_parallel=true", "training.activation_checkpointing=none")
BRIDGE_70B = ("Megatron-Bridge 26.04 H100 Llama 3 70B FP8 TP4 PP8 VP5, 64 GPUs",
              (*NV_70B, "training.global_batch_size=256", "parallelism.tp=4", "parallelism.pp=8", "parallelism.vp=5"))
NEMO_70B = ("NeMo 24.07 H100 Llama 3 70B FP8 TP4 PP4 CP2 VP5, 64 GPUs",
            (*NV_70B, "training.global_batch_size=128", "parallelism.tp=4", "parallelism.pp=4", "parallelism.cp=2",
             "parallelism.vp=5"))
# Llama 3.1 405B as Megatron-Bridge's recipe splits it (llama31_405b_pretrain_config: the embedding and the loss
# counted as a layer each, 128 units over PP 8 x VP 8), at its 25.09 H100 layout
BRIDGE_405B = ("Megatron-Bridge 25.09 H100 Llama 3.1 405B FP8 TP8 PP8 CP2 VP8, 1024 GPUs",
               (*NV_70B, "model=llama405b", "platform.nodes=128", "training.global_batch_size=512", "parallelism.tp=8",
                "parallelism.pp=8", "parallelism.cp=2", "parallelism.vp=8",
                "parallelism.account_for_embedding_in_pipeline_split=true",
                "parallelism.account_for_loss_in_pipeline_split=true"))

# Transformer Engine, apex, mamba and NVIDIA's CUDA-only packages are left out everywhere: they build for one CUDA;
# the generated scripts use local layers where the image has no Transformer Engine (as on a GPU without it).
FRAMEWORKS = {
    "nemo2": Framework(
        "NeMo 2 (nemo_toolkit 2.7.3, the last release with nemo.collections.llm)",
        ("framework=nemo", "framework.flavour=nemo2"), NVIDIA, "script",
        # nemo_run 0.11.1 imports leptonai.api.v1 (gone in leptonai 0.47); pyarrow 20+ needs NumPy 2, NeMo pins < 2
        ((("torch==2.13.0", "nemo_toolkit[llm,run]==2.7.3", "nemo_run==0.11.1", "leptonai==0.26.6", "pyarrow<20")),),
        published=(NEMO_70B, BRIDGE_405B), lora=True),
    "bridge": Framework(
        "Megatron-Bridge 0.3.1 (NeMo Framework 26.02; the newest release for Python 3.11)",
        ("framework=nemo", "framework.flavour=bridge"), NVIDIA, "script",
        (("torch==2.13.0", "megatron-core==0.16.1", "transformers<5", "datasets", "accelerate", "omegaconf>=2.3",
          "tensorboard", "rich", "wandb", "six", "regex", "pyyaml", "tqdm", "hydra-core==1.3.2", "einops",
          "packaging", "triton==3.9.0", "megatron-energon", "nvidia-modelopt"),
         ("--no-deps", "megatron-bridge==0.3.1")), published=(BRIDGE_70B, BRIDGE_405B), uninstall=("torchvision",),
        lora=True),
    "bridge_newest": Framework(
        "Megatron-Bridge 0.6.2 (the newest release; NeMo Framework 26.04 and later) with megatron-core 0.19.2 "
        "(Python 3.12 releases, rehearsed on 3.11: see PYTHON312)",
        ("framework=nemo", "framework.flavour=bridge"), NVIDIA, "script",
        (("torch==2.13.0", "transformers>=5.8,<=5.12.1", "datasets", "accelerate", "omegaconf>=2.3", "tensorboard",
          "rich", "wandb", "six", "regex", "pyyaml", "tqdm", "hydra-core>=1.3.4,<1.4", "einops", "packaging",
          "triton==3.9.0", "megatron-energon", "peft", "mistral-common", "diffusers>=0.36.0", "timm",
          "nvidia-modelopt", "typing_extensions"),),
        published=(BRIDGE_70B, BRIDGE_405B), python312=("megatron-core==0.19.2", "megatron-bridge==0.6.2"), lora=True,
        # timm's torchvision from PyPI fails to load beside the CPU torch ("operator torchvision::nms does not
        # exist"), and Bridge's recipes import it only for vision models
        uninstall=("torchvision",)),
    "megatron": Framework(
        f"Megatron-LM {MEGATRON_TAG} (the release of the project's megatron-core 0.16.1)",
        ("framework=megatron",), NVIDIA, "argv",
        # the wheels of the device kit (scripts/device_kit.py) that Megatron-LM's training package imports
        (("torch==2.13.0", "megatron-core==0.16.1", "einops==0.8.2", "six==1.17.0", "packaging", "numpy", "pyyaml",
          "regex", "triton==3.9.0", "pydantic"),),
        "--megatron-lm", "megatron.training.arguments", published=(BRIDGE_70B, BRIDGE_405B)),
    "megatron_deepspeed": Framework(
        f"Megatron-DeepSpeed {MEGATRON_DEEPSPEED_COMMIT[:12]} with DeepSpeed 0.19.6 (0.19.7 removed "
        "deepspeed.compression.compress, which its pretrain_gpt.py imports)",
        ("framework=megatron_deepspeed",), ("h100", "mi300x"), "argv",
        (("torch==2.13.0", "deepspeed==0.19.6", "numpy", "packaging", "six", "regex", "einops", "pybind11",
          "transformers<5"),),
        "--megatron-deepspeed", "megatron.arguments"),
    "torchtitan": Framework(
        "torchtitan 0.3.0 (the project's own pin)", ("framework=torchtitan",), NVIDIA, "torchtitan"),
    "torchtitan_toml": Framework(
        f"torchtitan {TORCHTITAN_TOML_TAG} (the last release read from TOML: flavour toml) with its checkout's TOMLs",
        ("framework=torchtitan", "framework.flavour=toml"), NVIDIA, "torchtitan_toml",
        (("torch==2.13.0", f"torchtitan=={TORCHTITAN_TOML_TAG[1:]}", "torchdata>=0.8.0", "datasets>=2.21.0",
          "tokenizers", "tomli>=1.1.0", "fsspec", "tyro", "tensorboard", "einops", "pillow", "triton==3.9.0"),),
        "--torchtitan"),
    "primus": Framework(
        f"AMD Primus {PRIMUS_TAG} with the Megatron-LM it pins (its third_party/Megatron-LM submodule)",
        ("framework=primus",), ("mi300x", "mi325x", "mi355x"), "primus",
        (("torch==2.13.0", "pyyaml", "einops", "six", "regex", "packaging", "numpy", "pydantic", "triton==3.9.0"),),
        "--primus"),
}


REPOS = ("megatron_lm", "megatron_deepspeed", "primus", "torchtitan")  # the git directories given by flag


def python_of(name: str, log) -> Path:
    """The framework's interpreter: its own environment, reused while its install lists are unchanged (a stamp
    holds them), or the project's."""
    installs = FRAMEWORKS[name].installs
    if installs is None:
        return Path(sys.executable)
    env = HOME / "envs" / name
    stamp = env / "tprimat-installs.json"
    wanted = install_list(name)
    if stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return env / "bin" / "python"
    started = time.monotonic()
    venv.create(env, with_pip=True, clear=True)
    for args in installs:
        proc = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", *args],
                              capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            raise SystemExit(f"rehearse: pip install {' '.join(args)} for {name} failed:\n{proc.stderr[-3000:]}")
    if FRAMEWORKS[name].python312:
        unpack_python312(env, FRAMEWORKS[name].python312)
    if FRAMEWORKS[name].uninstall:
        subprocess.run([str(env / "bin" / "python"), "-m", "pip", "uninstall", "--yes", "--quiet",
                        *FRAMEWORKS[name].uninstall], check=True, capture_output=True, timeout=600)
    stamp.write_text(json.dumps(wanted))
    log(f"{name}: environment built in {time.monotonic() - started:.0f} s ({env.relative_to(ROOT)})")
    return env / "bin" / "python"


def install_list(name: str) -> list[list[str]]:
    """What the framework's environment is built from (its stamp): pip argument lists, then its 3.12 wheels."""
    fw = FRAMEWORKS[name]
    return ([list(args) for args in fw.installs or ()] + ([["python3.12 wheels", *fw.python312]] if fw.python312 else [])
            + ([["uninstall", *fw.uninstall]] if fw.uninstall else []))


# Megatron-Bridge 0.4 and later, and the megatron-core releases they need, are published for Python 3.12 only
# (Requires-Python >=3.12; megatron-core's wheels are cp312), and this project's machines have Python 3.11 alone.
# Their code compiles under 3.11 (every module of megatron-bridge 0.6.2 and megatron-core 0.19.2 byte-compiles), and
# of 3.12's library they use typing.override, which typing_extensions carries: their 3.12 wheels are unpacked into
# the 3.11 environment, typing.override given from typing_extensions (a sitecustomize of that environment only), and
# the one compiled module, megatron-core's dataset index helper (built for 3.12; GPTDataset builds every sample
# index with it, mock data included, so this environment cannot train: the rehearsal stops before any data set),
# left out. The rehearsal so runs these releases' own code, not on their Python.
PYTHON312_SITECUSTOMIZE = """import typing
if not hasattr(typing, "override"):  # Python 3.12's; written by tprimat's bench/rehearse.py for its 3.12 wheels
    import typing_extensions
    typing.override = typing_extensions.override
"""


def unpack_python312(env: Path, requirements: tuple[str, ...]) -> None:
    python = str(env / "bin" / "python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    wheels = Path(tempfile.mkdtemp(prefix="rehearse-py312-"))
    subprocess.run([python, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "-d", str(wheels), *requirements], check=True, timeout=1800)
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive_:
            names = [n for n in archive_.namelist() if not n.endswith(".so")]
            archive_.extractall(site, names)
    (site / "sitecustomize.py").write_text(PYTHON312_SITECUSTOMIZE)


def archive(repo: Optional[Path], ref: Optional[str], dest: Path, paths=()) -> Optional[Path]:
    """``git archive`` of ``paths`` at ``ref`` into ``dest``, once per ref (a marker holds it); without a git
    directory, an earlier export is reused (``ref`` None: whatever it was exported at)."""
    marker = dest / ".tprimat-ref"
    if marker.exists() and (marker.read_text() == ref or (repo is None and ref is None)):
        return dest
    if repo is None:
        return None
    tar_bytes = subprocess.run(["git", "--git-dir", str(repo), "archive", "--format=tar", ref, *paths],
                               check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        tar.extractall(dest, filter="data")
    marker.write_text(ref)
    return dest


def needs(name: str) -> str:
    """The flags that name the git directories a framework's sources are exported from."""
    return FRAMEWORKS[name].source + " <git dir>" + (" --megatron-lm <git dir>" if name == "primus" else "")


def missing(name: str) -> Optional[str]:
    """Why the framework cannot be rehearsed without building or exporting anything (its environment not built at
    its install list, or its sources not exported), with the command that would; None where it can."""
    fw = FRAMEWORKS[name]
    stamp = HOME / "envs" / name / "tprimat-installs.json"
    if fw.installs and (not stamp.exists() or json.loads(stamp.read_text()) != install_list(name)):
        return f"no {name} environment: python bench/rehearse.py --framework {name} builds it"
    if fw.source and export_sources(name, dict.fromkeys(REPOS)) is None:
        return f"no {name} sources: python bench/rehearse.py --framework {name} {needs(name)} exports them"
    return None


def export_sources(name: str, repos: dict) -> Optional[list[Path]]:
    """The framework's sources at its pinned release, under .rehearse/src (first on its Python's path), exported
    from the git directories given or reused from an earlier export; None where neither exists."""
    src = HOME / "src"
    if name == "megatron":
        dest = src / "megatron"
        if repos["megatron_lm"] and not (dest / ".tprimat-ref").exists():
            dest.mkdir(parents=True, exist_ok=True)
            (dest / ".tprimat-ref").write_text(export_megatron(repos["megatron_lm"], dest))
        return [dest] if (dest / ".tprimat-ref").exists() else None
    if name == "megatron_deepspeed":
        found = archive(repos["megatron_deepspeed"], MEGATRON_DEEPSPEED_COMMIT, src / "megatron_deepspeed")
        return [found] if found else None
    if name == "torchtitan_toml":  # the TOMLs its launch names, from the release's own tree
        found = archive(repos["torchtitan"], TORCHTITAN_TOML_TAG if repos["torchtitan"] else None,
                        src / "torchtitan_toml", ("torchtitan/models",))
        return [found] if found else None
    if name == "primus":
        pinned = None
        if repos["primus"]:  # the submodule's commit, as Primus's tree records it
            pinned = subprocess.run(["git", "--git-dir", str(repos["primus"]), "rev-parse",
                                     f"{PRIMUS_TAG}:third_party/Megatron-LM"], check=True, capture_output=True,
                                    text=True).stdout.strip()
        found = [archive(repos["primus"], PRIMUS_TAG if repos["primus"] else None, src / "primus",
                         ("primus", "examples")),
                 archive(repos["megatron_lm"] if pinned else None, pinned, src / "primus-megatron-lm",
                         ("megatron", "pretrain_gpt.py", "gpt_builders.py", "model_provider.py"))]
        return found if all(found) else None
    return None


def points(name: str, models, platforms, sources: Optional[list[Path]], extra: tuple = ()) -> list[dict]:
    """Every point's launch, as tprimat writes it (dry_run), with the plan's parameter count, or tprimat's refusal
    before launch; ``extra``: overrides added to every point (``--set``)."""
    from tprimat.compose import compose
    from tprimat.execute.run import execute
    fw, out = FRAMEWORKS[name], []
    matrix = [(f"{model} {methodology} {gpu}", (f"platform={PLATFORM[gpu]}", f"platform.gpu={gpu}", f"model={model}",
                                                f"methodology={methodology}"))
              for model in models for methodology in METHODOLOGIES for gpu in platforms]
    published = [(label, ("methodology=identical_config", *layout)) for label, layout in fw.published
                 if next(o for o in reversed(layout) if o.startswith("model=")).split("=")[1] in models]
    # LoRA from a base checkpoint: the rehearsal stops before anything is loaded, so the directory named is any that
    # exists (Megatron-Bridge 0.6's validate checks that it does)
    lora = [(f"{model} LoRA {gpu}", (f"platform={PLATFORM[gpu]}", f"platform.gpu={gpu}", f"model={model}",
                                     "training.peft=lora", "framework.pretrained_checkpoint=."))
            for model in models for gpu in platforms] if fw.lora else []
    for label, chosen in matrix + published + lora:
        overrides = [*chosen, *fw.overrides, *extra, "dry_run=true", "logging.wandb.mode=disabled",
                     *([f"framework.path={sources[0]}"] if sources else [])]
        run_dir = Path(tempfile.mkdtemp(prefix=f"rehearse-{name}-"))
        result = execute(compose(overrides), run_dir, overrides).result
        point = {"point": label, "status": result["status"],
                 "reason": result.get("error") or result.get("reason"), "out": str(run_dir / "rehearsal.json")}
        if result["status"] == "dry_run":
            plan = result["plan"]
            point.update(params=plan["params_total"], world_size=plan["world_size"],
                         arch=ARCH[result["spec"]["platform"]["gpu"]], spec_rows=spec_rows(name, result))
            if fw.kind == "script":
                point["script"] = str(run_dir / "launch" / "nemo_pretrain.py")
            elif fw.kind == "torchtitan":
                argv = plan["backend_config"]["argv"]
                point.update(launch=str(run_dir / "launch"), args=argv[argv.index("--module"):])
            elif fw.kind == "torchtitan_toml":
                argv = plan["backend_config"]["argv"]
                point["args"] = argv[argv.index("--job.config_file"):]
            elif fw.kind == "primus":
                point.update(experiment=str(run_dir / "launch" / "experiment.yaml"),
                             expected=primus_overrides(overrides))
            else:
                argv = plan["backend_config"]["argv"]
                point["env"] = plan["backend_config"]["env"]
                point["argv"] = argv[next(i for i, a in enumerate(argv) if a.endswith("pretrain_gpt.py")) + 1:]
        out.append(point)
    return out


def spec_and_plan(overrides: list[str]):
    from tprimat.compose import compose
    from tprimat.spec.build import build_spec
    from tprimat.spec.detect import DetectedHardware
    from tprimat.spec.plan import make_plan
    hardware = DetectedHardware("none", "rehearsal: plans for GPUs", 0, 0.0, None)
    spec = build_spec(compose(overrides), hardware)
    return spec, make_plan(spec, hardware)


def primus_overrides(overrides: list[str]) -> dict:
    """The overrides tprimat's Primus launch means, as Python values (before any YAML is written or read)."""
    from tprimat.backends.external.primus import experiment
    return experiment(*spec_and_plan(overrides), "")["modules"]["pre_trainer"]["overrides"]


def run_point(name: str, python: Path, point: dict, sources: Optional[list[Path]]) -> str:
    """One process a point: the frameworks read the world size from a process group once one exists."""
    fw = FRAMEWORKS[name]
    env = {**os.environ, "HF_HOME": str(write_cache(HOME / "hf")), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "WANDB_MODE": "disabled"}
    if sources:
        env["PYTHONPATH"] = os.pathsep.join(map(str, sources))
    if fw.kind == "script":
        argv = [str(python), str(ROOT / "bench" / "rehearse_runner.py"), f"{point['out']}={point['script']}"]
    elif fw.kind == "torchtitan":
        expected = Path(point["out"]).with_suffix(".expected.json")
        expected.write_text(json.dumps({"args": point["args"], "spec_rows": point["spec_rows"]}))
        argv = [str(python), str(ROOT / "bench" / "rehearse_torchtitan.py"), point["launch"], str(expected),
                point["out"]]
    elif fw.kind == "torchtitan_toml":
        expected = Path(point["out"]).with_suffix(".expected.json")
        expected.write_text(json.dumps({"args": point["args"], "spec_rows": point["spec_rows"]}))
        argv = [str(python), str(ROOT / "bench" / "rehearse_torchtitan_toml.py"), str(expected), point["out"]]
        env["PYTHONPATH"] = str(ROOT)  # tprimat's audit reader, not torchtitan's tree (the TOMLs are files there)
    elif fw.kind == "primus":
        expected = Path(point["out"]).with_suffix(".expected.json")
        expected.write_text(json.dumps({"overrides": point["expected"], "spec_rows": point["spec_rows"]}))
        argv = [str(python), str(ROOT / "bench" / "rehearse_primus.py"), point["experiment"], str(expected),
                point["out"], "%d.%d" % point["arch"]]
        env["WORLD_SIZE"] = str(point["world_size"])
    else:
        spec = Path(point["out"]).with_suffix(".points.json")
        spec.write_text(json.dumps([point]))
        argv = [str(python), str(ROOT / "bench" / "rehearse_argv.py"), fw.arguments, str(spec), point["out"] + ".list"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env,
                          cwd=sources[0] if sources else tempfile.mkdtemp())
    listed = Path(point["out"] + ".list")
    if listed.exists():
        Path(point["out"]).write_text(json.dumps(json.loads(listed.read_text())[0]))
    return proc.stderr


def same(spec, framework) -> bool:
    if isinstance(spec, float) and isinstance(framework, (int, float)) and not isinstance(framework, bool):
        return math.isclose(spec, framework, rel_tol=1e-9)
    return type(spec) is type(framework) and spec == framework


def report(name: str, todo: list[dict], log) -> dict:
    equal = total = params_equal = built = clean = 0
    for point in todo:
        if point["status"] != "dry_run":
            log(f"  {point['point']}: refused before launch ({point['status']}): {point['reason'][:300]}")
            continue
        if not Path(point["out"]).exists():
            log(f"  {point['point']}: no record; the framework's output ends:\n{point['stderr'][-2000:]}")
            total += 1
            continue
        record = json.loads(Path(point["out"]).read_text())
        rows = record["settings"]
        # a point whose finalisation failed counts none of its rows equal: they were read before it
        differ = rows if record["error"] else [r for r in rows if not same(r["spec"], r["framework"])]
        equal += len(rows) - len(differ)
        total += len(rows) or 1
        clean += record["error"] is None and not differ
        params = record["params"]
        built += params is not None
        params_equal += params == point["params"]
        count = ("parameters equal" if params == point["params"] else "parameters not built" if params is None else
                 f"parameters {params:,} against the plan's {point['params']:,}")
        log(f"  {point['point']}: {len(rows) - len(differ)}/{len(rows)} settings equal, {count}"
            + (f"; {record['error']}" if record["error"] else ""))
        for r in ([] if record["error"] else differ):
            log(f"    differs: {r['key']} tprimat {r['spec']!r}, framework {r['framework']!r} ({r['where']})")
    return {"framework": name, "equal": equal, "set": total, "params_built": built, "params_equal": params_equal,
            "rehearsed": clean > 0}


def rehearse(name: str, models, platforms, sources: Optional[list[Path]], log, extra: tuple = ()) -> dict:
    python = python_of(name, log)
    todo = points(name, models, platforms, sources, extra)
    started = time.monotonic()
    for point in todo:
        if point["status"] == "dry_run":
            point["stderr"] = run_point(name, python, point, sources)
    log(f"{name}: {sum(p['status'] == 'dry_run' for p in todo)} point(s) rehearsed in "
        f"{time.monotonic() - started:.0f} s")
    return report(name, todo, log)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", action="append", choices=sorted(FRAMEWORKS), help="repeatable; all by default")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--platforms", nargs="+", default=None, help="GPUs (default: each framework's)")
    parser.add_argument("--megatron-lm", type=Path, help="a Megatron-LM git directory (clone or mirror)")
    parser.add_argument("--megatron-deepspeed", type=Path, help="a Megatron-DeepSpeed git directory")
    parser.add_argument("--primus", type=Path, help="an AMD Primus git directory (with --megatron-lm: the "
                        "Megatron-LM commit Primus pins)")
    parser.add_argument("--torchtitan", type=Path, help=f"a torchtitan git directory (its {TORCHTITAN_TOML_TAG} TOMLs)")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="overrides added to every point (training.activation_checkpointing=full "
                             "training.recompute_num_layers=2: a setting the default matrix leaves at its default)")
    parser.add_argument("--out", type=Path, help="write the summary as JSON here")
    args = parser.parse_args(argv)
    repos = {key: getattr(args, key) for key in REPOS}
    done = []
    for name in args.framework or list(FRAMEWORKS):
        fw = FRAMEWORKS[name]
        print(f"== {name}: {fw.what}", flush=True)
        sources = export_sources(name, repos) if fw.source else None
        if fw.source and sources is None:
            print(f"{name}: not rehearsed: needs {needs(name)}", flush=True)
            continue
        platforms = [g for g in (args.platforms or fw.platforms) if g in fw.platforms]
        done.append(rehearse(name, args.models, platforms, sources, lambda line: print(line, flush=True),
                             tuple(args.set)))
    if args.out:
        args.out.write_text(json.dumps(done, indent=1) + "\n")
    equal, total = sum(d["equal"] for d in done), sum(d["set"] for d in done)
    print(f"rehearsal_params_equal={sum(d['params_equal'] for d in done)}/{sum(d['params_built'] for d in done)}")
    print(f"frameworks_rehearsed={sum(d['rehearsed'] for d in done)}")
    print(f"rehearsal_settings_equal={equal}/{total}")
    return 0 if equal == total else 1


if __name__ == "__main__":
    raise SystemExit(main())
