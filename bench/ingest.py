"""How fast ``tprimat ingest`` reads a long Megatron log, beside a plain regex pass over the same file.

Generates its own logs from the format's line shapes (srun labels with a running clock; step time, loss,
learning rate, grad norm and throughput varying from step to step as in a real run; constant batch size and
loss scale; noise lines), in two shapes: one rank printing each step (Megatron-LM prints from its last rank)
and two ranks printing copies (srun-labelled output of several ranks). Each is ingested in a child process as
``tprimat ingest`` does (its step blocks read by worker processes on a machine of several cores:
``tprimat.logs.blocks``): the command line checked once (Hydra composes the config; timed apart), then the log
read into a result and its result.json written (timed apart and together; the interpreter's start and imports
are not timed). Printed per shape: the rates, the ratio to a bare regex pass, the
peak memory against the file size (of the child with its workers, sampled in a second run, and of the child
alone) and the time ``tprimat check`` takes to validate the result; last ``ingest_mb_per_s=<x>``, read and write
together, the slowest shape. Target: at least 50 MB/s and peak memory at most twice the file size on a 2-core
machine.

    python bench/ingest.py [--mb 100] [--ranks 1,2]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
LINE = ("{rank}:  [2026-05-23 {clock}] iteration {i:>8}/  999999 | consumed samples: {s:>12} | elapsed time per "
        "iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tf:.1f} | learning rate: {lr:.6E} | "
        "global batch size:  1024 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {gn:.3f} | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |\n")
NOISE = "0:  [WARNING] some framework warning that is not a step, printed now and then by rank 0\n"

CHILD = """
import json, resource, sys, tempfile, time
sys.path.insert(0, {root!r})
from tprimat.compose import compose
from tprimat.ingest.build import Meta, ingest_file
from tprimat.results.result import validate_result, write_result
meta = Meta(compose, ["world_size=8", "training.seq_length=4096"])
tc = time.perf_counter()
assert not meta.problems()  # tprimat ingest checks its command line (Hydra composes it) once, before any file
with tempfile.TemporaryDirectory() as out:
    t0 = time.perf_counter()
    result = ingest_file({path!r}, meta)
    t1 = time.perf_counter()
    write_result(result, out)
    t2 = time.perf_counter()
maxrss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if {sampled!r}:  # the memory run: ingest and write only (the sampler's peak is theirs)
    sys.exit(0)
t3 = time.perf_counter()
problems = validate_result(result)  # what tprimat check and compare do with it
t4 = time.perf_counter()
print(json.dumps({{"check_s": t0 - tc, "read_s": t1 - t0, "write_s": t2 - t1, "validate_s": t4 - t3, "problems": len(problems),
                  "steps": len(result["steps"]), "maxrss_mib": maxrss_mib}}))
