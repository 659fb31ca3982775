"""What compare needs of a result it did not write: every section it reads present with the right types, every
number a finite float-range value, times positive. A result that is not so is skipped with the first reason
(``problem``), so that one foreign file never costs the report of the others."""

from __future__ import annotations

import math
from typing import Optional

SECTIONS = ("platform", "model", "framework", "training", "methodology")
TEXTS = (("platform", "name"), ("platform", "gpu"), ("model", "name"), ("framework", "name"), ("methodology", "name"),
         ("training", "precision"))  # labels and axes: text or absent
NESTED = (("training", "optimizer"), ("training", "fp8"), ("platform", "tuned"))  # objects inside the sections
STEP_NUMBERS = ("step_time_s", "tokens", "loss", "lr", "grad_norm", "memory_gib", "peak_memory_gib")
LARGEST = 1e300  # beyond this a product or a sum of two overflows a float


def number_problem(name: str, value, positive: bool = False) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{name} is {type(value).__name__} {str(value)[:40]!r}, not a number"
    try:
        as_float = float(value)
    except OverflowError:
        return f"{name} is beyond the float range"
    if not math.isfinite(as_float) or abs(as_float) > LARGEST:
        return f"{name} is {as_float!r}: not a finite number in range"
    if positive and as_float <= 0:
        return f"{name} is {as_float!r}: must be > 0"
    return None


def problem(result: dict) -> Optional[str]:
    """The first reason compare cannot read this result, or None."""
    spec = result.get("spec")
    if not isinstance(spec, dict):
        return "spec is missing or not an object"
    for section in SECTIONS:
        if not isinstance(spec.get(section), dict):
            return f"spec.{section} is missing or not an object"
    for section, key in NESTED:
        if spec[section].get(key) is not None and not isinstance(spec[section][key], dict):
            return f"spec.{section}.{key} is not an object"
    for section, key in TEXTS:
        value = spec[section].get(key)
        if value is not None and not isinstance(value, str):
            return f"spec.{section}.{key} is {type(value).__name__} {str(value)[:40]!r}, not text"
    for name in ("plan", "summary"):
        if result.get(name) is not None and not isinstance(result[name], dict):
            return f"{name} is not an object"
    world = (result.get("plan") or {}).get("world_size")
    if world is not None and (why := number_problem("plan.world_size", world, positive=True)):
        return why
    for key, value in (result.get("summary") or {}).items():
        nested = value.items() if isinstance(value, dict) else [(None, value)]
        for inner, number in nested:  # step_time_s: {median, mean, ...}
            name = f"summary.{key}" + (f".{inner}" if inner else "")
            if isinstance(number, (int, float)) and (why := number_problem(name, number)):
                return why
            if key in ("peak_memory_gib", "avg_memory_gib") and isinstance(number, (int, float)) and number < 0:
                return f"{name} is {number!r}: negative"
    steps = result.get("steps")
    if not isinstance(steps, list):
        return "steps is not a list"
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            return f"steps[{i}] is not an object"
        if why := number_problem(f"steps[{i}].step", step.get("step")):
            return why
        for name in STEP_NUMBERS:
            if why := number_problem(f"steps[{i}].{name}", step.get(name), positive=name == "step_time_s"):
                return why
        for name in ("tokens", "memory_gib", "peak_memory_gib"):
            if step.get(name) is not None and step[name] < 0:
                return f"steps[{i}].{name} is {step[name]!r}: negative"
    return None
