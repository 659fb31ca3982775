"""Rehearse the external frameworks with their own code on CPU (docs/frameworks.md, "Rehearsed with their own
code"): each framework's pinned release in its own virtual environment (built, or reused, under ``.rehearse/``,
ignored by git), each point's launch written by tprimat exactly as a launch writes it (``dry_run=true``), then run
by that framework's own Python with ``TPRIMAT_REHEARSE`` set: the generated script sets everything, the framework
finalises its configuration (Megatron-Bridge's ``runtime_config_update``; NeMo 2's Fiddle build of the model,
strategy, optimizer, data and precision plugin), every setting is read back from the framework's own objects,
the framework's own model is built on the meta device and its parameters counted, and the script stops before
training.

    python bench/rehearse.py                        # every framework it rehearses, every point
    python bench/rehearse.py --framework bridge --models llama --platforms h100

For each point it prints the settings that differ (spec's value, the framework's, where it was read) and the
parameter count beside tprimat's plan; the last lines are ``frameworks_rehearsed=<n>`` and
``rehearsal_settings_equal=<equal>/<set>``. A point tprimat refuses before launch is listed with its reason.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.rehearse_hf import write_cache  # noqa: E402

HOME = ROOT / ".rehearse"
RUNNER = ROOT / "bench" / "rehearse_runner.py"
# name -> (framework flavour overrides, pip installs in order (each a pip argument list), platforms, what it is).
# Transformer Engine, apex, mamba and NVIDIA's CUDA-only packages are left out: they build for one CUDA; the
# generated scripts run local layers where the image has no Transformer Engine (as they do on a GPU without it).
ENVS = {
    "nemo2": (["framework=nemo", "framework.flavour=nemo2"],
              [["torch==2.13.0", "nemo_toolkit[llm,run]==2.7.3", "nemo_run==0.11.1",
                # nemo_run 0.11.1 imports leptonai.api.v1 (gone in leptonai 0.47); pyarrow 20+ needs NumPy 2 and
                # NeMo's nlp extra pins numpy<2
                "leptonai==0.26.6", "pyarrow<20"]],
              ("h100", "h200", "b200"), "NeMo 2 (nemo_toolkit 2.7.3, the last release with nemo.collections.llm)"),
    "bridge": (["framework=nemo", "framework.flavour=bridge"],
               [["torch==2.13.0", "megatron-core==0.16.1", "transformers<5", "datasets", "accelerate",
                 "omegaconf>=2.3", "tensorboard", "rich", "wandb", "six", "regex", "pyyaml", "tqdm",
                 "hydra-core==1.3.2", "einops", "packaging", "triton==3.9.0", "megatron-energon"],
                ["--no-deps", "megatron-bridge==0.3.1"]],
               ("h100", "h200", "b200"), "Megatron-Bridge 0.3.1 (NeMo Framework 26.02; the newest for Python 3.11)"),
}
MODELS = ("llama", "qwen", "mistral", "llama70b")
METHODOLOGIES = ("maximum_performance", "identical_config")
PLATFORMS = {"h100": "nvidia", "h200": "nvidia", "b200": "nvidia", "mi300x": "amd", "mi325x": "amd",
             "mi355x": "amd"}


def build_env(name: str, log) -> Path:
    """The framework's virtual environment, reused while its install lists are unchanged (a stamp holds them)."""
    env = HOME / "envs" / name
    stamp = env / "tprimat-installs.json"
    installs = ENVS[name][1]
    if stamp.exists() and json.loads(stamp.read_text()) == installs:
        return env
    started = time.monotonic()
    venv.create(env, with_pip=True, clear=True)
    for args in installs:
        proc = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", *args],
                              capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            raise SystemExit(f"rehearse: pip install {' '.join(args)} for {name} failed:\n{proc.stderr[-3000:]}")
    stamp.write_text(json.dumps(installs))
    log(f"{name}: environment built in {time.monotonic() - started:.0f} s ({env.relative_to(ROOT)})")
    return env


