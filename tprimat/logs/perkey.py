"""A printed figure of one value per key (``step_time_s_by_rank``), held by ``StepColumns`` as one column per key."""

from __future__ import annotations

MISSING = object()  # in a printed column: the step did not print this name (None: it printed no number)


class PerKey(dict):
    """A printed figure of one value per key (``step_time_s_by_rank``: a step time per rank) as one column per
    key (MISSING where a step lacks that key); a step with none of the keys lacks the figure."""

    __slots__ = ()

    def at(self, index: int):
        """Step ``index``'s value: its keys' values (MISSING when it has none)."""
        value = {key: column[index] for key, column in self.items() if column[index] is not MISSING}
        return value if value else MISSING

    def rows(self, rows: slice) -> list:
        """Each of steps ``rows``'s values (MISSING when it has none)."""
        keys = list(self)
        values = zip(*(self[key][rows] for key in keys))
        return [{key: v for key, v in zip(keys, row) if v is not MISSING} or MISSING for row in values]

    @classmethod
    def of(cls, values: list) -> "PerKey":
        """Each step's value (a dict, or MISSING) as columns."""
        keys = dict.fromkeys(key for value in values if value is not MISSING for key in value)
        return cls({key: [MISSING if value is MISSING else value.get(key, MISSING) for value in values]
                    for key in keys})