"""
BASELINE = """
import resource, sys
import psutil
sys.path.insert(0, {root!r})
from tprimat.compose import compose
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, psutil.Process().memory_full_info().pss / 2**20)
"""
SAMPLE_S = 0.01


def write_log(path: Path, megabytes: float, ranks: int = 2) -> int:
    target, written, i = megabytes * 1e6, 0, 0
    with open(path, "w") as f:
        while written < target:
            i += 1
            # what varies from step to step in a real run varies here too (time, loss, lr, grad norm, throughput)
            clock = f"{18 + i // 3600 % 6:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
            ms, lr = 1000 + (i * 7919 % 997) / 10, 3e-4 * min(1.0, i / 2000) * (0.5 + 0.5 * math.cos(i / 90000))
            values = dict(clock=clock, i=i, s=1024 * i, tf=400.0 + (i * 31 % 97) / 10, lr=lr,
                          loss=2 + 9 * math.exp(-i / 20000) + (i * 13 % 101) / 1000, gn=0.2 + (i * 17 % 1009) / 100)
            chunk = "".join(LINE.format(rank=r, ms=ms + r / 10, **values) for r in range(ranks + 1, 1, -1))
            if i % 50 == 0:
                chunk += NOISE
            f.write(chunk)
            written += len(chunk)
    return i


def regex_pass(path: Path) -> float:
    pattern = re.compile(r"iteration\s+(\d+)/\s*\d+ \|(.*)")
    t0 = time.perf_counter()
    with open(path) as f:
        for line in f:
            pattern.search(line)
    return time.perf_counter() - t0


def child(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def tree_peak_mib(code: str) -> float:
    """Peak memory of a child process with its descendants (the parse's worker processes): the sum of their
    proportional set sizes (a page shared by several counted once in all), sampled every 10 ms."""
    process = psutil.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL)
    peak = 0
    while process.poll() is None:
        try:
            peak = max(peak, sum(p.memory_full_info().pss for p in [process, *process.children(recursive=True)]))
        except psutil.Error:  # a worker that ended between the listing and its reading: the next sample
            pass
        time.sleep(SAMPLE_S)
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, "ingest child")
    return peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=100.0)
    parser.add_argument("--ranks", default="1,2",
                        help="log shapes: how many ranks print each step, comma-separated (Megatron-LM prints from "
                             "its last rank: 1; srun-labelled copies of several ranks: more)")
    args = parser.parse_args()
    rates = [measure(args.mb, int(ranks)) for ranks in args.ranks.split(",")]
    print(f"ingest_mb_per_s={min(rates):.1f}")  # the slowest shape: the target holds for every shape or not at all


def measure(megabytes: float, ranks: int) -> float:
    """One log shape: generated, ingested in a child process, reported; its rate (read and write together)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "megatron.log"
        iterations = write_log(path, megabytes, ranks)
        size_mb = path.stat().st_size / 1e6
        base_rss, base_pss = map(float, child(BASELINE.format(root=str(ROOT))).split())
        run = json.loads(child(CHILD.format(root=str(ROOT), path=str(path), sampled=False)))
        tree_mib = tree_peak_mib(CHILD.format(root=str(ROOT), path=str(path), sampled=True))  # a second run
        bare = regex_pass(path)
    seconds = run["read_s"] + run["write_s"]
    rate = size_mb / seconds
    grown, tree_grown = run["maxrss_mib"] - base_rss, tree_mib - base_pss
    print(f"log: {size_mb:.1f} MB, {iterations:,} iterations printed by {ranks} ranks; {run['steps']:,} step records")
    print(f"  read (parse + result): {run['read_s']:.2f} s ({size_mb / run['read_s']:.1f} MB/s); "
          f"write result.json: {run['write_s']:.2f} s")
    print(f"  schema check of the result (tprimat check, compare): {run['validate_s']:.2f} s, "
          f"{run['problems']} problems")
    print(f"  the command line's check, once per command before any file (Hydra composes the config): "
          f"{run['check_s']:.2f} s; with it, this one file took {run['check_s'] + seconds:.2f} s "
          f"({size_mb / (run['check_s'] + seconds):.1f} MB/s)")
    print(f"  ingest (both, as tprimat ingest does): {seconds:.2f} s ({rate:.1f} MB/s); plain regex pass: "
          f"{bare:.2f} s ({size_mb / bare:.1f} MB/s); ingest / regex time = {seconds / bare:.2f}")
    print(f"  peak memory with the parse's worker processes (their summed proportional set sizes, sampled every "
          f"{SAMPLE_S * 1000:.0f} ms in a second run): {tree_mib:.0f} MiB, {tree_grown:.0f} MiB above an idle process "
          f"({tree_grown * 1.048576 / size_mb:.2f} x the file size); the ingesting process alone (its peak resident "
          f"set): {run['maxrss_mib']:.0f} MiB, {grown:.0f} MiB above ({grown * 1.048576 / size_mb:.2f} x)")
    return rate


if __name__ == "__main__":
    main()
