"""Backends: small adapters behind ``tprimat.backends.base.Backend``, one per framework of
``tprimat.spec.frameworks``. Each is imported only when selected, so that heavy or optional frameworks never
slow down or break configuration and planning."""

from __future__ import annotations

import importlib

from tprimat.backends.base import Backend
from tprimat.spec.frameworks import FRAMEWORKS, problem_with


class BackendUnavailable(RuntimeError):
    pass


def load(name: str) -> Backend:
    """The adapter of ``framework.name``; BackendUnavailable names the key and the missing package."""
    problem = problem_with(name)
    if problem:
        raise BackendUnavailable(problem)
    info = FRAMEWORKS[name]
    try:
        module = importlib.import_module(info.module)
    except ImportError as exc:
        hint = f" (pip install 'tprimat[{info.extra}]')" if info.extra else ""
        raise BackendUnavailable(f"framework.name={name}: not installed: {exc}{hint}") from exc
    return module.BACKEND
