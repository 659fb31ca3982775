"""One benchmark, end to end: plain config -> spec -> prepare -> backend -> step records -> summary -> sinks.

Every outcome writes result.json: ``invalid`` (exit 2) for a spec that breaks a rule, ``dry_run`` for a plan,
``failed`` (exit 1) for a run that broke after validation, ``ok`` (exit 0) for a measured run.
"""

from __future__ import annotations

import logging
import math
import os
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tprimat.backends.base import RunOutcome
from tprimat.execute.distributed import device_type, rank_summary, run_on_this_rank
from tprimat.execute.prepare import Prepared, prepare
from tprimat.execute.project import projection_of
from tprimat.execute.rank import EXIT_FAILED, EXIT_INVALID, EXIT_OK, RankEnv, rank_env
from tprimat.execute.signals import Interrupted, signals_raise
from tprimat.execute.spawn import spawn_local
from tprimat.logs.tprimat import spec_line, step_line
from tprimat.measure import environment
from tprimat.measure.contention import Contention
from tprimat.measure.devices import detect
from tprimat.measure.telemetry import Sampler, open_source
from tprimat.results.metrics import summarize
from tprimat.results.records import StepRecord
from tprimat.results.result import make_result, new_run_id, scheduler_reason, with_scheduler_reason, write_result
from tprimat.results.steplog import StepLog, read_steps, records_of
from tprimat.spec.build import SpecError, build_spec, spec_identity, spec_to_dict
from tprimat.spec.schema import TprimatConf
from tprimat.spec.secrets import redact

log = logging.getLogger("tprimat")


@dataclass(frozen=True)
class Outcome:
    status: str
    exit_code: int
    result_path: Optional[Path]
    result: dict


def execute(config: dict, run_dir: Path, overrides: Optional[list] = None) -> Outcome:
    """Run (or dry-run) the benchmark that ``config`` (a composed, plain config) describes."""
    hw = detect()
    common = {"run_id": new_run_id(), "environment": environment.collect(hw),
              "overrides": redact(list(overrides or []))}
    config = redact(config)  # a credential an interpolation resolved never reaches the spec or the result
    try:
        spec = build_spec(config, hw)
    except SpecError as exc:
        return _invalid(exc.problems, run_dir, common, config)
    except Exception as exc:  # noqa: BLE001 - whatever else breaks the spec is bad input too: one line, exit 2
        return _invalid([f"cannot build the run spec: {type(exc).__name__}: {exc}"], run_dir, common, None)
    prepared = prepare(spec, hw, dry_run=spec.dry_run, suggest=True)
    spec_dict = spec_to_dict(spec)
    if prepared.problems:
        return _invalid(prepared.problems, run_dir, common, spec_dict)
    backend = prepared.backend
    common.update(spec=spec_dict, spec_hash=spec_identity(spec_dict))
    framework = {"name": backend.name, "version": backend.version()}
    plan_dict = {**prepared.plan.as_dict(), "backend_problems": prepared.backend_problems,
                 **_generated(_config_of(backend, spec, prepared))}
    for warning in prepared.plan.warnings:
        log.warning(warning)
    if prepared.backend_problems:  # the spec's own rules: a dry run refuses what a launch refuses
        return _invalid(prepared.backend_problems, run_dir, common, spec_dict, plan_dict, framework)
    if spec.dry_run and spec.platform.name == "cpu":  # planned for this machine: refused as its launch would be
        env = rank_env() if prepared.plan.world_size > 1 and not backend.launches_own_ranks else None
        if problems := _rank_problems(prepared, env):
            return _invalid(problems, run_dir, common, spec_dict, plan_dict, framework)
    if spec.dry_run:
        return _dry_run(prepared, plan_dict, framework, run_dir, common)
    missing = backend.check_install(spec, prepared.plan)  # this machine's installation: at launch only
    if missing:
        return _invalid(missing, run_dir, common, spec_dict, plan_dict, framework)
    return _train(prepared, plan_dict, framework, run_dir, common)


def refuse_config(problem: str, run_dir: Path, overrides: Optional[list] = None) -> Outcome:
    """A config that cannot even be resolved (an interpolation of a missing key or variable, a value of the
    wrong type): an ``invalid`` result with that one line, exit 2."""
    common = {"run_id": new_run_id(), "environment": environment.collect(detect()),
              "overrides": redact(list(overrides or []))}
    return _invalid([problem], run_dir, common, None)


