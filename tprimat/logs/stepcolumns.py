"""Parsed steps held as columns: what a long log becomes when read as tables (``StreamParser.offer_rows``).

A 300k-step log read into one dict per step holds about 1 KB of Python objects per step, more than the log
spends on it; held as columns (one list per step field and per printed name) it holds a pointer per value,
numbers shared where the log repeats them. ``StepColumns`` is a sequence of steps all the same: ``steps[i]``
and iteration build step ``i`` as the parser's own ``Step`` (equal to the step the line-by-line path gives),
while the summary and the result file read whole columns (``column``, ``printed``, ``stored``). A figure printed
per key (``step_time_s_by_rank``) is held as one column per key (``PerKey``), not as a dict per step.
"""

from __future__ import annotations

import operator
from itertools import repeat
from operator import itemgetter
from typing import AbstractSet, Iterable, Optional

from tprimat.logs.perkey import MISSING, PerKey
from tprimat.logs.stream import STEP_FIELDS, Step

OWN = tuple(name for name in STEP_FIELDS if name != "reported")
ITER_BLOCK = 4096  # steps built at a time when iterating


class StepColumns:
    """Steps as columns, appended as whole columns (``extend``) or as parsed steps (``add``)."""

    def __init__(self) -> None:
        self.count = 0
        self.own: dict[str, list] = {name: [] for name in OWN}
        self.reported: dict[str, list] = {}
        self.gaps: set[str] = set()  # printed names whose column holds MISSING somewhere

    # ------------------------------------------------------------------ building
    def extend(self, count: int, own: dict, reported: dict, gaps: Optional[AbstractSet[str]] = None) -> None:
        """``count`` steps given as columns: ``own`` a list per step field (a field not given: the parser's
        default, as ``new_step``), ``reported`` a list per printed name (MISSING where a step lacks it).
        ``gaps``: the printed names whose lists hold MISSING, when known (else each list is searched)."""
        for name in OWN:
            values = own.get(name)
            self.own[name].extend(values if values is not None else [DEFAULTS[name]] * count)
        self._extend_printed(count, reported, gaps)
        self.count += count

    def _extend_printed(self, count: int, reported: dict, gaps: Optional[AbstractSet[str]]) -> None:
        for name, values in reported.items():
            column = self.reported.get(name)
            if isinstance(column, PerKey) and not isinstance(values, PerKey):
                if per_key(values):
                    values = PerKey.of(values)
                else:  # a figure per key on some steps only: each step's value in one column
                    column = self.reported[name] = column.rows(slice(None)) if column else [MISSING] * self.count
            if isinstance(values, PerKey):
                if column is None or isinstance(column, PerKey):
                    self._extend_per_key(name, count, values, None if gaps is None else name in gaps)
                    continue
                values = values.rows(slice(None))
            if column is None:
                column = self.reported[name] = [MISSING] * self.count
                if self.count:
                    self.gaps.add(name)
            column.extend(values)
            if (MISSING in values) if gaps is None else (name in gaps):
                self.gaps.add(name)
        for name in self.reported.keys() - reported.keys():
            column = self.reported[name]
            for each in column.values() if isinstance(column, PerKey) else (column,):
                each.extend([MISSING] * count)
            self.gaps.add(name)

    def _extend_per_key(self, name: str, count: int, values: PerKey, gapped: Optional[bool]) -> None:
        """A figure printed per key, its columns extended by ``values``'s; ``gapped``: whether ``values`` lacks a
        key on some step, when known."""
        column = self.reported.get(name)
        if column is None:
            column = self.reported[name] = PerKey()
            if self.count:
                self.gaps.add(name)
        for key in column.keys() | values.keys():
            mine = column.get(key)
            if mine is None:  # a key new at this step: the steps before lack it
                mine = column[key] = [MISSING] * self.count
                if self.count:
                    self.gaps.add(name)
            given = values.get(key)
            mine.extend(given if given is not None else repeat(MISSING, count))
            if given is None or (MISSING in given if gapped is None else gapped):
                self.gaps.add(name)

    def add(self, parts: Iterable) -> None:
        """What a parser returned, in order: parsed steps (dicts) and ``StepColumns`` chunks."""
        rows: list = []
        for part in parts:
            if isinstance(part, StepColumns):
                self._add_rows(rows)
                rows = []
                self.extend(part.count, part.own, part.reported, part.gaps)
            else:
                rows.append(part)
        self._add_rows(rows)

    def _add_rows(self, rows: list) -> None:
        if not rows:
            return
        own = {name: [row.get(name, DEFAULTS[name]) for row in rows] for name in OWN}
        names = dict.fromkeys(name for row in rows for name in (row.get("reported") or ()))
        reported = {name: [(row.get("reported") or {}).get(name, MISSING) for row in rows] for name in names}
        for name, values in reported.items():  # a figure printed per key: a column per key
            if per_key(values):
                reported[name] = PerKey.of(values)
        self.extend(len(rows), own, reported)

    def sort(self) -> None:
        """Ordered by (repeat, step), stably, as ``sorted`` orders parsed steps."""
        repeats, numbers = self.own["repeat"], self.own["step"]
        if not self.count or repeats.count(repeats[0]) == self.count and all(map(operator.le, numbers, numbers[1:])):
            return  # one repeat, in order: a log's usual case, looked at without a tuple per step
        keys = list(zip(repeats, numbers))
        if all(map(operator.le, keys, keys[1:])):
            return
        order = sorted(range(self.count), key=keys.__getitem__)
        pick = itemgetter(*order) if self.count > 1 else (lambda column: tuple(column))
        for columns in (self.own, self.reported, *(c for c in self.reported.values() if isinstance(c, PerKey))):
            for name, column in columns.items():
                if not isinstance(column, PerKey):
                    columns[name] = list(pick(column))

    # ------------------------------------------------------------------ reading
    def column(self, name: str) -> list:
        """One step field of every step, in order (``reported``: each step's, built)."""
        if name == "reported":
            return [step["reported"] for step in self]
        return self.own[name]

    def printed(self, name: str) -> list:
        """What every step printed for ``name`` (None: not printed)."""
        column = self.reported.get(name)
        if column is None:
            return [None] * self.count
        if isinstance(column, PerKey):
            column = column.rows(slice(None))
        return [None if v is MISSING else v for v in column] if name in self.gaps else column

    def stored(self, name: str):
        """What every step printed for ``name`` as the result file holds it (``tprimat.results.columns``): a list
        (None: not printed), or for a figure printed per key an object of such lists, one per key."""
        column = self.reported.get(name)
        if not isinstance(column, PerKey):
            return self.printed(name)
        if name not in self.gaps:
            return dict(column)
        return {key: [None if v is MISSING else v for v in values] for key, values in column.items()}

    def names(self) -> list[str]:
        return list(self.reported)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> Step:
        if not isinstance(index, int):
            raise TypeError(f"step index must be an int, not {type(index).__name__}")
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError(f"step {index} of {self.count}")
        step = Step(zip(OWN, (self.own[name][index] for name in OWN)))
        printed = ((name, column.at(index) if isinstance(column, PerKey) else column[index])
                   for name, column in self.reported.items())
        step["reported"] = {name: value for name, value in printed if value is not MISSING}
        return step

    def __iter__(self):
        """Every step, built a block of columns at a time (as ``steps[i]`` builds one)."""
        names = list(self.reported)
        for start in range(0, self.count, ITER_BLOCK):
            rows = slice(start, start + ITER_BLOCK)
            steps = map(Step, map(zip, repeat(OWN), zip(*(self.own[name][rows] for name in OWN))))
            columns = (column.rows(rows) if isinstance(column, PerKey) else column[rows]
                       for column in map(self.reported.__getitem__, names))
            printed = zip(*columns) if names else repeat((), len(range(self.count)[rows]))
            for step, values in zip(steps, printed):
                step["reported"] = dict(zip(names, values)) if not self.gaps else \
                    {name: v for name, v in zip(names, values) if v is not MISSING}
                yield step

    def __eq__(self, other) -> bool:
        if isinstance(other, (StepColumns, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"StepColumns({self.count} steps, printed: {', '.join(self.reported) or 'nothing'})"

    @classmethod
    def of(cls, count: int, own: dict, reported: dict, gaps: Optional[AbstractSet[str]] = None) -> "StepColumns":
        chunk = cls()
        chunk.extend(count, own, reported, gaps)
        return chunk


def per_key(values: list) -> bool:
    """Whether each step's value is a figure per key (a dict of one or more keys), where it has one."""
    present = [v for v in values if v is not MISSING]
    return bool(present) and all(type(v) is dict and v for v in present)


DEFAULTS = {"step": None, "step_time_s": None, "tokens": None, "loss": None, "lr": None, "grad_norm": None,
            "memory_gib": None, "peak_memory_gib": None, "repeat": 0, "warmup": False}
