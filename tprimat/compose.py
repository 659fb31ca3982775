"""Entry-point helper: Hydra composition into plain dicts. It owns ``CONFIG_DIR`` and the ConfigStore schema.

Only entry points import this module (``tprimat.launch``, ``tprimat.cli``, the sweep launchers, benchmarks,
tests): below them code reads the plain dict returned here and the frozen spec built from it, never a
DictConfig. Sweep points expand with Hydra's own override parser; interpolations resolve with OmegaConf's.
"""

from __future__ import annotations

import copy
import re
from collections import OrderedDict
from pathlib import Path
from typing import Callable

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from tprimat.spec import recipes
from tprimat.spec.build import SpecError, set_dotted
from tprimat.spec.schema import TprimatConf

CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "conf")
GROUPS = {"platform", "model", "framework", "methodology", "parallelism", "training", "benchmark", "logging",
          "experiment"}
MAX_OVERRIDE_CHARS = 1000


class OverrideError(SpecError):
    """An override refused before composition, in one line that names the key the user typed."""

    def __init__(self, problem: str):
        super().__init__([problem])


def presets() -> list[str]:
    return sorted(p.stem for p in (Path(CONFIG_DIR) / "experiment").glob("*.yaml"))


def unknown_preset(name: str) -> str:
    return f"experiment={name}: no such preset in conf/experiment; known: {', '.join(presets())}"


def check_overrides(overrides: list[str], presets_too: bool = True) -> None:
    """What Hydra would refuse naming no key (its grammar's "mismatched input '{'"), turn into a file name (an
    override of a pasted file) or ignore silently (an unknown ``experiment``, an optional default): refused here,
    one line each, for every entry point (``launch.py``, ``tprimat plan`` / ``project``, sweeps)."""
    for arg in overrides:
        key, eq, value = arg.partition("=")
        if eq and not key.lstrip("+~").strip():
            raise OverrideError(f"{arg[:80]}: an override needs a key before '=' (key=value, e.g. "
                                "training.max_steps=5)")
        if len(arg) > MAX_OVERRIDE_CHARS:
            raise OverrideError(f"{key[:60]}=<{len(value)} characters>: an override must be at most "
                                f"{MAX_OVERRIDE_CHARS} characters")
        if eq and value.count("${") > value.count("}"):
            raise OverrideError(f"{key}={value[:80]}: an interpolation ${{...}} is not closed (a }} is missing); "
                                "quote the value if the text is meant literally")
        if eq and bool_key(key.lstrip("+~")) and value.strip().lower() not in BOOL_WORDS and "${" not in value \
                and "," not in value:
            raise OverrideError(f"{key}={value[:80]}: must be true or false (a number is not read as a switch)")
        if eq and key.lstrip("+") in ("hydra.run.dir", "hydra.sweep.dir") and value.strip() in ("", "''", '""'):
            raise OverrideError(f"{key}='': must name a directory for the run's files (the default is outputs/...)")
        if eq and presets_too and key.lstrip("+") == "experiment":
            for name in value.split(","):
                if name and name not in presets():
                    raise OverrideError(unknown_preset(name))


BOOL_WORDS = ("true", "false", "null")


def bool_key(key: str) -> bool:
    """Whether ``key`` (dotted) is a bool field of the schema (``training.compile``): OmegaConf reads any number as
    a bool there (2 -> true), which no user means."""
    import dataclasses
    import typing

    node: object = TprimatConf
    for part in key.split("."):
        if not dataclasses.is_dataclass(node):
            return False
        hints = typing.get_type_hints(node)
        if part not in hints:
            return False
        node = hints[part]
    return node is bool


def register_configs() -> None:
    """Register the schema (conf/config.yaml names it first in its defaults list) and ``${tprimat.join:list}``,
    which the presets use to sweep over a list key (``frameworks=[nemo,megatron]``); once a process (storing the
    schema converts the whole dataclass tree into a config again, every time)."""
    store = ConfigStore.instance()
    if "tprimat_schema.yaml" not in store.repo:
        store.store(name="tprimat_schema", node=TprimatConf)
    for name, resolver in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)


def sharding_for(tuned_fsdp: bool, framework: str) -> bool:
    """methodology=maximum_performance: the platform's tuned "shard the model state" as FSDP2 where the framework
    shards that way (native, torchtitan); the others get their own sharding instead (``zero_stage_for``)."""
    return bool(tuned_fsdp) and framework in ("native", "torchtitan")