def _config_of(backend, spec: TprimatConf, prepared: Prepared) -> Optional[dict]:
    """The backend's generated launch; for a spec the backend refused, only where it can be written at all
    (torchtitan has no config to name for Qwen 2.5: its refusal is the answer, not a KeyError)."""
    try:
        return backend.generated_config(spec, prepared.plan)
    except Exception:
        if prepared.backend_problems:
            return None
        raise


def _generated(config: Optional[dict]) -> dict:
    return {} if config is None else {"backend_config": config}


def _dry_run(prepared: Prepared, plan_dict: dict, framework: dict, run_dir: Path, common: dict) -> Outcome:
    log.info("plan: %s", prepared.plan.backend_description)
    if prepared.spec.dry_run == "deep":
        error = _deep(prepared, plan_dict)
        if error:
            return _invalid([error], run_dir, common, common["spec"], plan_dict, framework)
    written = prepared.backend.materialize(prepared.spec, prepared.plan, run_dir)
    if written is not None:  # external frameworks: the exact command and files, not run
        plan_dict["backend_config"] = written
        log.info("would run: %s", " ".join(written["argv"]))
    result = make_result(status="dry_run", plan=plan_dict, framework=framework,
                         warnings=list(prepared.plan.warnings),
                         projection=projection_of(prepared.spec, prepared.plan), **common)
    return _finish(result, run_dir, EXIT_OK)


def _deep(prepared: Prepared, plan_dict: dict) -> Optional[str]:
    """``dry_run=deep``: the native layout built full size in a fake world; its measured memory goes into the
    plan beside the estimate. Returns the layout's failure (the framework's reason), else None."""
    spec, plan = prepared.spec, prepared.plan
    if spec.framework.name != "native":
        plan_dict.update(memory_measured_gib=None, memory_measured={
            "note": f"framework={spec.framework.name}: the deep check builds the native backend's layout only"})
        return None
    from tprimat.backends.native.deep import deep_check, measured_memory

    log.info("deep check: building %d pipeline stage(s) of the layout over a fake world of %d ranks",
             plan.pp, plan.world_size)
    roles, error = deep_check(spec_to_dict(spec), plan.pp, plan.dp, plan.tp)
    if error:
        return f"dry_run=deep: {error}"
    from tprimat.spec.memory import in_flight_micro_batches

    in_flight = in_flight_micro_batches(spec, plan.grad_accum_steps)
    plan_dict.update(measured_memory(roles, plan.memory.overhead_gib, in_flight))
    measured, note = plan_dict["memory_measured_gib"], plan_dict["memory_measured"]["activations_note"]
    one = plan_dict["memory_measured_one_micro_batch_gib"]
    log.info("memory per device: estimated %.2f GiB, traced %s (one micro batch traced%s)", plan.memory.total_gib,
             f"{measured:.2f} GiB" if measured is not None else f"n/a ({note})",
             f": {one:.2f} GiB, x{in_flight:g} micro batches in flight" if one is not None and in_flight != 1 else "")
    return None


def _rank_problems(prepared: Prepared, env: Optional[RankEnv]) -> list[str]:
    """Rank start-up rules that depend on how this process was launched."""
    spec, plan = prepared.spec, prepared.plan
    if plan.world_size == 1 or prepared.backend.launches_own_ranks:
        return []
    if env is None and spec.platform.nodes > 1:
        return [f"platform.nodes={spec.platform.nodes}: start one process per rank with torchrun or Slurm "
                "(srun); tprimat launches the ranks of one node itself"]
    if env is not None and env.world_size != plan.world_size:
        return [f"platform.devices_per_node * platform.nodes = {plan.world_size}, but {env.source} started "
                f"{env.world_size} ranks: they must match"]
    return []


@dataclass
class Measured:
    """What training on this process produced (rank 0's view when ranks ran)."""

    records: list[StepRecord] = field(default_factory=list)
    outcome: RunOutcome = field(default_factory=lambda: RunOutcome(effective={}))
    ranks: Optional[dict] = None
    error: Optional[str] = None


