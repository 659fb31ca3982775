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
import operator
from itertools import compress, repeat
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


def by_columns(columns: list[list]) -> Optional[list[list[int]]]:
    """Indices grouped by shape as ``by_shape`` groups the rows these columns make (one column per field, every
    row with every field, in order), from each column's kinds, without building a row; None when a column
    holds an unhashable value (then the rows are grouped one by one)."""
    ids = []
    for column in columns:
        column_ids = kind_ids(column)
        if column_ids is None:
            return None
        ids.append(column_ids)
    shapes = list(zip(*ids))
    distinct = list(dict.fromkeys(shapes))  # in order of first appearance, as ``by_shape``
    if len(distinct) == 1:
        return [list(range(len(shapes)))]
    return [list(compress(range(len(shapes)), map(operator.eq, shapes, repeat(s)))) for s in distinct]


def kind_ids(column: list) -> Optional[list]:
    """One id per value, equal exactly where ``kind`` is equal; None: an unhashable value. Found by C-level
    passes where that is possible: a column of one non-number type (null, bool, text) is of one kind; a column
    of numbers of one type, of one sign and all finite, differs at most in being integral (min, max and
    membership say so); any other column is keyed by what ``kind`` reads of each value."""
    types = set(map(type, column))
    if len(types) == 1 and not types & {int, float}:
        return [0] * len(column)  # null, bool, text, object, array: the type is the kind
    if types == {int} or types == {float}:
        split = signs_and_finite_alike(column, types == {float})
        if split is not None:
            return list(map(float.is_integer, column)) if split else [0] * len(column)
        keyed = list(map(number_code, column))
    else:
        keyed = list(zip(map(type, column), column))  # 1 == 1.0 == True: a value's type keeps them apart
    try:
        example = dict(zip(keyed, column))  # a value of each key
    except TypeError:
        return None
    kinds: dict = {}
    id_of = {key: kinds.setdefault(kind(value), len(kinds)) for key, value in example.items()}
    return list(map(id_of.__getitem__, keyed))


def signs_and_finite_alike(column: list, floats: bool) -> Optional[bool]:
    """For a column of numbers of one type: None when its values differ in sign, finiteness or NaN; else whether
    they differ in being integral (only floats can)."""
    if floats and not all(map(operator.eq, column, column)):  # a NaN
        return None
    low, high = min(column), max(column)
    if (low < 0 < high) or (low <= 0 <= high and low != high and 0 in column):
        return None  # more than one sign
    if not floats:
        return False
    if math.isinf(low) or math.isinf(high):
        return None if low != high else False
    return len(set(map(float.is_integer, column))) > 1


def number_code(value) -> tuple:
    """What ``kind`` reads of a number, cheaply: NaN, sign, infinite, integral."""
    if value != value:
        return (2,)
    return (value > 0) - (value < 0), value in INFINITIES, type(value) is float and value.is_integer()


INFINITIES = (float("inf"), float("-inf"))
