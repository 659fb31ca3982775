"""How often ``tprimat compare`` calls a speedup significant, by simulation from a real result: groups of repeats
are drawn around the result's measured rate with its own run-to-run noise (the spread of its repeats' rates, log
scale), and with 3% noise (the scenario the old bootstrap failed), for equal true rates (every "significant" is a
false positive) and for a true 10% speedup (power). The verdict is compare's own (``welch_ratio`` then
``significant``).

Without ``--result`` it first runs the README's CPU benchmark with ``benchmark.repeats=3`` to get one. Prints the
false-positive rate at 2, 3, 5 and 10 repeats and the power at 5 per noise level; last line
``verdicts_false_positive_max=<x>``.

    python bench/verdicts.py [--result outputs/runs/.../result.json] [--trials 2000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tprimat.compare import stats  # noqa: E402

REPEATS = (2, 3, 5, 10)


def real_result(path: str | None) -> dict:
    if path:
        return json.loads(Path(path).read_text())
    out = Path(tempfile.mkdtemp(prefix="verdicts_"))
    subprocess.run([sys.executable, str(ROOT / "launch.py"), "benchmark.repeats=3", "training.max_steps=12",
                    "logging.wandb.mode=disabled", f"hydra.run.dir={out}"], cwd=ROOT, check=True, capture_output=True)
    return json.loads((out / "result.json").read_text())


def verdict_rate(rate: float, noise: float, repeats: int, speedup: float, trials: int, rng) -> float:
    hits = 0
    for _ in range(trials):
        a = rate * np.exp(rng.normal(0, noise, repeats))
        b = rate * speedup * np.exp(rng.normal(0, noise, repeats))
        r = stats.welch_ratio(list(a), list(b))
        hits += stats.significant(r.lo, r.hi)
    return hits / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--result", help="a result.json with benchmark.repeats >= 2 (default: run one)")
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    result = real_result(args.result)
    rates = [r["tokens_per_s"] for r in result["summary"]["per_repeat"]]
    if len(rates) < 2:
        sys.exit("--result: needs benchmark.repeats >= 2 (the run-to-run noise comes from its repeats)")
    measured_noise = float(np.std(np.log(rates), ddof=1))
    rate = float(np.exp(np.mean(np.log(rates))))
    print(f"result: {result['spec']['model']['name']} on {result['spec']['platform']['name']}, {len(rates)} repeats, "
          f"{rate:,.0f} tokens/s/device, run-to-run noise {measured_noise:.2%} (sd of log rates)")
    rng = np.random.default_rng(0)
    false_positives = []
    for label, noise in (("measured noise", measured_noise), ("3% noise", 0.03)):
        for n in REPEATS:
            fp = verdict_rate(rate, noise, n, 1.0, args.trials, rng)
            false_positives.append(fp)
            print(f"{label} {noise:.2%}: false-positive rate at {n} repeats a side: {fp:.3f}")
        power = verdict_rate(rate, noise, 5, 1.10, args.trials, rng)
        needed = stats.repeats_needed(0.03, noise)
        print(f"{label} {noise:.2%}: power for a true 10% speedup at 5 repeats a side: {power:.3f}; "
              f"to detect 3%: {needed} repeats a side")
    print(f"verdicts_false_positive_max={max(false_positives):.4f}")


if __name__ == "__main__":
    main()