def zero_stage_for(tuned_fsdp: bool, framework: str) -> int:
    """DeepSpeed and the Transformers Trainer (through its DeepSpeed integration) shard with ZeRO-3; Megatron-LM,
    Primus and NeMo with their distributed optimizer (ZeRO-1); Megatron-DeepSpeed with ZeRO-1 (its pipeline engine
    runs stage 0 or 1 only)."""
    if not tuned_fsdp:
        return 0
    return {"deepspeed": 3, "transformers": 3, "megatron": 1, "primus": 1, "nemo": 1,
            "megatron_deepspeed": 1}.get(framework, 0)


# ZeRO-3 (DeepSpeed, and the Trainer through its DeepSpeed integration); Megatron-DeepSpeed's pipeline engine: 0 or 1
SHARD_ALL_ZERO = {"deepspeed": 3, "transformers": 3, "megatron_deepspeed": 1}


GPU_PLATFORMS = ("nvidia", "amd")  # platform=cpu / auto (a development run): no sharding, no recompute


def shard_all_fsdp(framework: str, platform: str) -> bool:
    """methodology=identical_config on a GPU platform: every framework shards the model state as fully as it can;
    FSDP (FSDP2, or Megatron FSDP for Megatron-LM, Primus and NeMo) where it has it, else ZeRO
    (``SHARD_ALL_ZERO``)."""
    return platform in GPU_PLATFORMS and framework not in SHARD_ALL_ZERO


def shard_all_zero(framework: str, platform: str) -> int:
    return SHARD_ALL_ZERO.get(framework, 0) if platform in GPU_PLATFORMS else 0


def identical_recompute(framework: str, platform: str) -> str:
    """identical_config on a GPU platform: selective recompute (the Trainer: full layers); none on a CPU."""
    return recompute_for("selective", framework) if platform in GPU_PLATFORMS else "none"


def recompute_for(tuned: str, framework: str) -> str:
    """The Hugging Face Trainer checkpoints every layer or none: its nearest to layer-selective is full."""
    return "full" if tuned == "selective" and framework == "transformers" else tuned


def tuned_for(key: str, framework: str, model: str, gpu, fallback):
    """methodology=maximum_performance: the framework's published recipe for this model and GPU
    (``tprimat.spec.recipes``), else the platform's tuned value."""
    return recipes.tuned(key, framework, model, gpu, fallback)


def fp8_recipe_for(precision: str, framework: str, model: str, gpu, fallback: str):
    """maximum_performance's fp8 scaling: the recipe's (the scaling its source ran) where the run trains in fp8; the
    schema's default otherwise, so that a precision overridden to bf16 keeps no fp8 recipe."""
    return recipes.tuned("training.fp8.recipe", framework, model, gpu, fallback) if precision == "fp8" else fallback


# experiment=seed_llama_qwen: (methodology, platform) -> (precision, tp), as the original toolkit ran them
SEED_LAYOUTS = {("maximum_performance", "nvidia"): ("fp8", 4), ("maximum_performance", "amd"): ("bf16", 1),
                ("identical_config", "nvidia"): ("bf16", 4), ("identical_config", "amd"): ("bf16", 4)}


def seed_setting(key: str, methodology: str, platform: str):
    precision, tp = SEED_LAYOUTS.get((methodology, platform), ("bf16", 4))
    return {"precision": precision, "tp": tp}[key]


RESOLVERS = {"tprimat.tuned": tuned_for, "tprimat.seed": seed_setting, "tprimat.shard_all_fsdp": shard_all_fsdp,
             "tprimat.shard_all_zero": shard_all_zero, "tprimat.identical_recompute": identical_recompute,
             "tprimat.join": lambda items: ",".join(str(i) for i in items), "tprimat.fsdp": sharding_for,
             "tprimat.zero_stage": zero_stage_for, "tprimat.recompute": recompute_for,
             "tprimat.fp8_recipe": fp8_recipe_for}


def to_plain(cfg: DictConfig, resolve: bool = True) -> dict:
    """The run's config as a plain dict (Hydra's own ``hydra`` node dropped): the only thing passed downstream."""
    plain = OmegaConf.to_container(cfg, resolve=resolve)
    plain.pop("hydra", None)
    return plain


