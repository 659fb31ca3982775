"""What follows from stated facts: helper facts resolved into spec keys, the layout's data-parallel degree,
and the plan of an ingested run (world size, tokens per step, FLOPs per token, peak), each null unless every
fact it needs is stated."""

from __future__ import annotations

from typing import Optional

from tprimat.ingest.stated import Stated, get_dotted
from tprimat.logs.tprimat import WHERE as TPRIMAT_SPEC
from tprimat.spec import flops
from tprimat.spec.hardware import lookup
from tprimat.spec.schema import ModelConf

# Which FLOPs convention each framework's own TFLOP/s uses (FACTS.md section 1); the computed figure uses it too.
CONVENTIONS = {"megatron": flops.MEGATRON, "primus": flops.MEGATRON, "nemo": flops.MEGATRON,
               "torchtitan": flops.TORCHTITAN}
CANDIDATES = {"megatron": (flops.MEGATRON, flops.MEGATRON_LEGACY), "primus": (flops.MEGATRON, flops.MEGATRON_LEGACY),
              "nemo": (flops.MEGATRON, flops.MEGATRON_LEGACY), "torchtitan": (flops.TORCHTITAN,)}
MODEL_DIMS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "vocab_size")


def resolve(st: Stated) -> None:
    gqa, heads = st.facts.get("megatron.group_query_attention"), get_dotted(st.spec, "model.num_attention_heads")
    if gqa is True:
        st.set("model.num_kv_heads", st.facts.get("megatron.num_query_groups"), "log: arguments dump (num_query_groups)")
    elif gqa is False:
        st.set("model.num_kv_heads", heads, "log: arguments dump (group_query_attention False: one KV head per head)")
    par = st.spec["parallelism"]
    world = world_size(st)
    degrees = [par.get("tp"), par.get("pp"), par.get("cp")]
    if par.get("dp") is None and world and all(isinstance(d, int) and d > 0 for d in degrees):
        inner = degrees[0] * degrees[1] * degrees[2]
        if world % inner == 0:
            st.set("parallelism.dp", world // inner, "computed: world size / (tp x pp x cp)")
    local, dp = st.facts.get("torchtitan.local_batch_size"), par.get("dp")
    if isinstance(local, int) and isinstance(dp, int):
        st.set("training.global_batch_size", local * dp, "computed: torchtitan local_batch_size x dp")


def world_size(st: Stated) -> Optional[int]:
    if isinstance(st.facts.get("world_size"), int):
        return st.facts["world_size"]
    plat = st.spec["platform"]
    per_node, nodes = plat.get("devices_per_node"), plat.get("nodes")
    if isinstance(per_node, int) and isinstance(nodes, int) and ("platform.devices_per_node" in st.where
                                                                     or "platform" in st.where):
        return per_node * nodes
    return None


def model_conf(st: Stated) -> Optional[ModelConf]:
    """The model, when every dimension the FLOPs formula needs is stated and its MLP is known to be gated."""
    model = st.spec["model"]
    if any(not isinstance(model.get(k), int) for k in MODEL_DIMS):
        return None
    gated = ("model" in st.where or st.facts.get("megatron.swiglu") is True
             or "model.mlp" in st.where  # a stated MLP (a tprimat spec's swiglu or gelu): the formula has both
             or st.where.get("model.family") == TPRIMAT_SPEC)  # a tprimat log from before model.mlp: all SwiGLU
    if not gated:
        st.warnings.append("the log states the model's dimensions but not a gated (SwiGLU) MLP: FLOPs not computed")
        return None
    # unstated architecture keys take the Llama-style defaults the gated check above stands for; a tprimat log
    # states them all (a GPT-2 run's norm, mlp and positions included)
    known = {k: v for k, v in model.items() if k in ModelConf.__dataclass_fields__ and v is not None}
    return ModelConf(**{**known, "qkv_bias": bool(model.get("qkv_bias")), "tie_embeddings": bool(model.get("tie_embeddings"))})


def plan_of(st: Stated, framework: str, description: str) -> dict:
    spec, tr = st.spec, st.spec["training"]
    gbs, seq, world = tr.get("global_batch_size"), tr.get("seq_length"), world_size(st)
    model = model_conf(st)
    convention = CONVENTIONS.get(framework, flops.CANONICAL)
    per_token = flops.flops_per_token(model, seq, convention) if model and isinstance(seq, int) else None
    device = lookup(spec["platform"].get("gpu"))
    peak = device.peak_tflops(tr["precision"]) if device and tr.get("precision") else None
    par = spec["parallelism"]
    return {"world_size": world, "dp": par.get("dp"), "tp": par.get("tp"), "pp": par.get("pp"), "cp": par.get("cp"),
            "grad_accum_steps": None, "tokens_per_step": gbs * seq if gbs and seq else None,
            "flops_per_token": per_token, "flops_convention": convention if per_token else None,
            "memory_estimate_gib": None, "device_memory_gib": device.memory_gib if device else None,
            "peak_tflops": peak, "peak_source": device.source if peak else None,
            "backend": framework, "backend_description": description, "warnings": []}
