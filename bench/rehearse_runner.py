"""Run a generated framework script in its framework's own environment for a rehearsal on CPU (bench/rehearse.py):
``python rehearse_runner.py OUT.json=SCRIPT.py ...``.

Megatron-Bridge imports Transformer Engine unconditionally in its PEFT modules (``megatron/bridge/peft/
lora_layers.py``: ``import transformer_engine.pytorch as te``), and Transformer Engine is built for one CUDA and
torch, so it cannot be installed on a CPU machine. This runner gives an import of ``transformer_engine`` from a
``megatron.bridge`` module a placeholder package (attributes are placeholder classes), and every other importer
the real ``ModuleNotFoundError``: megatron-core still finds no Transformer Engine and builds its local layers, as a
GPU image without it does. Nothing of the placeholder runs in a rehearsal (no PEFT)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import runpy
import sys
import types
from pathlib import Path

PLACEHOLDER = "transformer_engine"
ALLOWED = ("megatron.bridge",)


class PlaceholderType(type):
    """A placeholder class whose attributes are placeholder classes (``te.ops.Sequential`` in an annotation)."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return PlaceholderType(name, (), {"__module__": cls.__module__})


class Placeholder(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = PlaceholderType(name, (), {"__module__": self.__name__})  # a class: subclassing it works
        setattr(self, name, value)
        return value


def importer() -> str:
    """The module that runs the import statement: the first frame outside importlib and this file."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not name.startswith(("importlib", "_frozen_importlib")) and name != __name__:
            return name
        frame = frame.f_back
    return ""


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] != PLACEHOLDER or not importer().startswith(ALLOWED):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = Placeholder(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def settle_library_checks(package: str = "megatron.core") -> int:
    """Import first every module of ``package`` that asks whether Transformer Engine is installed, so that each asks
    before a placeholder exists: once one is in ``sys.modules``, Python's import answers from there without asking
    any finder, and megatron-core's ``import transformer_engine`` would succeed (HAVE_TE true, its TE classes None).
    A module that cannot import here is left to fail where the framework imports it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return 0
    root = Path(next(iter(spec.submodule_search_locations)))
    settled = 0
    for path in sorted(root.rglob("*.py")):
        if PLACEHOLDER not in path.read_text(errors="replace"):
            continue
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts)))
        try:
            importlib.import_module(name)
            settled += 1
        except Exception:  # noqa: BLE001, S112 - see the docstring
            continue
    return settled


def main() -> None:
    """Each argument OUT=SCRIPT: SCRIPT runs with TPRIMAT_REHEARSE=OUT, one after another in this process (the
    framework imported once); a script that stops before writing OUT (a refused setting) gets its reason there."""
    settle_library_checks()
    sys.meta_path.append(Finder())  # after the real finders: an installed Transformer Engine is used as it is
    for pair in sys.argv[1:]:
        out, _, script = pair.partition("=")
        os.environ["TPRIMAT_REHEARSE"] = out
        for module in [m for m, v in sys.modules.items() if isinstance(v, Placeholder)]:
            del sys.modules[module]  # each script asks afresh whether Transformer Engine is installed
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as stop:
            if stop.code not in (0, None) and not os.path.exists(out):
                write_error(out, str(stop.code))
        except Exception as exc:  # noqa: BLE001 - the framework's own refusal is the finding
            write_error(out, f"{type(exc).__name__}: {exc}")


def write_error(out: str, error: str) -> None:
    with open(out, "w") as f:
        json.dump({"framework": None, "settings": [], "params": None, "error": error}, f)


if __name__ == "__main__":
    main()
