"""Where a test run's wall time went, from the lines ``TPRIMAT_TESTS_TIMELINE=FILE`` made (tests/conftest.py):
each worker's time in tests, waiting for the lock (behind an exclusive test, or an exclusive test behind the
others) and idle after its last test, and the tests that held the machine alone.

    python -m tests.timeline FILE
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def summary(lines: list[dict]) -> list[str]:
    first, last = min(r["asked"] for r in lines), max(r["ended"] for r in lines)
    out = [f"wall {last - first:.0f} s from the first test's lock to the last test's end"]
    by_worker = defaultdict(list)
    for r in lines:
        by_worker[r["worker"]].append(r)
    for worker, rows in sorted(by_worker.items()):
        ran = sum(r["ended"] - r["started"] for r in rows)
        waited = sum(r["started"] - r["asked"] for r in rows)
        out.append(f"{worker}: {len(rows)} tests, {ran:.0f} s in tests, {waited:.0f} s waiting for the lock, "
                   f"{last - max(r['ended'] for r in rows):.0f} s idle at the end")
    if all("cpu_s" in r for r in lines):
        ran = sum(r["ended"] - r["started"] for r in lines)
        out.append(f"CPU: {sum(r['cpu_s'] for r in lines):.0f} s over {ran:.0f} s in tests; the tests that waited most "
                   "(wall minus CPU, seconds):")
        slack = sorted(lines, key=lambda r: r["ended"] - r["started"] - r["cpu_s"], reverse=True)[:8]
        out += [f"  {r['ended'] - r['started'] - r['cpu_s']:5.1f} of {r['ended'] - r['started']:5.1f}: {r['test']}"
                for r in slack]
    alone = sorted((r for r in lines if r["exclusive"]), key=lambda r: r["started"])
    out.append(f"alone: {sum(r['ended'] - r['started'] for r in alone):.0f} s in {len(alone)} exclusive tests, "
               f"{sum(r['started'] - r['asked'] for r in alone):.0f} s of it asked for and waited on")
    waits = sorted(lines, key=lambda r: r["started"] - r["asked"], reverse=True)[:8]
    out += [f"  waited {r['started'] - r['asked']:5.1f} s: {r['worker']} {r['test']}" for r in waits]
    return out


if __name__ == "__main__":
    print("\n".join(summary([json.loads(line) for line in open(sys.argv[1])])))