class StepObserver:
    """Called for every measured step on the writing rank: telemetry marks, W&B, the console line."""

    def __init__(self, spec: TprimatConf, sampler, sink, step_log: Optional[StepLog] = None,
                 contention: Optional[Contention] = None) -> None:
        self.spec, self.sampler, self.sink, self.step_log = spec, sampler, sink, step_log
        self.contention = contention

    def __call__(self, record: StepRecord) -> None:
        if self.step_log:
            self.step_log.append(record)
        if self.sampler:
            self.sampler.mark(measured=not record.warmup)
        if self.contention:
            self.contention.mark(measured=not record.warmup)
        if self.sink:
            self.sink.on_step(record)
        _log_step(self.spec, record)


def _train(prepared: Prepared, plan_dict: dict, framework: dict, run_dir: Path, common: dict) -> Outcome:
    spec, plan = prepared.spec, prepared.plan
    env = rank_env() if plan.world_size > 1 and not prepared.backend.launches_own_ranks else None
    problems = _rank_problems(prepared, env)
    if problems:
        return _invalid(problems, run_dir, common, common["spec"], plan_dict, framework)
    is_writer = env is None or env.rank == 0
    wandb_mode, notes = _wandb_mode(spec) if is_writer else (spec.logging.wandb.mode, [])
    if wandb_mode is None:
        return _invalid(notes, run_dir, common, common["spec"], plan_dict, framework)
    projection = _projection(prepared, common["spec"], env) if is_writer else None  # before telemetry starts
    sink = _wandb_sink(spec, run_dir, common, wandb_mode) if is_writer else None
    spawned = plan.world_size > 1 and env is None and not prepared.backend.launches_own_ranks
    sampler, telemetry = _sampler(spec, plan.world_size, spawned) if is_writer else (None, None)
    header = {"run_id": common["run_id"], "spec": common["spec"], "spec_hash": common["spec_hash"],
              "plan": plan_dict, "overrides": common["overrides"]}
    step_log = StepLog(run_dir, header) if is_writer and not spawned else None  # spawned: rank 0 writes it
    if is_writer:  # the log states the run's spec: ``tprimat ingest`` reads a run's log back (tprimat.logs.tprimat)
        log.info("%s", spec_line(common["spec"], plan.world_size))
    contention = Contention() if is_writer else None  # whether the run shared its machine (its measured window)
    if contention and spawned:  # the ranks' steps never reach this process: the window is the spawned run
        contention.whole()
    with signals_raise():
        measured = _measure(prepared, run_dir, env, StepObserver(spec, sampler, sink, step_log, contention),
                            sink if spawned else None, header)
    if step_log:
        step_log.close()
    if not is_writer:  # a rank other than 0 under torchrun / Slurm: rank 0 writes the result (its error is logged)
        failed = measured is not None and measured.error
        return Outcome("failed" if failed else "ok", EXIT_FAILED if failed else EXIT_OK, None, {})
    contention.stop()
    if sampler:
        sampler.stop()
        telemetry = sampler.summary(sum(r.tokens or 0 for r in measured.records if not r.warmup), plan.world_size)
    measured.outcome.sections["contention"] = contention.summary(local_gpus(spec))
    result = _measured_result(prepared, measured, plan_dict, framework, telemetry, sink, common, notes, projection)
    return _finish(result, run_dir, EXIT_OK if result["status"] == "ok" else EXIT_FAILED)


def local_gpus(spec: TprimatConf) -> tuple[int, ...]:
    """This node's GPU indices the run uses, as NVML numbers them (CUDA_VISIBLE_DEVICES mapped where it lists
    indices); NVIDIA only, where NVML can list other processes on them."""
    if spec.platform.name != "nvidia":
        return ()
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible and all(v.isdigit() for v in visible):
        return tuple(int(v) for v in visible[:spec.platform.devices_per_node])
    return tuple(range(spec.platform.devices_per_node))


