"""Uniform step lines read as columns: the fast path of long logs.

A long run prints the same step line, field for field, hundreds of thousands of times. Read one line at a
time, each line costs a regex match and a dozen Python-level string operations; read as a table (the lines
split at ``|``, zipped into columns, each column checked for its one key and converted with ``map``) the work
runs inside C loops, and Python touches each row once. A block that is not such a table (a field missing on
some line, a value holding ``|``, a line too short) gets ``None`` and is read line by line instead, so the
table is only ever a faster way to the same records.
"""

from __future__ import annotations

import math
from array import array
from itertools import repeat
from typing import Callable, NamedTuple, Optional

import numpy as np

Pair = tuple  # (current, running average): a printed "current/average" value; average None for a plain one


class Table(NamedTuple):
    head: tuple  # each line's text before its first "|"
    keys: list  # the key text of each field, as printed (blanks kept)
    values: list  # per field, each line's value text (the text after "key:")


def table(lines: list[str], min_chars: int) -> Optional[Table]:
    """``lines`` as a table: each with the same fields in the same order, every field ``key: value |``,
    nothing after the last ``|`` but blanks, none shorter than ``min_chars``; else None."""
    if not lines or min(map(len, lines)) < min_chars:
        return None
    bars = lines[0].count("|")
    if bars < 2:
        return None
    # one split of the lines joined by "\n|": each line gives its bars + 1 texts, the last one its tail and "\n"
    texts = "\n|".join(lines).split("|")
    width = bars + 1
    tails = "".join(texts[bars::width])
    # every line has ``bars`` bars exactly when there are that many texts and the n - 1 texts holding a line end
    # (no line holds one) are all tails
    if len(texts) != width * len(lines) or tails.count("\n") != len(lines) - 1 or tails.strip():
        return None
    keys, values = [], []
    for j in range(1, bars):
        column = texts[j::width]
        key, colon, value = column[0].partition(":")
        if not colon:
            return None
        if one_text(column):  # one text on every line (a batch size, a counter)
            values.append([value] * len(column))
        else:
            # every text starts with "key:" exactly when "\nkey:" cuts the column's texts, each after a line end,
            # into one piece per text after an empty first one (no text holds a line end): the pieces are the values
            pieces = ("\n" + "\n".join(column)).split("\n" + key + ":")
            if len(pieces) != len(column) + 1:
                return None
            del pieces[0]
            values.append(pieces)
        keys.append(key)
    return Table(texts[0::width], keys, values)


def numbers(texts: list[str], parse: Callable[[str], Pair], divisor: Optional[float] = None
            ) -> tuple[list, Optional[list], list[str]]:
    """A column of value texts -> (current values, running averages or None when no value has one, the texts
    read other than by ``float``), each value as ``parse`` reads it (divided by ``divisor`` when given: a
    millisecond column in seconds). Plain numbers convert in C-level ``map``s: where texts repeat (at most half of
    them distinct: a step time printed to 0.1 ms), each distinct text once, repeated values sharing one number
    object; a column of one repeated text (batch size, loss scale, counters) is parsed by ``parse`` once."""
    scale = (lambda v: v) if divisor is None else (lambda v: None if v is None else v / divisor)  # noqa: E731
    if one_text(texts):
        current, average = map(scale, parse(texts[0]))
        unread = [] if plain(texts[0]) else texts[:1]
        return Shared.repeated(current, len(texts)), \
            (None if average is None else Shared.repeated(average, len(texts))), unread
    distinct = dict.fromkeys(texts)  # each text once, in C: a step time or a throughput printed to 0.1 repeats
    if len(distinct) * 2 > len(texts) and divisor is None:  # few texts repeat (a loss): each converted as it comes
        try:
            values = list(map(float, texts))
        except ValueError:
            pass
        else:
            if all_finite(values):
                return values, None, []
    try:
        values = list(map(float, distinct))
    except ValueError:
        pairs = list(map(parse, texts))
        averages = [scale(p[1]) for p in pairs]
        return [scale(p[0]) for p in pairs], (averages if any(a is not None for a in averages) else None), texts
    if not all_finite(values):
        values = [v if math.isfinite(v) else None for v in values]
    if divisor is not None:
        values = list(map(scale, values))
    position = dict(zip(distinct, range(len(distinct))))
    return Shared.indexed(values, array("I", map(position.__getitem__, texts))), None, []


def all_finite(values: list[float]) -> bool:
    """Whether every float is finite: their sum is, unless one is not (or the sum overflows: then each is looked
    at), in one C-level pass."""
    return math.isfinite(sum(values)) or all(map(math.isfinite, values))


def integers(texts: tuple[str, ...]) -> list[int]:
    """A column of integer texts as ints (ValueError: one is not an int); one repeated text shares one int."""
    if one_text(texts):
        return Shared.repeated(int(texts[0]), len(texts))
    return list(map(int, texts))


class Shared(list):
    """A column whose repeated values are one object each (``numbers``, ``integers``). Pickled (the trip back
    from a worker process: ``tprimat.logs.blocks``) as its distinct objects and an index per value, it arrives
    sharing them too: pickle writes a number anew at each occurrence, so a 300k-step log's batch-size column
    would arrive as 300k numbers (and the steps of a 100 MB log in 60 MB more)."""

    __slots__ = ("packed",)  # how it pickles, when built knowing its distinct values (``__reduce__``'s value)

    @classmethod
    def repeated(cls, value, count: int) -> "Shared":
        """``value``, ``count`` times."""
        column = cls(repeat(value, count))
        column.packed = repeated, (value, count)
        return column

    @classmethod
    def indexed(cls, distinct: list, indices: array) -> "Shared":
        """``distinct[i]`` for each index ``i``."""
        column = cls(map(distinct.__getitem__, indices))
        column.packed = shared, (distinct, indices)
        return column

    def __reduce__(self):
        packed = getattr(self, "packed", None)
        if packed is not None:
            return packed
        by_id = dict(zip(map(id, self), self))
        position = dict(zip(by_id, range(len(by_id))))
        return shared, (list(by_id.values()), array("I", map(position.__getitem__, map(id, self))))


def shared(distinct: list, indices: array) -> list:
    """A ``Shared`` column back from its distinct objects and an index per value (as a plain list of those very
    objects: numpy's take of an object array, twice the speed of a lookup per value)."""
    objects = np.fromiter(distinct, dtype=object, count=len(distinct))
    return objects[np.frombuffer(indices, dtype=f"u{indices.itemsize}")].tolist() if len(indices) else []


def repeated(value, count: int) -> list:
    """A ``Shared`` column of one value back (as a plain list)."""
    return [value] * count


def one_text(texts) -> bool:
    """Whether every text is the first one (most columns that are not differ at once, in the second)."""
    return len(texts) < 2 or texts[1] == texts[0] and texts.count(texts[0]) == len(texts)


def plain(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
