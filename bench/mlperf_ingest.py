"""How fast tprimat reads a whole MLPerf Training results repository: ``tprimat ingest`` over every ``llama31_8b`` and
``llama2_70b_lora`` run log of a checkout of mlcommons/training_results_v5.1 (about 1,000 logs, 220 MB), then
``tprimat compare --out`` over the results, each in a child process, as a user runs them.

Prints the logs read, each step's wall time and peak memory (the child with its worker processes, sampled every
0.1 s) beside the largest log's size, what compare wrote and how large, the systems scored; last
``mlperf_ingest_s=<x>``, ingest and compare together. Goal: under 60 s on 2 cores, ingest's memory bounded by one
log, not the repository. The repository is not in this project: pass a checkout (or any folder holding its
``<submitter>/results/<system>/<benchmark>/`` and ``<submitter>/systems/`` folders).

    python bench/mlperf_ingest.py --repo training_results_v5.1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ("llama31_8b", "llama2_70b_lora")
MIB = 2**20


def timed(command: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, peak RSS of the child and its children in MiB, the process) of one command."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:  # not pipes: they fill and block
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err, text=True)
        peak, parent = 0, psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                rss = sum(p.memory_info().rss for p in [parent, *parent.children(recursive=True)])
            except psutil.Error:
                rss = 0
            peak = max(peak, rss)
            time.sleep(0.1)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        return wall, peak / MIB, subprocess.CompletedProcess(command, proc.returncode, out.read(), err.read())


def logs_of(repo: Path) -> list[Path]:
    return sorted(p for b in BENCHMARKS for p in repo.glob(f"*/results/*/{b}/result_*.txt"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True, help="a checkout of mlcommons/training_results_v5.1")
    args = parser.parse_args()
    repo = Path(args.repo)
    logs = logs_of(repo)
    if not logs:
        sys.exit(f"--repo {repo}: no {' or '.join(BENCHMARKS)} run logs under <submitter>/results/<system>/")
    largest = max(p.stat().st_size for p in logs) / MIB
    print(f"{len(logs)} run logs, {sum(p.stat().st_size for p in logs) / MIB:.0f} MiB, the largest {largest:.1f} MiB")
    with tempfile.TemporaryDirectory() as tmp:
        results, report = Path(tmp) / "results", Path(tmp) / "report"
        ingest_s, ingest_mib, proc = timed([sys.executable, "-m", "tprimat", "ingest", str(repo), "--out", str(results)])
        written = len(list(results.rglob("result.json")))
        print(f"ingest: {ingest_s:.1f} s, peak {ingest_mib:.0f} MiB ({ingest_mib / largest:.1f}x the largest log), "
              f"{written} results, exit {proc.returncode}")
        compare_s, compare_mib, proc = timed([sys.executable, "-m", "tprimat", "compare", str(results), "--out",
                                              str(report), "--by", "platform.gpu"])
        if proc.returncode != 0:
            sys.exit(f"compare failed: {proc.stderr[-2000:]}")
        sizes = {p.name: p.stat().st_size / MIB for p in report.iterdir() if p.is_file()}
        scored = json.loads((report / "comparison.json").read_text()).get("time_to_train", [])
        print(f"compare: {compare_s:.1f} s, peak {compare_mib:.0f} MiB; wrote "
              + ", ".join(f"{name} {mib:.2f} MiB" for name, mib in sorted(sizes.items()))
              + f", {len(proc.stdout.splitlines())} console lines")
        print(f"systems scored: {sum(s['score_minutes'] is not None for s in scored)} of {len(scored)} "
              f"(system, benchmark) pairs; accelerators mapped: "
              f"{sum(s.get('gpu') not in (None, 'varies') for s in scored)} of {len(scored)}")
    print(f"mlperf_ingest_s={ingest_s + compare_s:.1f}")


if __name__ == "__main__":
    main()