def _measure(prepared: Prepared, run_dir: Path, env: Optional[RankEnv], observer: StepObserver,
             replay_sink, header: dict) -> Optional[Measured]:
    """Train through the backend; an exception after validation becomes the run's error, never a crash."""
    measured = Measured()
    spec, plan, backend = prepared.spec, prepared.plan, prepared.backend
    try:
        if plan.world_size == 1 or backend.launches_own_ranks:
            measured.outcome = backend.run(spec, plan, lambda r: (measured.records.append(r), observer(r)), run_dir)
            return measured
        ranked = _run_ranks(prepared, run_dir, env, observer, header)
        if ranked is None:
            return None
        measured.records, measured.outcome, measured.ranks = ranked.steps, ranked.outcome, rank_summary(ranked)
        for record in measured.records if replay_sink else ():  # ranks ran in child processes: W&B gets them now
            replay_sink.on_step(record)
    except Interrupted as exc:  # SIGTERM / SIGINT: a failed result that says so, with every step so far
        measured.error = f"{exc}: the run was stopped; the steps measured before it are kept"
        log.error("run %s", measured.error)
    except Exception as exc:  # noqa: BLE001 - a run that breaks after validation is a result too
        measured.error = f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exc().splitlines(True)[-12:])
        log.error("run failed: %s: %s", type(exc).__name__, exc)
    if measured.error and not measured.records and plan.world_size > 1 and (env is None or env.rank == 0):
        measured.records = records_of(read_steps(run_dir)[1])  # rank 0 wrote them as it went (here, or a child)
    return measured


def _run_ranks(prepared: Prepared, run_dir: Path, env: Optional[RankEnv], observer: StepObserver, header: dict):
    """Several ranks: this process is one of them (torchrun / Slurm), or it starts them on this node."""
    spec, plan, backend = prepared.spec, prepared.plan, prepared.backend
    if env is not None:
        return run_on_this_rank(lambda cb: backend.run(spec, plan, cb, run_dir), env, device_type(spec.platform.name),
                                observer, spec.benchmark.init_timeout_s, spec.benchmark.collective_timeout_s)
    log.info("launching %d local ranks", plan.world_size)
    return spawn_local(spec_to_dict(spec), run_dir, plan.world_size, header=header)


def _projection(prepared: Prepared, spec_dict: dict, env: Optional[RankEnv]) -> dict:
    """The result's projection: the roofline, or with ``benchmark.projection=measured-slice`` the spec's slice
    measured first by the process that launches the run (under torchrun or Slurm each rank is its own launcher:
    the roofline, saying why)."""
    spec, plan = prepared.spec, prepared.plan
    if spec.benchmark.projection != "measured-slice":
        return projection_of(spec, plan)
    if env is not None:
        return {**projection_of(spec, plan), "note": "benchmark.projection=measured-slice is measured by a local "
                "launch (python launch.py); under torchrun or Slurm the result carries the roofline"}
    from tprimat.execute.slice import project_measured

    log.info("measuring the projection's slice (benchmark.projection=measured-slice)")
    return project_measured(spec_dict, spec, plan, execute)


def _measured_result(prepared: Prepared, measured: Measured, plan_dict: dict, framework: dict, telemetry,
                     sink, common: dict, notes: list, projection: Optional[dict]) -> dict:
    plan, records = prepared.plan, measured.records
    summary = summarize(records, plan.world_size, plan.flops_per_token, plan.peak_tflops)
    status, error = ("failed", measured.error) if measured.error else ("ok", None)
    if status == "ok" and summary is None:
        status, error = "failed", "no measured step was recorded"
    if status == "ok" and (diverged := _diverged(records)):
        status, error = "failed", diverged  # the steps are kept: where it went is the evidence
    warnings = list(plan.warnings) + notes + _loss_warnings(records) + list(measured.outcome.audit_failures)
    for line in measured.outcome.audit_failures:
        log.warning(line)
    wandb_info = sink.finish(status, summary) if sink else None
    if summary:
        _log_summary(prepared.spec, summary)
    return make_result(status=status, error=error, plan=plan_dict, steps=[r.as_dict() for r in records],
                       summary=summary, warnings=warnings, wandb=wandb_info, ranks=measured.ranks,
                       audit=measured.outcome.audit, telemetry=telemetry, projection=projection,
                       framework={**framework, "effective": measured.outcome.effective},
                       **measured.outcome.sections, **common)


def _loss_warnings(records: list[StepRecord]) -> list[str]:
    missing = [r.step for r in records if r.loss is None]
    return [f"no loss recorded at steps {missing[:10]}"] if missing else []


def _diverged(records: list[StepRecord]) -> Optional[str]:
    """The loss went non-finite (NaN or infinity): the run diverged, and a diverged run did not train."""
    bad = [r for r in records if r.loss is not None and not math.isfinite(r.loss)]
    if not bad:
        return None
    return (f"the loss diverged: {bad[0].loss} at step {bad[0].step} ({len(bad)} of {len(records)} steps "
            f"non-finite; first at step {bad[0].step})")


