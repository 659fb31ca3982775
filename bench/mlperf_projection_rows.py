"""MLPerf Training's LLM submissions as rows ``bench/projection.py`` projects: each system-benchmark of a rows file
(``bench/mlperf_rows_v51.json``, scored; ``bench/mlperf_rows_v50.json``, held out; both made by
``bench/mlperf_layouts.py`` from the results repositories) expressed as the spec that ran it, or listed as not
expressible with why.

Every submission runs Megatron-core with Transformer Engine (NVIDIA's NeMo, AMD's NeMo on ROCm, partners' reruns of
either): each is expressed as ``framework=nemo``, its layout (TP, PP, CP, VP, micro batch) as its config sets it, its
global batch as its log states it, sequences of 8,192 tokens. ``llama2_70b_lora`` is Llama 2 70B under LoRA (rank
16 on the attention's QKV and output: MLPerf's rules, tprimat's defaults). A GB200 / GB300 system's GPUs share one
NVLink domain per NVL72 rack: expressed as racks of up to 72 (``platform.devices_per_node``). The figure compared is
the logs' throughput (the median over a run's blocks, then over the system's runs). Near-duplicates (one layout on
one GPU at one scale, from several submitters) share a family and count once.
"""

from __future__ import annotations

import json
from pathlib import Path

from projection_rows import row

HERE = Path(__file__).resolve().parent
# the accelerator names the systems' JSONs give, most specific first, and the hardware table's key of each
GPUS = (("GB300", "gb300"), ("GB200", "gb200"), ("B300", "b300"), ("B200", "b200"), ("H200-NVL", "h200_nvl"),
        ("H200 NVL", "h200_nvl"), ("H200", "h200"), ("H100", "h100"), ("MI355X", "mi355x"), ("MI350X", "mi350x"),
        ("MI325X", "mi325x"), ("MI300X", "mi300x"))
# llama2_70b_lora: its NeMo config sets the position table to MAX_SEQLEN (8,192) over the released model's 4,096
MODELS = {"llama31_8b": ["model=llama"],
          "llama2_70b_lora": ["model=llama2_70b", "model.max_position_embeddings=8192", "training.peft=lora"],
          "llama31_405b": ["model=llama405b"]}
PRECISIONS = ("bf16", "fp8")  # those the hardware table has a spec-sheet peak for (no FP4 peak is sourced)
LAYOUT = ("tp", "pp", "cp", "micro_batch_size", "global_batch_size")


def gpu_of(accelerator: str) -> str | None:
    return next((key for name, key in GPUS if name.lower() in accelerator.lower()), None)


def nodes_of(gpu: str, r: dict) -> list[str]:
    gpus = r["nodes"] * r["devices_per_node"]
    if gpu.startswith("gb"):  # one NVLink domain per NVL72 rack: as many GPUs a rack as divide the system evenly
        per_rack = max(n for n in range(4, 73, 4) if gpus % n == 0) if gpus % 4 == 0 else r["devices_per_node"]
        return [f"platform.devices_per_node={per_rack}", f"platform.nodes={gpus // per_rack}"]
    return [f"platform.devices_per_node={r['devices_per_node']}", f"platform.nodes={r['nodes']}"]


def why_not(r: dict) -> str | None:
    """Why a row cannot be expressed (or scored), or None."""
    if r["tokens_per_s_per_device"] is None:
        return "no throughput in its logs"
    if r["benchmark"] not in MODELS:
        return f"benchmark {r['benchmark']} has no model config"
    if gpu_of(r["accelerator"]) is None:
        return f"accelerator {r['accelerator']!r} is not in the hardware table"
    missing = [key for key in (*LAYOUT, "precision") if r.get(key) is None]
    if missing:
        return f"its layout is not known ({', '.join(missing)}: {r['match']})"
    if r["precision"] not in PRECISIONS:
        return f"precision {r['precision']}: the hardware table has no spec-sheet peak for it"
    if r["precision"] == "fp8" and scaling_of(r) is None:
        return f"FP8 recipe {fp8_recipe_of(r)}: block-scaled FP8 is not a precision the spec has"
    if r["cp"] > 1 and r.get("cp_comm_type") not in CP_EXCHANGES:
        return (f"context parallelism's exchange {r['cp_comm_type']}: not one the spec has (a ring, p2p, or "
                "all-to-all, a2a)")
    return None


# context parallelism's exchanges the spec has (parallelism.cp_comm_type); unknown (null): the ring, Megatron's default
CP_EXCHANGES = (None, "p2p", "a2a")