def hydra_compose(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir

    check_overrides(list(overrides))
    register_configs()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=list(overrides))


COMPOSED: OrderedDict[tuple, dict] = OrderedDict()  # overrides -> their resolved config, the most recent last
COMPOSED_KEPT = 256


def compose(overrides: list[str] = ()) -> dict:
    """conf/config.yaml with ``overrides`` applied, resolved, as a plain dict; an interpolation that cannot resolve
    is an ``OverrideError`` naming the override the user typed. Hydra composes the same overrides once a process (a
    copy is returned each time): the config files and tprimat's resolvers do not change while it runs. Overrides that
    interpolate (``${oc.env:...}``: the environment may change) compose every time."""
    key = tuple(overrides)
    if key in COMPOSED:
        COMPOSED.move_to_end(key)
        return copy.deepcopy(COMPOSED[key])
    cfg = hydra_compose(list(overrides))
    try:
        plain = to_plain(cfg)
    except OmegaConfBaseException as exc:
        raise OverrideError(unresolvable(exc, list(overrides))) from None
    if not any("${" in o.replace("\\", "") for o in key):  # a sweep point holds Hydra's escaped form, $\\{...\\}
        COMPOSED[key] = copy.deepcopy(plain)
        if len(COMPOSED) > COMPOSED_KEPT:
            COMPOSED.popitem(last=False)
    return plain


def unresolvable(exc: Exception, overrides: list[str]) -> str:
    """One line: the typed overrides that interpolate (``model.name=${nope.x}``), what OmegaConf could not resolve,
    and the key where it surfaced when that is another one (``hydra.run.dir`` holds ``${model.name}``)."""
    typed = [o.replace("\\", "") for o in overrides  # a sweep point holds Hydra's escaped form, $\\{...\\}
             if "${" in o.partition("=")[2].replace("\\", "")]
    where = getattr(exc, "full_key", None)
    lines = str(exc).strip().splitlines()
    said = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    surfaced = f" (surfacing at {where})" if where and not any(o.partition("=")[0].lstrip("+~") == where
                                                               for o in typed) else ""
    return f"{', '.join(typed) or where or 'the config'}: cannot resolve the interpolation: {said}{surfaced}"


