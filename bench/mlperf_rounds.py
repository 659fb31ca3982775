"""Every MLPerf Training round with an LLM benchmark, scored by tprimat and by MLCommons' own ``mlperf-logging``
(``result_summarizer._compute_strong_score_standalone``, the code MLCommons publishes its tables with) on the same
folders: the time to train of each system and benchmark, and its energy score where the folder has MLPerf Power
readings (``power/``).

For each repository given (a checkout of mlcommons/training_results_v<round>, or any folder holding its
``<submitter>/results/<system>/<benchmark>/`` and ``<submitter>/systems/`` folders), ``tprimat ingest`` reads every
``gpt3``, ``llama2_70b_lora``, ``llama31_405b`` and ``llama31_8b`` folder in a child process, as a user runs it, and
the scores are compared system by system: equal when within 0.01 minutes (the published tables' precision) and, for
energy, within 1e-6 relative. A system tprimat leaves unscored because it has fewer runs than the round's rules
require is compared by its olympic mean times its factor (what result_summarizer prints regardless) and counted
under ``withheld``. Where result_summarizer's energy raises (a power file whose measurement starts and stops at one
instant divides by zero), its time is taken without power and tprimat's flag is shown. A folder with no run logs in
the checkout (a snapshot without its largest files) is named and not counted. Prints one line per system that
differs, then per round ``round=<r> systems=<n> scores_equal=<a>/<b> energy_equal=<c>/<d> withheld=<w>
result_summarizer_raised=<e>``, and last ``mlperf_rounds_equal=<a>/<b>`` over every round (times and energies
together).

    python bench/mlperf_rounds.py training_results_v4.0 training_results_v4.1 training_results_v5.0 training_results_v5.1
    python bench/mlperf_rounds.py some/checkout --round 5.0   # a folder whose name states no round
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tprimat.compare.time_to_train import from_results, read_all  # noqa: E402
from tprimat.ingest.mlperf_repo import round_of  # noqa: E402

BENCHMARKS = ("gpt3", "llama2_70b_lora", "llama31_405b", "llama31_8b")
MINUTES = 0.01
ENERGY_REL = 1e-6


def folders_of(repo: Path) -> list[Path]:
    return sorted(f for b in BENCHMARKS for f in repo.glob(f"*/results/*/{b}") if f.is_dir())


def theirs(folder: Path, benchmark: str, round_: str, power: bool):
    """mlperf-logging's (score, energy score, scaling factor) of one folder; its console notices swallowed."""
    from mlperf_logging.result_summarizer import result_summarizer as rs

    logging.getLogger().setLevel(logging.ERROR)  # its compliance checker's warnings about each log
    with contextlib.redirect_stdout(io.StringIO()):
        return rs._compute_strong_score_standalone(benchmark, folder.parent.name, power, str(folder), "training",
                                                   f"{round_}.0")


def close(mine, other, tolerance: float, relative: bool = False) -> bool:
    if mine is None or other is None:
        return mine is None and other is None
    return abs(mine - other) <= (tolerance * abs(other) if relative else tolerance)


def score_round(repo: Path, round_: str, out: Path) -> tuple[int, int, int, int, int, int]:
    folders = folders_of(repo)
    subprocess.run([sys.executable, "-m", "tprimat", "ingest", *map(str, folders), "--out", str(out),
                    "--mlperf-round", round_], check=False, capture_output=True, text=True, cwd=ROOT)
    scores = {(s.submitter, s.system, s.benchmark): s for s in from_results(read_all([str(out)]))}
    equal = compared = energy_equal = energy_compared = withheld = raised = 0
    for folder in folders:
        key = (folder.parent.parent.parent.name, folder.parent.name, folder.name)
        mine = scores.get(key)
        if not list(folder.glob("result_*.txt")):
            print(f"  v{round_} {'/'.join(key)}: no run logs in this checkout (not counted)")
            continue
        try:
            minutes, joules, _ = theirs(folder, folder.name, round_, (folder / "power").is_dir())
        except (ArithmeticError, ValueError, AssertionError, KeyError) as exc:  # its energy; its time again without
            minutes, joules, _ = theirs(folder, folder.name, round_, False)
            print(f"  v{round_} {'/'.join(key)}: result_summarizer's energy raised {type(exc).__name__}: {exc}; "
                  f"tprimat's flags: {[f for f in mine.flags if 'Power' in f] if mine else None}")
            raised += 1
        if mine is None:
            print(f"  v{round_} {'/'.join(key)}: no tprimat score at all; result_summarizer: {minutes}")
            compared += 1
            continue
        ours = mine.minutes
        if ours is None and mine.unscaled_minutes is not None and any("runs of the" in f for f in mine.flags):
            ours, withheld = mine.unscaled_minutes * (mine.scaling_factor or 1.0), withheld + 1
        compared += 1
        if close(ours, minutes, MINUTES):
            equal += 1
        else:
            print(f"  v{round_} {'/'.join(key)}: tprimat {ours} min, result_summarizer {minutes} min; flags {mine.flags}")
        if joules is not None or mine.energy_j is not None:
            energy_compared += 1
            if close(mine.energy_j, joules, ENERGY_REL, relative=True):
                energy_equal += 1
            else:
                print(f"  v{round_} {'/'.join(key)}: tprimat energy {mine.energy_j} J, result_summarizer {joules} J")
    print(f"round={round_} systems={len(folders)} scores_equal={equal}/{compared} "
          f"energy_equal={energy_equal}/{energy_compared} withheld={withheld} result_summarizer_raised={raised}",
          flush=True)
    return equal, compared, energy_equal, energy_compared, withheld, len(folders)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repos", nargs="+", type=Path, help="checkouts of mlcommons/training_results_v<round>")
    parser.add_argument("--round", help="the round of every repository given (else each folder's name states it)")
    args = parser.parse_args()
    total = agreed = 0
    for repo in args.repos:
        round_ = args.round or round_of(repo.resolve())
        if round_ is None:
            parser.error(f"{repo}: its name states no round (training_results_v5.0); pass --round")
        with tempfile.TemporaryDirectory() as out:
            equal, compared, energy_equal, energy_compared, _, _ = score_round(repo, round_, Path(out))
        agreed, total = agreed + equal + energy_equal, total + compared + energy_compared
    print(f"mlperf_rounds_equal={agreed}/{total}")


if __name__ == "__main__":
    main()
