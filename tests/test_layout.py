"""The code's shape: small functions (measured with ast), and the backend contract is the only way in."""

import ast
import statistics

from tests.conftest import ROOT
from tprimat import backends
from tprimat.backends.base import Backend
from tprimat.spec.frameworks import FRAMEWORKS


def function_lengths() -> dict[str, int]:
    lengths = {}
    for path in sorted((ROOT / "tprimat").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lengths[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = node.end_lineno - node.lineno + 1
    return lengths


def test_functions_are_small():
    lengths = function_lengths()
    ordered = sorted(lengths.values())
    p90 = ordered[int(0.9 * len(ordered)) - 1]
    assert statistics.median(ordered) <= 10 and p90 <= 20, (statistics.median(ordered), p90)
    too_long = {name: n for name, n in lengths.items() if n > 45}
    assert not too_long, too_long


def test_every_registered_framework_loads_as_a_backend():
    for name in FRAMEWORKS:
        backend = backends.load(name)
        assert isinstance(backend, Backend) and backend.name == name


def test_no_module_probes_backends_with_hasattr():
    for path in (ROOT / "tprimat").rglob("*.py"):
        text = path.read_text()
        assert "hasattr(backend" not in text and "getattr(backend" not in text, path