def _log_summary(spec: TprimatConf, summary: dict) -> None:
    log.info("%s on %s: %.0f tokens/s/device, median step %.3f s, %.3f TFLOP/s/device, MFU %s, peak memory "
             "%.2f GiB", spec.model.name, spec.platform.gpu or spec.platform.name,
             summary["tokens_per_s_per_device"], summary["step_time_s"]["median"], summary["tflops_per_device"],
             "n/a" if summary["mfu"] is None else f"{summary['mfu']:.1%}", summary["peak_memory_gib"] or 0)


def _sampler(spec: TprimatConf, world_size: int, spawned: bool):
    """(sampler over this node's devices, None) when telemetry runs, else (None, the reason it does not)."""
    if not spec.benchmark.telemetry:
        return None, {"source": "none", "energy_per_token_j": None, "unavailable": "benchmark.telemetry=false"}
    if spawned:
        return None, {"source": "none", "energy_per_token_j": None,
                      "unavailable": "ranks ran in child processes; run under torchrun or Slurm to sample on rank 0"}
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or min(world_size, spec.platform.devices_per_node))
    source, reason = open_source(spec.platform.name, local)
    if source is None:
        log.warning("telemetry %s", reason)
        return None, {"source": "none", "energy_per_token_j": None, "unavailable": reason}
    return Sampler(source, spec.benchmark.telemetry_interval_s).start(), None


def _wandb_mode(spec: TprimatConf) -> tuple[Optional[str], list[str]]:
    """(the W&B mode to open, what to say): online only if the server answers now; else the run is refused in one
    line (mode None) or, with logging.wandb.offline_if_unreachable=true, goes on offline and says so."""
    conf = spec.logging.wandb
    if conf.mode != "online":
        return conf.mode, []
    from tprimat.results.wandb_sink import unreachable

    why = unreachable()
    if why is None:
        return "online", []
    if conf.offline_if_unreachable:
        note = f"logging.wandb.mode=online: W&B unreachable ({why}); recorded offline instead for `wandb sync` later"
        log.warning("%s", note)
        return "offline", [note]
    return None, [f"logging.wandb.mode=online: W&B unreachable ({why}); set logging.wandb.mode=offline to record "
                  "the run locally for `wandb sync` later, or logging.wandb.offline_if_unreachable=true to go on "
                  "offline when this happens"]


def _wandb_sink(spec: TprimatConf, run_dir: Path, common: dict, mode: str):
    if mode == "disabled":
        return None
    from tprimat.results.wandb_sink import WandbSink

    return WandbSink(spec.logging.wandb, run_dir, common["run_id"], spec.run_name or common["run_id"],
                     common["spec"], spec.training.max_steps, mode)


def _log_step(spec: TprimatConf, record: StepRecord) -> None:
    if record.step % spec.logging.log_every_steps == 0 or record.step == spec.training.max_steps:
        log.info("%s", step_line(record, spec.training.max_steps))


def _invalid(problems: list[str], run_dir: Path, common: dict, spec: Optional[dict], plan: Optional[dict] = None,
             framework: Optional[dict] = None) -> Outcome:
    problems = redact(problems)
    for line in problems:
        log.error("invalid: %s", line)
    fields = {k: v for k, v in common.items() if k not in ("spec", "spec_hash")}
    result = make_result(status="invalid", error="\n".join(problems), spec=spec, plan=plan, framework=framework,
                         **fields)
    return _finish(result, run_dir, EXIT_INVALID)


def _finish(result: dict, run_dir: Path, exit_code: int) -> Outcome:
    """Write result.json; a full or read-only disk is one line naming the path and the error, exit 1 (the
    measured steps stay in steps.jsonl where it could be written)."""
    if result["status"] != "ok" and (reason := scheduler_reason(run_dir)):  # the launcher got here first
        result = with_scheduler_reason(result, reason)
    try:
        path = write_result(result, run_dir)
    except OSError as exc:
        log.error("cannot write the %s result to %s: %s", result["status"], Path(run_dir) / "result.json", exc)
        return Outcome(result["status"], max(exit_code, EXIT_FAILED), None, result)
    log.info("result (%s): %s", result["status"], path)
    return Outcome(result["status"], exit_code, path, result)
