"""The rules of parameter-efficient fine-tuning (training.peft, training.lora): what LoRA takes, and which
frameworks and layouts run it. Each line names the key, its value and the rule."""

from __future__ import annotations

from tprimat.spec.frameworks import FRAMEWORKS
from tprimat.spec.schema import LORA_TARGETS, TprimatConf

PEFT = ("none", "lora")
# the native adapters sit beside whole linear layers: a tensor-parallel shard, a pipeline stage's schedule or a
# context-parallel split of them is not built (yet); fp8's converted linears are not adapted
NATIVE_LAYOUT = (("parallelism.tp", "tensor"), ("parallelism.pp", "pipeline"), ("parallelism.cp", "context"))


def check_peft(spec: TprimatConf) -> list[str]:
    tr = spec.training
    if tr.peft not in PEFT:
        return [f"training.peft={tr.peft}: must be one of {', '.join(PEFT)}"]
    if tr.peft == "none":
        return []
    return lora_values(tr.lora) + lora_frameworks(spec)


def lora_values(lora) -> list[str]:
    problems = [f"training.lora.rank={lora.rank}: must be >= 1"] if lora.rank < 1 else []
    if not lora.alpha > 0:
        problems.append(f"training.lora.alpha={lora.alpha}: must be > 0")
    if not 0 <= lora.dropout < 1:
        problems.append(f"training.lora.dropout={lora.dropout}: must be in [0, 1)")
    unknown = [t for t in lora.targets if t not in LORA_TARGETS]
    if unknown or not lora.targets or len(set(lora.targets)) != len(lora.targets):
        problems.append(f"training.lora.targets={list(lora.targets)}: must name each of {', '.join(LORA_TARGETS)} at "
                        "most once, at least one (Megatron-core's names of the linear layers)")
    return problems


def lora_frameworks(spec: TprimatConf) -> list[str]:
    name, info = spec.framework.name, FRAMEWORKS.get(spec.framework.name)
    if info is not None and not info.lora:
        able = ", ".join(n for n, i in FRAMEWORKS.items() if i.lora)
        return [f"training.peft=lora, framework.name={name}: {name} has no LoRA tprimat can reach through its own API; "
                f"LoRA runs under {able}"]
    if name != "native":
        return []
    degrees = {key: getattr(spec.parallelism, key.split(".")[1]) for key, _ in NATIVE_LAYOUT}
    problems = [f"training.peft=lora, {key}={degrees[key]}: the native adapters are not split for {what} parallelism; "
                f"use DDP or FSDP ({key}=1)" for key, what in NATIVE_LAYOUT if degrees[key] > 1]
    if spec.training.precision == "fp8":
        problems.append("training.peft=lora, training.precision=fp8: the native backend's fp8 conversion does not "
                        "adapt LoRA's targets; use bf16")
    return problems
