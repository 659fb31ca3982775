"""The fairness audit: the settings a framework printed (argument / config dumps, per-step lines) against the
spec. A hidden framework default (a 30x learning-rate difference) shows up here as a failed check."""

from __future__ import annotations

import ast
import math
import re
from typing import Optional

from tprimat.logs.clean import clean_lines
from tprimat.spec.compat import megatron_fp8_recipe
from tprimat.spec.keeps import MEGATRON_CORE
from tprimat.spec.schema import TprimatConf

# torchao float8 as torchtitan 0.2.x names it: the converter (components/quantization/float8.py
# register_model_converter(Float8LinearConverter, "quantize.linear.float8"); 0.1's was "float8", unknown from 0.2.0 on)
# and its recipe (config/job_config.py Float8Linear.recipe_name: tensorwise, rowwise, rowwise_with_gw_hp)
FLOAT8_CONVERTER = "quantize.linear.float8"
ARGS_START = re.compile(r"-{6,} arguments -{6,}")
ARGS_END = re.compile(r"-{6,} end of arguments -{6,}")
ARG_LINE = re.compile(r"^(\w+) \.{2,} (.*)$")
CONFIG_DICT = re.compile(r"(?:Running with args|Job config|Config):\s*(\{.*\})\s*$")
EFFECTIVE = re.compile(r"TPRIMAT_EFFECTIVE (\{.*\})")


def requested(spec: TprimatConf) -> dict:
    tr, opt, par = spec.training, spec.training.optimizer, spec.parallelism
    return {"lr": opt.lr, "min_lr": opt.min_lr, "warmup_steps": opt.warmup_steps, "weight_decay": opt.weight_decay,
            "beta1": opt.beta1, "beta2": opt.beta2, "global_batch_size": tr.global_batch_size,
            "micro_batch_size": tr.micro_batch_size, "seq_length": tr.seq_length, "tp": par.tp, "pp": par.pp,
            "cp": par.cp, "precision": tr.precision, "recompute": tr.activation_checkpointing,
            **fp8_recipe(spec)}


def fp8_recipe(spec: TprimatConf) -> dict:
    """The fp8 scaling a launch asked for, in its framework's own name (``fp8_recipe``): Megatron's (Transformer
    Engine's delayed, or tensorwise for current scaling), torchtitan's torchao recipe."""
    if spec.training.precision != "fp8":
        return {}
    if spec.framework.name in MEGATRON_CORE:
        return {"fp8_recipe": megatron_fp8_recipe(spec)} if megatron_fp8_recipe(spec) else {}
    return {"fp8_recipe": spec.training.fp8.recipe} if spec.framework.name == "torchtitan" else {}


def _value(text: str):
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def megatron_arguments(lines: list[str]) -> dict:
    """Megatron-LM's (and Primus's) ``arguments`` dump -> tprimat keys."""
    args, inside = {}, False
    for line in lines:
        if ARGS_START.search(line):
            inside = True
        elif ARGS_END.search(line):
            inside = False
        elif inside and (m := ARG_LINE.match(line.strip())):
            args[m.group(1)] = _value(m.group(2))
    if not args:
        return {}
    precision = "fp8" if args.get("fp8") not in (None, "None", False) else (
        "bf16" if args.get("bf16") is True else "fp32" if args.get("fp16") is not True else "fp16")
    mapping = {"lr": "lr", "min_lr": "min_lr", "warmup_steps": "lr_warmup_iters", "weight_decay": "weight_decay",
               "beta1": "adam_beta1", "beta2": "adam_beta2", "global_batch_size": "global_batch_size",
               "micro_batch_size": "micro_batch_size", "seq_length": "seq_length", "tp": "tensor_model_parallel_size",
               "pp": "pipeline_model_parallel_size", "cp": "context_parallel_size"}
    found = {key: args[name] for key, name in mapping.items() if name in args}
    found["precision"] = precision
    if precision == "fp8" and args.get("fp8_recipe") not in (None, "None"):  # printed as Fp8Recipe.<name> or <name>
        found["fp8_recipe"] = str(args["fp8_recipe"]).rpartition(".")[2]
    if "recompute_granularity" in args:  # None (no recompute), full or selective: the spec's names but none
        found["recompute"] = args["recompute_granularity"] if args["recompute_granularity"] not in (None, "None") \
            else "none"
    return found


def torchtitan_config(lines: list[str]) -> dict:
    """torchtitan's job-config dict as logged at start-up -> tprimat keys."""
    for line in lines:
        match = CONFIG_DICT.search(line)
        if not match:
            continue
        try:
            cfg = ast.literal_eval(match.group(1))
        except (ValueError, SyntaxError):
            continue
        return torchtitan_job_config(cfg)
    return {}


