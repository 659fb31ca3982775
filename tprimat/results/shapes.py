"""A result's steps validated by shape: steps that the step schema cannot tell apart are validated once.

The step schema checks each field's JSON type and compares numbers with 0 (``minimum: 0``, ``exclusiveMinimum:
0``); for such a schema two steps with the same keys, in the same order, whose values have the same *kind* (JSON
type; for numbers also int or float, sign, integral or not, finite or not) are both valid or both invalid with
the same errors. So one step of each kind is validated by jsonschema itself, and every step of a kind that has
errors (to report each). A 300k-step ingested log is then checked in a second instead of minutes. Where the
schema uses any other keyword, ``exact_for`` says no and every step is validated.
"""

from __future__ import annotations

import math
from typing import Optional

ANNOTATIONS = {"description", "title", "$comment"}
BOUNDS = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}
STEP_KEYWORDS = {"type", "required", "additionalProperties", "properties"} | ANNOTATIONS
FIELD_KEYWORDS = {"type"} | BOUNDS | ANNOTATIONS
LIST_KEYWORDS = {"type", "items"} | ANNOTATIONS


def resolve(node: dict, defs: dict) -> Optional[dict]:
    """A local ``{"$ref": "#/$defs/name"}`` followed (None: another kind of reference)."""
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if set(node) - {"$ref"} - ANNOTATIONS or not ref.startswith("#/$defs/") or ref[8:] not in defs:
            return None
        node = defs[ref[8:]]
    return node if isinstance(node, dict) else None


def exact_for(list_schema: dict, defs: dict) -> bool:
    """Whether the steps' schema (an array of step objects) checks only what a step's shape determines."""
    step = resolve(list_schema.get("items", {}), defs)
    if set(list_schema) - LIST_KEYWORDS or step is None or set(step) - STEP_KEYWORDS:
        return False
    if step.get("type") != "object" or not isinstance(step.get("additionalProperties", True), bool):
        return False
    for field in step.get("properties", {}).values():
        field = resolve(field, defs)
        if field is None or set(field) - FIELD_KEYWORDS or any(field[k] != 0 for k in BOUNDS & set(field)):
            return False
    return True


def kind(value) -> object:
    """What a type-and-sign schema can tell of a value."""
    cls = type(value)
    if cls is float:
        if math.isnan(value):
            return float, "nan"
        infinite = math.isinf(value)
        return float, (value > 0) - (value < 0), infinite, not infinite and value.is_integer()
    if cls is int:
        return int, (value > 0) - (value < 0)
    if cls in (type(None), bool, str, dict, list):
        return cls
    return object()  # anything else: a kind of its own (validated on its own)


def shape(step) -> object:
    if type(step) is not dict and not isinstance(step, dict):
        return kind(step)
    return tuple((key, kind(value)) for key, value in step.items())


def by_shape(steps: list) -> list[list[int]]:
    """Indices of the steps grouped by shape, each group in order."""
    groups: dict = {}
    for i, step in enumerate(steps):
        groups.setdefault(shape(step), []).append(i)
    return list(groups.values())
