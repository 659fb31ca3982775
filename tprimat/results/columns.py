"""A result's steps as columns: how ``result.json`` (schema 2.0) stores them.

One JSON array per step field, one value per step, in step order (null: the step has no such value), and
``count`` steps; what the framework printed (``reported``) one array per printed name, or, for a figure printed
per key (``step_time_s_by_rank``), an object of such arrays, one per key; ``reported`` null when no step has a
``reported`` object (live runs). A 300k-step log is then about 20 arrays that the C encoder writes and reads,
not 300k objects of 20 fields each (the writing of which took longer than parsing the log).

In memory a result's steps are rows (one dict per step, ``tprimat.results.records.FIELD_NAMES``); ``rows_of``
and ``columns_of`` convert, and hold ``rows_of(columns_of(rows)) == rows`` for every result's steps (a printed
name that a step does not print is absent from that step's ``reported``, as before).
"""

from __future__ import annotations

from itertools import chain
from operator import methodcaller

from tprimat.logs.stepcolumns import StepColumns
from tprimat.results.records import FIELD_NAMES

FIELDS = tuple(name for name in FIELD_NAMES if name != "reported")
EMPTY: dict = {}


def columns_of(steps) -> dict:
    """Step rows (or steps already held as columns: ``StepColumns``) -> the columnar JSON form."""
    if isinstance(steps, StepColumns):  # its own columns, as held (a figure per key: its columns per key)
        return _stored(len(steps), steps.column, steps.names() if len(steps) else None, steps.stored)
    printed = list(map(methodcaller("get", "reported"), steps))
    if all(p is None for p in printed):
        return _stored(len(steps), lambda name: list(map(methodcaller("get", name), steps)), None, None)
    printed = [p if p is not None else EMPTY for p in printed]
    names = list(dict.fromkeys(chain.from_iterable(printed)))  # every printed name, in first-printed order
    return _stored(len(steps), lambda name: list(map(methodcaller("get", name), steps)), names,
                   lambda name: list(map(methodcaller("get", name), printed)))


def _stored(count: int, field, names, printed) -> dict:
    out: dict = {"count": count}
    for name in FIELDS:
        out[name] = field(name)
    if names is None:
        out["reported"] = None
        return out
    reported = {}
    for name in names:
        column = printed(name)
        # a figure per key (its values objects or null): one array per key; a number first rules that out at once
        if isinstance(column, dict):  # already so held
            reported[name] = column
        elif column and type(column[0]) in (dict, type(None)) and dict in set(map(type, column)) <= {dict, type(None)}:
            each = [v if v is not None else EMPTY for v in column]
            reported[name] = {key: list(map(methodcaller("get", key), each))
                              for key in dict.fromkeys(chain.from_iterable(each))}
        else:
            reported[name] = column
    out["reported"] = reported
    return out


def problems(columns) -> list[str]:
    """What makes a columnar steps object unreadable as rows (a wrong length, a missing array), one line each."""
    if not isinstance(columns, dict):
        return [f"steps: must be an object of columns (schema 2.0), not {type(columns).__name__}"]
    count = columns.get("count")
    if type(count) is not int or count < 0:
        return [f"steps/count: must be a non-negative integer, not {count!r}"]
    out = []
    for name in FIELDS:
        out += _length(f"steps/{name}", columns.get(name), count)
    reported = columns.get("reported")
    if reported is not None and not isinstance(reported, dict):
        out.append(f"steps/reported: must be an object of columns or null, not {type(reported).__name__}")
    for name, column in (reported or {}).items():
        if isinstance(column, dict):
            for key, values in column.items():
                out += _length(f"steps/reported/{name}/{key}", values, count)
        else:
            out += _length(f"steps/reported/{name}", column, count)
    return out


def _length(where: str, column, count: int) -> list[str]:
    if not isinstance(column, list):
        return [f"{where}: must be an array of one value per step, not {type(column).__name__}"]
    if len(column) != count:
        return [f"{where}: {len(column)} values, but steps/count is {count}"]
    return []


def rows_of(columns: dict) -> list[dict]:
    """The columnar JSON form -> step rows (ValueError naming the column when it is malformed)."""
    found = problems(columns)
    if found:
        raise ValueError("; ".join(found))
    count = columns["count"]
    own = zip(*(columns[name] for name in FIELDS)) if count else iter(())
    rows = [dict(zip(FIELDS, values)) for values in own]
    reported = columns.get("reported")
    if reported is None:
        for row in rows:
            row["reported"] = None
        return rows
    printed: list[dict] = [{} for _ in range(count)]
    for name, column in reported.items():
        if isinstance(column, dict):
            per_key = [{} for _ in range(count)]
            for key, values in column.items():
                _fill(per_key, key, values)
            column = [d or None for d in per_key]
        _fill(printed, name, column)
    for row, p in zip(rows, printed):
        row["reported"] = p
    return rows


def _fill(rows: list[dict], name: str, values: list) -> None:
    for row, value in zip(rows, values):
        if value is not None:
            row[name] = value



def row_at(columns: dict, index: int) -> dict:
    """Step ``index`` of well-formed stored columns, as ``rows_of`` builds it."""
    row = {name: columns[name][index] for name in FIELDS}
    reported = columns.get("reported")
    if reported is None:
        row["reported"] = None
        return row
    printed = {}
    for name, column in reported.items():
        value = {key: v[index] for key, v in column.items() if v[index] is not None} or None \
            if isinstance(column, dict) else column[index]
        if value is not None:
            printed[name] = value
    row["reported"] = printed
    return row
