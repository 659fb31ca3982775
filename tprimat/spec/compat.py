"""Which optimisation options combine, per parallel strategy: one table, as data, that validation applies and the
README prints.

A rule names two conditions on spec keys (each a key and the values it holds) and the strategies in which the
pair cannot run, with the reason. The source benchmark matrices state three limits: compile with fp8 is not
supported, selective recompute is FSDP-only, and selective recompute does not combine with fp8. They hold for
Transformer Engine's fp8 modules (its amax and scaling state is neither traced by torch.compile nor replayed by
a recomputed forward); tprimat's native backend runs torchao float8 (compile composes with it, and it is
torchtitan's recommended path) and layer-selective recompute under every strategy (the parallel tests recompute
under DDP, TP and PP), so those limits are not imposed there. CUDA graphs (``reduce-overhead``,
``max-autotune``) record fixed memory addresses and no collectives, so they run on one device or under DDP
only: FSDP2 frees and re-gathers parameters every step, and TP and PP communicate inside the captured blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tprimat.spec.keeps import MEGATRON_CORE
from tprimat.spec.schema import TprimatConf

STRATEGIES = ("single", "ddp", "fsdp", "tp", "pp")
TE_RECIPES = ("delayed", "current")
TORCHAO_RECIPES = ("tensorwise", "rowwise")
# Transformer Engine's scaling under the Megatron-core frameworks, by the spec's recipe: ``delayed`` (an amax history),
# or per-tensor current scaling (TE's Float8CurrentScaling) for ``current`` and ``tensorwise``: one scale per tensor
# from its own amax, the math of torchao's tensorwise, and the recipe Megatron-core itself names ``tensorwise``
# (megatron/core/enums.py Fp8Recipe; fp8_utils.py builds Float8CurrentScaling from it). Row-wise scaling has no
# Transformer Engine recipe there (Megatron's others are block-scaled: mxfp8, blockwise).
TE_SCALING = {"delayed": "delayed", "current": "current", "tensorwise": "current"}
MEGATRON_FP8_RECIPE = {"delayed": "delayed", "current": "tensorwise"}  # --fp8-recipe / TransformerConfig.fp8_recipe
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
COMPILE_MODES = ("default", *CUDA_GRAPH_MODES, "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class Rule:
    first: tuple[tuple[str, tuple], ...]  # (key, values it holds) pairs, all of which hold
    second: tuple[tuple[str, tuple], ...]
    strategies: tuple[str, ...]  # where the two cannot run together
    reason: str
    exempt: tuple[str, ...] = ()  # frameworks (framework.name) where the pair runs


TE_FP8 = (("training.precision", ("fp8",)), ("training.fp8.recipe", TE_RECIPES))
RULES = (
    Rule((("training.compile", (True,)),), TE_FP8, STRATEGIES,
         "Transformer Engine's fp8 modules are not traceable by torch.compile (torchao recipes are)"),
    Rule((("training.activation_checkpointing", ("selective",)),), TE_FP8, STRATEGIES,
         "a recomputed forward does not replay Transformer Engine's fp8 scaling state (not so under Megatron-core: "
         "its selective recompute reruns core attention, no fp8 GEMM, and its checkpointed fp8 modules run under "
         "te_checkpoint, megatron/core/transformer/transformer_layer.py)", MEGATRON_CORE),
    Rule((("training.compile", (True,)), ("training.compile_mode", CUDA_GRAPH_MODES)),
         (("parallelism.fsdp", (True,)),), ("fsdp",),
         "CUDA graphs record fixed addresses; FSDP2 frees and re-gathers parameters every step"),
    Rule((("training.compile", (True,)), ("training.compile_mode", CUDA_GRAPH_MODES)),
         (("parallelism.tp", "> 1"),), ("tp",), "CUDA graphs capture no tensor-parallel collectives"),
    Rule((("training.compile", (True,)), ("training.compile_mode", CUDA_GRAPH_MODES)),
         (("parallelism.pp", "> 1"),), ("pp",), "CUDA graphs capture no pipeline sends and receives"),
)


def te_scaling(spec: TprimatConf) -> Optional[str]:
    """The Transformer Engine scaling a Megatron-core launch runs (``delayed`` or ``current``); None without fp8."""
    return TE_SCALING.get(spec.training.fp8.recipe) if spec.training.precision == "fp8" else None


def megatron_fp8_recipe(spec: TprimatConf) -> Optional[str]:
    """That scaling in Megatron-core's own name (``--fp8-recipe``, ``TransformerConfig.fp8_recipe``); None without fp8
    or where Transformer Engine has no such recipe."""
    return MEGATRON_FP8_RECIPE.get(te_scaling(spec))


def get(spec: TprimatConf, key: str):
    node = spec
    for part in key.split("."):
        node = getattr(node, part)
    return node


def holds(spec: TprimatConf, condition: tuple[tuple[str, tuple], ...]) -> bool:
    for key, values in condition:
        value = get(spec, key)
        if values == "> 1":
            if not value > 1:
                return False
        elif value not in values:
            return False
    return True


def strategies(spec: TprimatConf, dp: int) -> set[str]:
    """The strategies a spec's layout uses (``single`` for one device)."""
    par, used = spec.parallelism, set()
    if par.fsdp:
        used.add("fsdp")
    elif dp > 1:
        used.add("ddp")
    if par.tp > 1:
        used.add("tp")
    if par.pp > 1:
        used.add("pp")
    return used or {"single"}


def shown(condition: tuple[tuple[str, tuple], ...], spec: TprimatConf) -> str:
    return ", ".join(f"{key}={str(get(spec, key)).lower() if isinstance(get(spec, key), bool) else get(spec, key)}"
                     for key, _ in condition)


def incompatible(spec: TprimatConf, dp: int) -> list[str]:
    """One line per rule the spec breaks, naming both options, the strategy and the reason."""
    used, problems = strategies(spec, dp), []
    for rule in RULES:
        hit = used & set(rule.strategies)
        if hit and spec.framework.name not in rule.exempt and holds(spec, rule.first) and holds(spec, rule.second):
            where = "every strategy" if set(rule.strategies) == set(STRATEGIES) else "/".join(sorted(hit))
            problems.append(f"{shown(rule.first, spec)} with {shown(rule.second, spec)}: not supported ({where}): "
                            f"{rule.reason}")
    return problems


def table() -> list[tuple[str, str, str, str]]:
    """The rules as README rows: (option, with, strategies, reason)."""
    def text(condition):
        return ", ".join(f"{k}>1" if vals == "> 1" else f"{k}={' or '.join(str(v).lower() for v in vals)}"
                         for k, vals in condition)

    def where(rule):
        used = "all" if set(rule.strategies) == set(STRATEGIES) else ", ".join(rule.strategies)
        return f"{used} (not {', '.join(rule.exempt)})" if rule.exempt else used

    return [(text(r.first), text(r.second), where(r), r.reason) for r in RULES]