# Transformer Engine's FP8 scaling as the config sets it (the rows' fp8_recipe: FP8_RECIPE, or its implementation
# yaml's default, as bench/mlperf_layouts.py reads it): tensorwise and Float8CurrentScaling are current scaling;
# delayed and DelayedScaling, or nothing named by config or yaml, delayed: the frameworks' own default then (NeMo 2's
# MegatronMixedPrecision fp8_recipe="delayed", Transformer Engine's fp8_autocast DelayedScaling under NeMo 1, AMD's
# train.py fp8="hybrid" with an amax history)
SCALING = {"tensorwise": "current", "Float8CurrentScaling": "current", "delayed": "delayed", "DelayedScaling": "delayed",
           None: "delayed"}


def fp8_recipe_of(r: dict) -> str | None:
    return r.get("fp8_recipe")


def scaling_of(r: dict) -> str | None:
    return SCALING.get(fp8_recipe_of(r))


def scaling_overrides(r: dict) -> list[str]:
    """Transformer Engine's FP8 scaling and, where the config turns it on (FP8_DPA), its FP8 attention; a row whose
    sourced file is absent (``fp8_attention`` null) is projected with BF16 attention, the default."""
    if r["precision"] != "fp8":
        return []
    return [f"training.fp8.recipe={scaling_of(r)}", *(["training.fp8.attention=true"] if r.get("fp8_attention") else [])]


def recompute_overrides(r: dict) -> list[str]:
    """The config's activation recompute: full over every layer (uniform), full over the first N of each stage
    (block), selective, or none (what the config and its yaml leave unset: Megatron-core's default; rows files made
    before the field existed say nothing, and are taken so): stated, so that a methodology's tuned recompute never
    leaks into a row."""
    mode = r.get("recompute")
    if mode is None:
        return ["training.activation_checkpointing=none"]
    block = r.get("recompute_method") == "block" and r.get("recompute_num_layers")
    return [f"training.activation_checkpointing={mode}",
            *([f"training.recompute_num_layers={r['recompute_num_layers']}"] if mode == "full" and block else [])]


def split_overrides(r: dict) -> list[str]:
    """Megatron's uneven pipeline split as the config sets it (the 405B configs: the embedding and the loss counted
    as a layer each); stated either way, as the degrees are."""
    return [f"parallelism.{key}={'true' if r.get(key) else 'false'}"
            for key in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")]


def family(r: dict) -> str:
    gpus = r["nodes"] * r["devices_per_node"]
    return (f"{r['round']} {r['benchmark']} {gpu_of(r['accelerator'])} x{gpus} tp{r['tp']} pp{r['pp']} cp{r['cp']} "
            f"vp{r['vp'] or 1} mbs{r['micro_batch_size']} gbs{r['global_batch_size']} {r['precision']}"
            + "".join(f" {o.split('.')[-1]}" for o in recompute_overrides(r) if not o.endswith("=none"))
            + (" split" if r.get("account_for_embedding_in_pipeline_split") else ""))


def expressed(r: dict) -> dict:
    gpu = gpu_of(r["accelerator"])
    vp = [f"parallelism.vp={r['vp']}"] if (r.get("vp") or 1) > 1 else []
    # context parallelism's exchange as the config sets it (NVIDIA's LoRA: all-to-all); unknown: the default ring
    a2a = ["parallelism.cp_comm_type=a2a"] if r["cp"] > 1 and r.get("cp_comm_type") == "a2a" else []
    layout = [f"parallelism.tp={r['tp']}", f"parallelism.pp={r['pp']}", f"parallelism.cp={r['cp']}", *vp, *a2a,
              *recompute_overrides(r), *split_overrides(r), *scaling_overrides(r)]
    name = f"MLPerf {r['round']} {r['submitter']} {r['system']} {r['benchmark']}"
    made = row(name, gpu, "amd" if gpu.startswith("mi") else "nvidia", r["nodes"] * r["devices_per_node"],
               r["global_batch_size"], r["micro_batch_size"], r["precision"], layout, r["tokens_per_s_per_device"],
               r["config"] or r["match"], model=MODELS[r["benchmark"]], framework="nemo", family=family(r),
               placement=nodes_of(gpu, r))  # the system's nodes (or NVL72 racks)
    return {**made, "vendor": "amd" if gpu.startswith("mi") else "nvidia", "fp8_attention": r.get("fp8_attention"),
            "cp_comm_type": r.get("cp_comm_type")}


def load(name: str) -> tuple[list[dict], list[tuple[str, str]]]:
    """(rows expressed, (name, why) of those not) of ``bench/<name>``."""
    rows, not_expressed = [], []
    for r in json.loads((HERE / name).read_text()):
        reason = why_not(r)
        if reason:
            not_expressed.append((f"MLPerf {r['round']} {r['submitter']} {r['system']} {r['benchmark']}", reason))
        else:
            rows.append(expressed(r))
    return rows, not_expressed