def torchtitan_job_config(cfg: dict) -> dict:
    """torchtitan <= 0.2's JobConfig as a dict (``to_dict``: logged, or saved by ``job.save_config_file``) -> tprimat
    keys. Its optimizer section is flat (lr, beta1, beta2, weight_decay)."""
    get = lambda section, key: (cfg.get(section) or {}).get(key)  # noqa: E731
    lr = get("optimizer", "lr")
    factor = get("lr_scheduler", "min_lr_factor")
    found = {"lr": lr, "weight_decay": get("optimizer", "weight_decay"), "beta1": get("optimizer", "beta1"),
             "beta2": get("optimizer", "beta2"), "warmup_steps": get("lr_scheduler", "warmup_steps"),
             "min_lr": lr * factor if lr is not None and factor is not None else None,
             "global_batch_size": get("training", "global_batch_size"), "seq_length": get("training", "seq_len"),
             "micro_batch_size": get("training", "local_batch_size"),
             "tp": get("parallelism", "tensor_parallel_degree"), "pp": get("parallelism", "pipeline_parallel_degree"),
             "cp": get("parallelism", "context_parallel_degree"),
             "precision": {"bfloat16": "bf16", "float32": "fp32"}.get(get("training", "mixed_precision_param")),
             "recompute": get("activation_checkpoint", "mode")}  # torchtitan's own names: none, full, selective
    if FLOAT8_CONVERTER in (get("model", "converters") or []):  # torchao float8 linears: fp8, and its recipe
        float8 = ((cfg.get("quantize") or {}).get("linear") or {}).get("float8") or {}
        found.update(precision="fp8", fp8_recipe=float8.get("recipe_name") or "tensorwise")
    return {k: v for k, v in found.items() if v is not None}


def torchtitan_saved_config(cfg: dict) -> dict:
    """The config torchtitan >= 0.3 saved (``debug.save_config_file``) -> tprimat keys. The optimizer is the
    catch-all parameter group's (pattern ``.*``), the one every parameter without a more specific group gets."""
    groups = (cfg.get("optimizer") or {}).get("param_groups") or []
    kwargs = next((g.get("optimizer_kwargs") or {} for g in groups if g.get("pattern") == ".*"),
                  (groups[-1].get("optimizer_kwargs") or {}) if groups else {})
    betas = kwargs.get("betas") or [None, None]
    section = lambda name: cfg.get(name) or {}  # noqa: E731
    training, sched, par = section("training"), section("lr_scheduler"), section("parallelism")
    lr, factor = kwargs.get("lr"), sched.get("min_lr_factor")
    found = {"lr": lr, "weight_decay": kwargs.get("weight_decay"), "beta1": betas[0], "beta2": betas[1],
             "warmup_steps": sched.get("warmup_steps"),
             "min_lr": lr * factor if lr is not None and factor is not None else None,
             "global_batch_size": training.get("global_batch_size"), "micro_batch_size": training.get("local_batch_size"),
             "seq_length": training.get("seq_len"), "tp": par.get("tensor_parallel_degree"),
             "pp": par.get("pipeline_parallel_degree"), "cp": par.get("context_parallel_degree"),
             "precision": {"bfloat16": "bf16", "float32": "fp32"}.get(training.get("mixed_precision_param")),
             "recompute": saved_recompute(cfg)}
    return {k: v for k, v in found.items() if v is not None}


def saved_recompute(cfg: dict) -> Optional[str]:
    """torchtitan 0.3's ``activation_checkpoint``: None (none), or the Config of FullAC, SelectiveAC or
    MemoryBudgetAC as its fields (``to_dict`` keeps no class name): SelectiveAC's alone has
    ``force_recompute_mm_shapes_by_fqns``, MemoryBudgetAC's ``memory_budget``, FullAC's neither
    (torchtitan/distributed/activation_checkpoint.py)."""
    if "activation_checkpoint" not in cfg:
        return None
    ac = cfg["activation_checkpoint"]
    if ac is None:
        return "none"
    return "selective" if "force_recompute_mm_shapes_by_fqns" in ac else "memory_budget" if "memory_budget" in ac \
        else "full"


def generated_script(lines: list[str]) -> dict:
    """Values a tprimat-generated script read back from the framework's own config objects."""
    import json

    for line in lines:
        match = EFFECTIVE.search(line)
        if match:
            try:
                return json.loads(match.group(1))
            except ValueError:
                return {}
    return {}


def from_steps(steps: list[dict], spec: TprimatConf) -> dict:
    """What per-step lines prove: the global batch, and the peak learning rate once warm-up is over."""
    found = {}
    batches = {s["reported"].get("global_batch_size") for s in steps if s.get("reported")} - {None}
    if len(batches) == 1:
        found["global_batch_size"] = int(batches.pop())
    lrs = [s["lr"] for s in steps if s.get("lr") is not None]
    if lrs and len(lrs) > spec.training.optimizer.warmup_steps:
        found["lr"] = max(lrs)
    return found


def audit(spec: TprimatConf, log_text: str, steps: list[dict], saved: Optional[dict] = None) -> dict:
    """``saved``: tprimat keys read from a config file the framework wrote itself (it wins over the log)."""
    lines = clean_lines(log_text)
    effective = {**from_steps(steps, spec), **generated_script(lines), **torchtitan_config(lines),
                 **megatron_arguments(lines), **(saved or {})}
    checks = []
    for key, want in requested(spec).items():
        if key not in effective:
            continue
        got = effective[key]
        checks.append({"key": key, "requested": want, "effective": got, "ok": _same(want, got)})
    return {"passed": all(c["ok"] for c in checks) and bool(checks), "checks": checks,
            "unchecked": sorted(set(requested(spec)) - {c["key"] for c in checks})}


def _same(want, got) -> bool:
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        try:
            return math.isclose(float(want), float(got), rel_tol=1e-6, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return str(want) == str(got)


def describe_failures(result: dict) -> list[str]:
    return [f"audit: {c['key']} requested {c['requested']} but the framework ran {c['effective']}"
            for c in result["checks"] if not c["ok"]]
