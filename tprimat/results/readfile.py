"""Reading a result file as strictly as ``tprimat check`` judges it, for every reader (check, compare, gate): a
regular file only (a named pipe called result.json would block the reader forever), standard JSON only (``NaN`` and
``Infinity`` are Python's extensions, not JSON), each key once (with a duplicated ``"status"`` the last one wins in
Python's reader, and a failed run could pass as ok), and a nesting Python's parser can hold (deeper raises
RecursionError)."""

from __future__ import annotations

import json
import stat
from pathlib import Path


class UnreadableFile(ValueError):
    """Why a file cannot be read as a result: one line."""


def _once(pairs: list[tuple]) -> dict:
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise UnreadableFile(f"the key {key!r} appears twice in one object (a reader would keep either)")
        seen[key] = value
    return seen


def _not_json(constant: str):
    raise UnreadableFile(f"{constant} is not a JSON value (a non-standard literal)")


def read_json(path: Path):
    """The file's JSON value, or UnreadableFile naming why not."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise UnreadableFile(f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise UnreadableFile("not a regular file (a named pipe, device or socket is never read)")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UnreadableFile(f"cannot read: {exc}") from None
    try:
        return json.loads(text, object_pairs_hook=_once, parse_constant=_not_json)
    except RecursionError:
        raise UnreadableFile("not JSON a reader can hold: nested too deeply") from None
    except UnreadableFile:
        raise
    except ValueError as exc:
        raise UnreadableFile(f"not JSON: {exc}") from None