def points(name: str, models, platforms) -> list[dict]:
    """Every point's launch, as tprimat writes it (dry_run): the script, the plan's parameter count, or tprimat's
    refusal before launch."""
    from tprimat.compose import compose
    from tprimat.execute.run import execute
    out = []
    for model in models:
        for methodology in METHODOLOGIES:
            for gpu in platforms:
                overrides = [f"platform={PLATFORMS[gpu]}", f"platform.gpu={gpu}", f"model={model}",
                             f"methodology={methodology}", *ENVS[name][0], "dry_run=true",
                             "logging.wandb.mode=disabled"]
                run_dir = Path(tempfile.mkdtemp(prefix=f"rehearse-{name}-"))
                result = execute(compose(overrides), run_dir, overrides).result
                point = {"point": f"{model} {methodology} {gpu}", "status": result["status"],
                         "reason": result.get("error") or result.get("reason")}
                if result["status"] == "dry_run":
                    point.update(script=str(run_dir / "launch" / "nemo_pretrain.py"),
                                 params=result["plan"]["params_total"], out=str(run_dir / "rehearsal.json"))
                out.append(point)
    return out


def same(spec, framework) -> bool:
    if isinstance(spec, float) and isinstance(framework, (int, float)) and not isinstance(framework, bool):
        return math.isclose(spec, framework, rel_tol=1e-9)
    return type(spec) is type(framework) and spec == framework or (spec is None and framework is None)


def rehearse(name: str, models, platforms, log) -> dict:
    env = build_env(name, log)
    todo = points(name, models, platforms)
    runnable = [p for p in todo if "script" in p]
    environment = {**os.environ, "HF_HOME": str(write_cache(HOME / "hf")), "HF_HUB_OFFLINE": "1",
                   "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    started = time.monotonic()
    for p in runnable:  # a process each: the framework reads the world size from the process group once it exists
        p["stderr"] = subprocess.run([str(env / "bin" / "python"), str(RUNNER), f"{p['out']}={p['script']}"],
                                     capture_output=True, text=True, timeout=900, env=environment,
                                     cwd=tempfile.mkdtemp()).stderr
    log(f"{name}: {len(runnable)} point(s) rehearsed in {time.monotonic() - started:.0f} s")
    equal = total = 0
    version = None
    for point in todo:
        if "script" not in point:
            log(f"  {point['point']}: refused before launch ({point['status']}): {point['reason']}")
            continue
        if not Path(point["out"]).exists():
            log(f"  {point['point']}: no record; the framework's output ends:\n{point['stderr'][-2000:]}")
            total += 1
            continue
        record = json.loads(Path(point["out"]).read_text())
        version = record["framework"] or version
        rows = record["settings"]
        differ = [r for r in rows if not same(r["spec"], r["framework"])]
        equal += len(rows) - len(differ)
        total += len(rows) or 1
        params = record["params"]
        count = ("parameters equal" if params == point["params"] else
                 f"parameters {params:,} against the plan's {point['params']:,}" if params else "parameters not built")
        log(f"  {point['point']}: {len(rows) - len(differ)}/{len(rows)} settings equal, {count}"
            + (f"; {record['error']}" if record["error"] else ""))
        for r in differ:
            log(f"    differs: {r['key']} spec {r['spec']!r}, framework {r['framework']!r} ({r['where']})")
    return {"framework": name, "version": version, "equal": equal, "set": total,
            "rehearsed": equal > 0}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", action="append", choices=sorted(ENVS), help="repeatable; all by default")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--platforms", nargs="+", default=None, help="GPUs (default: each framework's)")
    parser.add_argument("--out", type=Path, help="write the summary as JSON here")
    args = parser.parse_args(argv)
    done = []
    for name in args.framework or list(ENVS):
        print(f"== {name}: {ENVS[name][3]}", flush=True)
        platforms = [g for g in (args.platforms or ENVS[name][2]) if g in ENVS[name][2]]
        done.append(rehearse(name, args.models, platforms, lambda line: print(line, flush=True)))
    if args.out:
        args.out.write_text(json.dumps(done, indent=1) + "\n")
    equal, total = sum(d["equal"] for d in done), sum(d["set"] for d in done)
    print(f"frameworks_rehearsed={sum(d['rehearsed'] for d in done)}")
    print(f"rehearsal_settings_equal={equal}/{total}")
    return 0 if equal == total else 1


if __name__ == "__main__":
    raise SystemExit(main())
