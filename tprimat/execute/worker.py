"""One rank of a run launched by tprimat.execute.spawn (forked from the forkserver, ``run``), or from a shell:
``python -m tprimat.execute.worker <launch.json>`` with the rank's environment set."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from pathlib import Path

from tprimat.execute.distributed import device_type, exit_rank, run_on_this_rank
from tprimat.execute.prepare import prepare
from tprimat.execute.rank import rank_env
from tprimat.logs.tprimat import step_line
from tprimat.measure.devices import detect
from tprimat.results.result import atomic_write_json
from tprimat.results.steplog import StepLog
from tprimat.spec.build import build_spec

log = logging.getLogger("tprimat")


def show(record, max_steps: int) -> None:
    log.info("%s", step_line(record, max_steps))


def main(launch_file: str) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    hw = detect()
    launch = json.loads(Path(launch_file).read_text())
    prepared = prepare(build_spec(launch["spec"], hw), hw, dry_run=False)
    if prepared.all_problems:  # the parent validated the same spec on this host: this is a bug, say so
        raise RuntimeError("rank cannot run the spec its launcher validated: " + "; ".join(prepared.all_problems))
    spec, plan, backend = prepared.spec, prepared.plan, prepared.backend
    output, env = Path(os.environ["TPRIMAT_RANK_OUTPUT"]), rank_env()
    step_log = StepLog(output.parent, launch.get("header") or {}) if env.rank == 0 else None

    def on_step(record) -> None:  # rank 0 only
        step_log.append(record)
        show(record, spec.training.max_steps)

    ranked = run_on_this_rank(lambda on_step: backend.run(spec, plan, on_step, output.parent), env,
                              device_type(spec.platform.name), on_step, spec.benchmark.init_timeout_s,
                              spec.benchmark.collective_timeout_s)
    if ranked is not None:
        atomic_write_json({"steps": [r.as_dict() for r in ranked.steps], "rank_step_times": ranked.rank_step_times,
                           "rank_losses": ranked.rank_losses, "outcome": dataclasses.asdict(ranked.outcome),
                           "hosts": ranked.hosts, "rendezvous": ranked.rendezvous},
                          output / "records.json")
    return 0


def run(launch_file: str) -> None:
    """The rank's work, then the process ends with its exit code (``exit_rank``)."""
    exit_rank(main(launch_file))


if __name__ == "__main__":
    run(sys.argv[1])
