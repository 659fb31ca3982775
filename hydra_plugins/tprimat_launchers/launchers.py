"""Sweep launchers: every point is validated before anything is launched; invalid points are recorded
(status invalid, the reason) and never launched or submitted; points whose identical spec already finished ok
are skipped (resume); a job that is cancelled, times out or dies is recorded as failed with the reason; the
sweep ends with a summary table printed and saved in the sweep directory.
"""


import atexit
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger("tprimat")


@dataclass
class PointState:
    idx: int
    overrides: List[str]
    run_dir: Path
    status: str = "pending"  # pending | invalid | skipped | launched
    reason: str = ""
    spec_hash: Optional[str] = None
    config: Optional[DictConfig] = None  # the point's sweep config, loaded once: validated, then run


class TprimatSweepMixin(Launcher):
    config: Optional[DictConfig] = None

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    # -- before anything runs ---------------------------------------------------------------------------
    def prepare(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> List[PointState]:
        from tprimat.compose import to_plain
        from tprimat.sweep.launch import prepare_point

        setup_globals()
        # every point composed before any is prepared: one that cannot compose stops the sweep with nothing written
        configs = [self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                   for overrides in job_overrides]
        points = []
        for offset, (overrides, sweep_config) in enumerate(zip(job_overrides, configs)):
            idx = initial_job_idx + offset
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = idx
                sweep_config.hydra.job.num = idx
            run_dir = Path(str(sweep_config.hydra.sweep.dir)) / str(sweep_config.hydra.sweep.subdir)
            point = PointState(idx, list(overrides), run_dir, config=sweep_config)
            point_config = OmegaConf.masked_copy(sweep_config, [k for k in sweep_config if k != "hydra"])
            prepare_point(point, to_plain(point_config))
            points.append(point)
        for p in points:
            if p.status != "pending":
                log.info("#%d %s: %s (%s)", p.idx, " ".join(filter_overrides(p.overrides)), p.status, p.reason)
        return points

    def finish(self, points: List[PointState], returns: List[JobReturn]) -> List[JobReturn]:
        from tprimat.sweep.launch import write_summary

        write_summary(points, Path(str(self.config.hydra.sweep.dir)))
        return returns


class TprimatSweeper(BasicSweeper):
    """Hydra's basic sweeper, whose ``validate_batch_is_legal`` composes every point of a batch before launching
    it; tprimat's launchers compose every point before launching anything too (``prepare``: a composition error
    stops the sweep there, with Hydra's own exception), so under them each point is composed once, not twice. Any
    other launcher keeps Hydra's check."""

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        if not isinstance(self.launcher, TprimatSweepMixin):
            super().validate_batch_is_legal(batch)


class TprimatBasicLauncher(TprimatSweepMixin):
    """Runs the valid points one after another in this process (Hydra's basic launcher, validated first)."""

    def __init__(self, **_: Any) -> None:
        pass

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        points = self.prepare(job_overrides, initial_job_idx)
        returns = []
        for point in (p for p in points if p.status == "pending"):
            point.status = "launched"
            returns.append(run_job(hydra_context=self.hydra_context, task_function=self.task_function,
                                   config=point.config, job_dir_key="hydra.sweep.dir",
                                   job_subdir_key="hydra.sweep.subdir"))
        return self.finish(points, returns)


class TprimatSubmititLauncher(TprimatSweepMixin):
    """Submits the valid points through submitit, one task per rank; collects every job's outcome."""

    executor_kind = "local"

    def __init__(self, **params: Any) -> None:
        self.params = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                       for k, v in params.items()}

    def __call__(self, overrides: List[str], idx: int, singleton_state) -> JobReturn:
        """Runs inside each submitted task (one per rank)."""
        from tprimat.execute.distributed import exit_rank
        from tprimat.sweep.launch import init_task_rank

        Singleton.set_state(singleton_state)
        setup_globals()
        rank = init_task_rank()
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = os.environ.get("SLURM_JOB_ID", str(idx))
            sweep_config.hydra.job.num = idx
            if rank != 0:  # Hydra's output files are written once, by rank 0
                sweep_config.hydra.output_subdir = None
        outcome = run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=sweep_config,
                          job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
        if "WORLD_SIZE" in os.environ:  # this task was one rank: once submitit has saved the outcome, leave
            atexit.register(exit_rank, 0)  # without torch.distributed's teardown (it can abort a finished rank)
        return outcome

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from tprimat.sweep.launch import make_executor

        points = self.prepare(job_overrides, initial_job_idx)
        todo = [p for p in points if p.status == "pending"]
        submitted = []
        for shape, group in shapes(todo, self.params, self.executor_kind).items():  # one array per job shape
            executor = make_executor(self.executor_kind, {**self.params, **dict(shape)})
            state = Singleton.get_state()
            jobs = executor.map_array(self, [p.overrides for p in group], [p.idx for p in group], [state] * len(group))
            for point, job in zip(group, jobs):
                point.status = "launched"
                log.info("#%d submitted as job %s: %s", point.idx, job.job_id, " ".join(filter_overrides(point.overrides)))
            submitted += zip(group, jobs)
        returns = [collect(point, job) for point, job in sorted(submitted, key=lambda pj: pj[0].idx)]
        return self.finish(points, returns)


def shapes(points: List["PointState"], params: dict, kind: str) -> dict:
    """Points grouped by the job each needs: one task per rank, so ``nodes`` (on Slurm; a local executor has one)
    and ``tasks_per_node`` (and ``gpus_per_node`` where GPUs are asked for) are each point's own
    ``platform.nodes`` and ``platform.devices_per_node``: the launcher's keys interpolate them once, from the
    sweep's base config."""
    groups: dict = {}
    for point in points:
        platform = (point.config or {}).get("platform") or {}
        shape = {"nodes": platform.get("nodes", params.get("nodes")) if kind == "slurm" else params.get("nodes"),
                 "tasks_per_node": platform.get("devices_per_node", params.get("tasks_per_node"))}
        if params.get("gpus_per_node") is not None:
            shape["gpus_per_node"] = shape["tasks_per_node"]
        groups.setdefault(tuple(sorted(shape.items())), []).append(point)
    return groups


def collect(point: PointState, job) -> JobReturn:
    """The job's outcome; a job that was cancelled, timed out or died becomes a failed result, and its return the
    failed run's exit code: the sweep sums it up and exits 1 (``tprimat.launch.exit_after_sweep``) rather than Hydra
    re-raising the scheduler's exception as a traceback."""
    from tprimat.execute.rank import EXIT_FAILED
    from tprimat.sweep.jobs import rank0_return, record_job_failure, record_scheduler_end

    try:
        ret = rank0_return(point, job)
        record_scheduler_end(point, job)
        return ret
    except Exception as exc:  # noqa: BLE001 - UncompletedJobError, FailedJobError, ...
        record_job_failure(point, job, exc)
        ret = JobReturn()
        ret.status, ret._return_value, ret.overrides = JobStatus.COMPLETED, EXIT_FAILED, point.overrides
        return ret


class TprimatLocalLauncher(TprimatSubmititLauncher):
    executor_kind = "local"


class TprimatSlurmLauncher(TprimatSubmititLauncher):
    executor_kind = "slurm"


__all__ = ["TprimatBasicLauncher", "TprimatLocalLauncher", "TprimatSlurmLauncher", "JobStatus"]