def expand(overrides: list[str]) -> list[list[str]]:
    """Every point of a sweep (cartesian product), in Hydra's BasicSweeper order; a preset's own sweep
    (``hydra.sweeper.params`` of ``experiment=...``) joins the command line's, which wins for a key it names."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    check_overrides(list(overrides))
    parser = OverridesParser.create()
    parsed = parser.parse_overrides(list(overrides))
    typed = {o.key_or_group for o in parsed}
    params = [f"{key}={value}" for key, value in preset_sweep(parsed).items() if key not in typed]
    return [point for batch in BasicSweeper.split_arguments(parsed + parser.parse_overrides(params), None)
            for point in batch]


def preset_sweep(parsed: list) -> dict:
    """The sweep a preset declares (``hydra.sweeper.params``), resolved against the run's config (a preset sweeps
    ``framework: ${tprimat.join:${frameworks}}``); empty without ``experiment=``."""
    if not any(o.key_or_group.lstrip("+") == "experiment" for o in parsed):
        return {}
    from hydra import compose as hydra_compose_with_hydra
    from hydra import initialize_config_dir

    register_configs()
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = hydra_compose_with_hydra("config", overrides=fixed, return_hydra_config=True)
    params = OmegaConf.select(cfg, "hydra.sweeper.params")
    return {} if params is None else {str(k): str(v) for k, v in OmegaConf.to_container(params, resolve=True).items()}


class Composer:
    """Fast composition of many sweep points: Hydra composes once per choice of config groups (cached, unresolved
    and resolved); a point's value overrides are set on a copy of the resolved config, unknown keys refused, and
    only the interpolations that read an overridden key are resolved again, each by OmegaConf over the values it
    reads (``Base``). Hydra-only syntax (+key, ~key) and interpolations given on the command line take the full
    compose path."""

    def __init__(self) -> None:
        self.cache: dict[tuple, Base] = {}
        self.parser = OverridesParser.create()
        self.parsed: dict = {}  # override text -> parsed Override: the ANTLR parse is the slow part

    def _parse(self, overrides: list[str]) -> list:
        missing = [o for o in overrides if o not in self.parsed]
        if missing:
            self.parsed.update(zip(missing, self.parser.parse_overrides(missing)))
        return [self.parsed[o] for o in overrides]

    def compose(self, overrides: list[str]) -> dict:
        parsed = self._parse(overrides)
        if any(o.is_add() or o.is_delete() or o.is_force_add() for o in parsed):
            return compose(overrides)
        groups = tuple(o.input_line for o in parsed if o.key_or_group in GROUPS or o.key_or_group.startswith("hydra"))
        if groups not in self.cache:
            self.cache[groups] = Base(to_plain(hydra_compose(list(groups)), resolve=False))
        base = self.cache[groups]
        values = [(o.key_or_group, o.value()) for o in parsed if o.input_line not in groups]
        if any(isinstance(v, str) and "${" in v for _, v in values):  # an interpolation of the user's own
            data = copy.deepcopy(base.unresolved)
            for key, value in values:
                set_dotted(data, key, value)
            try:
                return OmegaConf.to_container(OmegaConf.create(data), resolve=True)
            except OmegaConfBaseException as exc:
                raise OverrideError(unresolvable(exc, overrides)) from None
        return base.with_values(values)


REFERENCE = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")  # ${a.b.c}: a node an interpolation reads


class Base:
    """One composition (a choice of config groups): unresolved, resolved once by OmegaConf, and its interpolations
    in dependency order with the nodes each reads (directly or through another interpolation)."""

    def __init__(self, unresolved: dict) -> None:
        self.unresolved = unresolved
        self.resolved = OmegaConf.to_container(OmegaConf.create(unresolved), resolve=True)
        texts = dict(interpolations(unresolved))
        direct = {path: set(REFERENCE.findall(text)) for path, text in texts.items()}
        self.reads = {path: closure(path, direct) for path in texts}
        self.order = sorted(texts, key=lambda p: len(self.reads[p] & set(texts)))  # readers after what they read
        self.texts, self.direct = texts, direct

    def with_values(self, values: list) -> dict:
        data = copy.deepcopy(self.resolved)
        changed = [key for key, _ in values]
        for key, value in values:
            set_dotted(data, key, value)
        for path in self.order:
            if path in changed or not any(touches(read, key) for read in self.reads[path] for key in changed):
                continue
            set_dotted(data, path, resolve_one(self.texts[path], self.direct[path], data))
        return data


def interpolations(node, prefix: str = ""):
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from interpolations(value, path + ".")
        elif isinstance(value, str) and "${" in value:
            yield path, value


def closure(path: str, direct: dict) -> set:
    seen, todo = set(), list(direct[path])
    while todo:
        read = todo.pop()
        if read not in seen:
            seen.add(read)
            todo += direct.get(read, ())
    return seen


def touches(read: str, key: str) -> bool:
    """Whether setting ``key`` changes the node ``read`` (the same node, one inside it, or one holding it)."""
    return read == key or read.startswith(key + ".") or key.startswith(read + ".")


IMPURE = ("${now:", "${oc.env:", "${oc.decode:")  # resolvers whose answer is not a function of the nodes read
RESOLVED: dict = {}  # (text, the values it reads) -> OmegaConf's answer: ANTLR's parse costs ~3 ms a text


def resolve_one(text: str, reads: set, data: dict):
    """``text`` resolved by OmegaConf over the current values of the nodes it reads (nothing else is built);
    remembered per text and values read, where the text's resolvers answer from those values alone."""
    key = None
    if not any(impure in text for impure in IMPURE):
        key = (text, repr(sorted((read, get_dotted(data, read)) for read in reads)))
        if key in RESOLVED:
            return copy.deepcopy(RESOLVED[key])
    value = resolve_fresh(text, reads, data)
    if key is not None:
        RESOLVED[key] = copy.deepcopy(value)
    return value


def resolve_fresh(text: str, reads: set, data: dict):
    mini: dict = {}
    for read in reads:
        value = get_dotted(data, read)
        *parents, leaf = read.split(".")
        node = mini
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = copy.deepcopy(value)
    mini["__tprimat_value__"] = text
    return OmegaConf.to_container(OmegaConf.create(mini), resolve=True)["__tprimat_value__"]


def get_dotted(data: dict, key: str):
    node = data
    for part in key.split("."):
        node = node[part]
    return node


ComposeFn = Callable[[list[str]], dict]
