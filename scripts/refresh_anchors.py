"""Refresh tprimat/compare/anchors.json after editing its rows (each row with its source): every row's TFLOP/s in
tprimat's convention (Megatron-LM's, causal-halved attention) recomputed from its tokens/s and the model's FLOPs
per token (conf/model), every published tokens/s - TFLOP/s pair checked against the same model (a pair more than
2% apart keeps a ``consistency`` note), and ``updated`` set to today.

    python scripts/refresh_anchors.py [--check]   # --check: report, write nothing
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tprimat.compare.anchors import ANCHORS_FILE, refreshed  # noqa: E402
from tprimat.compose import compose  # noqa: E402
from tprimat.spec.build import build_spec  # noqa: E402
from tprimat.spec.flops import flops_per_token  # noqa: E402

MODELS: dict = {}


def per_token(model: str, seq: int, convention: str) -> float:
    if model not in MODELS:
        MODELS[model] = build_spec(compose([f"model={model}", "dry_run=true"])).model
    return flops_per_token(MODELS[model], seq, convention)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report the inconsistent pairs, write nothing")
    args = parser.parse_args()
    path = ROOT / "tprimat" / "compare" / ANCHORS_FILE
    doc, problems = refreshed(json.loads(path.read_text()), per_token)
    for line in problems:
        print(f"inconsistent pair (kept as published, noted in the row): {line}")
    if not args.check:
        doc["updated"] = date.today().isoformat()
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {path.relative_to(ROOT)}: {len(doc['rows'])} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
