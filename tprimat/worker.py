"""One rank of a run launched by tprimat.spawn: ``python -m tprimat.worker <launch.json>``."""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path

from tprimat import backends
from tprimat.config.schema import freeze
from tprimat.config.spec import spec_from_dict
from tprimat.detect import detect
from tprimat.distributed import exit_rank, rank_env, run_on_this_rank
from tprimat.plan import make_plan
from tprimat.result import atomic_write_json

log = logging.getLogger("tprimat")


def main(launch_file: str) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    spec = freeze(spec_from_dict(json.loads(Path(launch_file).read_text())["spec"]))
    hw = detect()
    backend = backends.load(spec.framework.name)
    plan = make_plan(spec, hw)
    plan = replace(plan, backend=backend.name, backend_description=backend.describe(spec, plan))
    env = rank_env()

    def show(record):
        log.info("repeat %d step %d/%d | loss %.4f | lr %.3e | grad_norm %.3f | step_time %.3f s",
                 record.repeat, record.step, spec.training.max_steps, record.loss, record.lr, record.grad_norm,
                 record.step_time_s)

    run_dir = Path(os.environ["TPRIMAT_RANK_OUTPUT"]).parent
    ranked = run_on_this_rank(lambda on_step: backend.run(spec, plan, on_step, run_dir), env,
                              "cpu" if spec.platform.name == "cpu" else "cuda", on_step=show)
    if ranked is not None:
        atomic_write_json({"steps": [r.as_dict() for r in ranked.steps], "rank_step_times": ranked.rank_step_times,
                           "rank_losses": ranked.rank_losses, "effective": ranked.effective}, Path(os.environ["TPRIMAT_RANK_OUTPUT"]) / "records.json")
    return 0


if __name__ == "__main__":
    exit_rank(main(sys.argv[1]))
