"""The spec of an ingested run holds only what is stated: by the log (``tprimat.logs.facts``), by a system
description file (``--system``, MLPerf's systems JSON), or by the user (``key=value`` / ``group=option``
overrides). Every other key is null, the model name included. ``stated`` records where each value came from.

Only tprimat's analysis settings (``benchmark``: warm-up steps excluded from statistics) come from the
config's defaults: they describe how tprimat reads the run, not the run.
"""

from __future__ import annotations

import copy
from typing import Callable, Optional

from tprimat.spec.hardware import device_key_from_name

ANALYSIS = ("benchmark", "logging")  # tprimat's own settings, kept from the composed defaults
HELPERS = ("megatron.", "torchtitan.", "mlperf.")  # facts that resolve into spec keys, never spec keys themselves


def nulls(node):
    if isinstance(node, dict):
        return {k: nulls(v) for k, v in node.items()}
    return None


def skeleton(defaults: dict) -> dict:
    spec = nulls(defaults)
    for section in ANALYSIS:
        spec[section] = copy.deepcopy(defaults[section])
    spec["dry_run"], spec["run_name"], spec["resume_from"] = False, None, None
    return spec


def get_dotted(data: dict, key: str):
    node = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def put(spec: dict, key: str, value) -> bool:
    *parents, leaf = key.split(".")
    node = spec
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or leaf not in node:
        return False
    node[leaf] = value
    return True


class Stated:
    """A spec under construction: values with where each came from."""

    def __init__(self, defaults: dict, compose: Callable[[list[str]], dict]) -> None:
        self.spec, self.compose = skeleton(defaults), compose
        self.where: dict[str, str] = {}
        self.facts: dict[str, object] = {}  # helper facts and world_size (not spec keys)
        self.warnings: list[str] = []

    def set(self, key: str, value, where: str, overwrite: bool = False) -> None:
        if value is None or key.startswith(HELPERS) or key == "world_size":
            if value is not None and (overwrite or key not in self.facts):
                self.facts[key], self.where[key] = value, where
            return
        current = get_dotted(self.spec, key)
        if current is not None and not overwrite:
            return
        if current is not None and current != value and not isinstance(current, dict):
            self.warnings.append(f"{key}: the log states {current!r} ({self.where.get(key)}); {where} says {value!r}, used")
        if put(self.spec, key, value):
            self.where[key] = where

    def group(self, group: str, option: str, where: str) -> None:
        """A whole config group (``model=llama``): every key of that option, as its config file states it."""
        composed = self.compose([f"{group}={option}"])
        self.spec[group] = copy.deepcopy(composed[group])
        self.where[group] = f"{where} ({group}={option})"

    def log_facts(self, facts: dict) -> None:
        for key, (value, where) in facts.items():
            if key == "model":
                self.group("model", value, where)
            else:
                self.set(key, value, where)

    def overrides(self, overrides: list[str]) -> None:
        """User overrides win over the log (with a warning where they disagree)."""
        world = [o for o in overrides if o.startswith("world_size=")]
        overrides = [o for o in overrides if o not in world]
        for override in world:  # not a config key: the run's total device count (``--devices``)
            self.set("world_size", as_int(override.partition("=")[2]), "user (--devices)", overwrite=True)
        if not overrides:
            return
        composed = self.compose(list(overrides))
        for override in overrides:
            key = override.partition("=")[0].lstrip("+~")
            if "." not in key:
                self.group(key, override.partition("=")[2], "user")
            else:
                self.set(key, get_dotted(composed, key), "user", overwrite=True)

    def system(self, system: Optional[dict]) -> None:
        """An MLPerf-style system description: number_of_nodes, accelerators_per_node, accelerator_model_name."""
        if not system:
            return
        where = "system description"
        nodes, per_node = system.get("number_of_nodes"), system.get("accelerators_per_node")
        nodes, per_node = as_int(nodes), as_int(per_node)
        self.set("platform.nodes", nodes, f"{where}: number_of_nodes", overwrite=True)
        self.set("platform.devices_per_node", per_node, f"{where}: accelerators_per_node", overwrite=True)
        if nodes and per_node:
            self.set("world_size", nodes * per_node, f"{where}: number_of_nodes x accelerators_per_node", overwrite=True)
        name = str(system.get("accelerator_model_name") or "")
        key = device_key_from_name(name) if name else None
        if key:
            self.set("platform.gpu", key, f"{where}: accelerator_model_name {name!r}", overwrite=True)
        vendor = "amd" if "amd" in name.lower() or "instinct" in name.lower() else "nvidia" if "nvidia" in name.lower() else None
        self.set("platform.name", vendor, f"{where}: accelerator_model_name {name!r}", overwrite=True)


def as_int(value) -> Optional[int]:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None
