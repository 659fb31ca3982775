"""One benchmark, end to end: conf -> spec -> validate -> plan -> backend -> step records -> summary -> sinks.

Every outcome writes result.json: ``invalid`` (exit 2) for a spec that breaks a rule, ``dry_run`` for a plan,
``failed`` (exit 1) for a run that broke after validation, ``ok`` (exit 0) for a measured run.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from tprimat import backends, environment
from tprimat.config.schema import TprimatConf
from tprimat.config.spec import SpecError, build_spec, spec_to_dict
from tprimat.detect import detect
from tprimat.distributed import rank_env, rank_summary, run_on_this_rank
from tprimat.metrics import summarize
from tprimat.plan import Plan, make_plan
from tprimat.records import StepRecord
from tprimat.result import make_result, new_run_id, write_result
from tprimat.spawn import spawn_local
from tprimat.sweep import spec_hash
from tprimat.telemetry import Sampler, open_source
from tprimat.validate import validate

log = logging.getLogger("tprimat")
EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


@dataclass(frozen=True)
class Outcome:
    status: str
    exit_code: int
    result_path: Path
    result: dict


def execute(cfg: DictConfig, run_dir: Path, overrides: Optional[list] = None) -> Outcome:
    run_id, hw = new_run_id(), detect()
    common = {"run_id": run_id, "environment": environment.collect(hw), "overrides": list(overrides or [])}
    try:
        spec = build_spec(cfg, hw)
    except SpecError as exc:
        raw = OmegaConf.to_container(cfg, resolve=False)
        raw.pop("hydra", None)
        return _invalid(exc.problems, run_dir, common, raw)
    problems = validate(spec, hw, dry_run=spec.dry_run)
    if problems:
        return _invalid(problems, run_dir, common, spec_to_dict(spec))
    try:
        backend = backends.load(spec.framework.name)
    except backends.BackendUnavailable as exc:  # e.g. an optional framework that is not installed
        return _invalid([str(exc)], run_dir, common, spec_to_dict(spec))
    plan = make_plan(spec, hw)
    plan = replace(plan, backend=backend.name, backend_description=backend.describe(spec, plan))
    backend_problems = backend.check(spec, plan)
    common.update(spec=spec_to_dict(spec), framework={"name": backend.name, "version": backend.version()},
                  spec_hash=spec_hash(spec_to_dict(spec)))
    plan_dict = {**plan.as_dict(), "backend_problems": backend_problems}
    if hasattr(backend, "config"):  # a generated framework config (DeepSpeed JSON), shown before anything runs
        plan_dict["backend_config"] = backend.config(spec, plan)
    for warning in plan.warnings:
        log.warning(warning)
    if spec.dry_run:
        log.info("plan: %s", plan.backend_description)
        if hasattr(backend, "materialize"):  # external frameworks: the exact command and files, not run
            launch = backend.materialize(spec, plan, run_dir)
            plan_dict["backend_config"] = {**launch.as_dict(), "file_contents": launch.files}
            log.info("would run: %s", " ".join(launch.argv))
        result = make_result(status="dry_run", plan=plan_dict, warnings=list(plan.warnings), **common)
        return _finish(result, run_dir, EXIT_OK)
    if backend_problems:
        return _invalid(backend_problems, run_dir, common, common["spec"], plan_dict)
    return _train(spec, plan, plan_dict, backend, run_dir, common)


def _train(spec: TprimatConf, plan: Plan, plan_dict: dict, backend, run_dir: Path, common: dict) -> Outcome:
    own_ranks = getattr(backend, "launches_own_ranks", False)
    env = rank_env() if plan.world_size > 1 and not own_ranks else None
    if plan.world_size > 1 and env is None and spec.platform.nodes > 1 and not own_ranks:
        return _invalid([f"platform.nodes={spec.platform.nodes}: start one process per rank with torchrun or "
                         "Slurm (srun); tprimat launches the ranks of one node itself"], run_dir, common,
                        common["spec"], plan_dict)
    if env is not None and env.world_size != plan.world_size:
        return _invalid([f"platform.devices_per_node * platform.nodes = {plan.world_size}, but {env.source} started "
                         f"{env.world_size} ranks: they must match"], run_dir, common, common["spec"], plan_dict)
    is_writer = env is None or env.rank == 0
    sink = _wandb_sink(spec, run_dir, common) if is_writer else None
    warnings = list(plan.warnings)
    spawned = plan.world_size > 1 and env is None and not own_ranks
    sampler, telemetry = _sampler(spec, spawned) if is_writer else (None, None)

    def on_step(record: StepRecord) -> None:
        if sampler:
            sampler.mark(measured=not record.warmup)
        if sink:
            sink.on_step(record)
        _log_step(spec, record)

    status, error, exit_code = "ok", None, EXIT_OK
    records: list[StepRecord] = []
    ranks, effective = None, {}
    try:
        if plan.world_size == 1 or own_ranks:
            effective = backend.run(spec, plan, lambda r: (records.append(r), on_step(r)), run_dir) or {}
        else:
            ranked = _run_ranks(spec, plan, backend, run_dir, common, env, on_step)
            if ranked is None:  # a rank other than 0 under torchrun / Slurm: rank 0 writes the result
                return Outcome("ok", EXIT_OK, None, {})
            records, effective = ranked.steps, ranked.effective
            ranks = rank_summary(ranked)
            if env is None and sink:  # ranks ran in child processes: log their records to W&B now
                for record in records:
                    sink.on_step(record)
    except Exception as exc:  # a run that breaks after validation is a result too
        status, exit_code = "failed", EXIT_FAILED
        error = f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exc().splitlines(True)[-12:])
        log.error("run failed: %s: %s", type(exc).__name__, exc)
    summary = summarize(records, plan.world_size, plan.flops_per_token, plan.peak_tflops)
    if sampler:
        sampler.stop()
        telemetry = sampler.summary(sum(r.tokens or 0 for r in records if not r.warmup))
    if status == "ok" and summary is None:
        status, exit_code, error = "failed", EXIT_FAILED, "no measured step was recorded"
    nonfinite = [r.step for r in records if r.loss is None or r.loss != r.loss]
    if nonfinite:
        warnings.append(f"non-finite loss at steps {nonfinite[:10]}")
    audit = effective.pop("audit", None)
    for line in effective.pop("audit_failures", []):
        log.warning(line)
        warnings.append(line)
    wandb_info = sink.finish(status, summary) if sink else None
    result = make_result(status=status, error=error, plan=plan_dict, steps=[r.as_dict() for r in records],
                         summary=summary, warnings=warnings, wandb=wandb_info, **common)
    result["ranks"] = ranks
    result["audit"] = audit
    result["telemetry"] = telemetry
    if result["framework"] is not None:
        result["framework"]["effective"] = effective
    if summary:
        log.info("%s on %s: %.0f tokens/s/device, median step %.3f s, %.3f TFLOP/s/device, MFU %s, peak memory "
                 "%.2f GiB", spec.model.name, spec.platform.gpu or spec.platform.name,
                 summary["tokens_per_s_per_device"], summary["step_time_s"]["median"], summary["tflops_per_device"],
                 "n/a" if summary["mfu"] is None else f"{summary['mfu']:.1%}", summary["peak_memory_gib"] or 0)
    return _finish(result, run_dir, exit_code)


def _run_ranks(spec, plan, backend, run_dir, common, env, on_step):
    """Several ranks: this process is one of them (torchrun / Slurm), or it starts them on this node."""
    if env is not None:
        device_type = "cpu" if spec.platform.name == "cpu" else "cuda"
        return run_on_this_rank(lambda cb: backend.run(spec, plan, cb, run_dir), env, device_type, on_step=on_step)
    log.info("launching %d local ranks", plan.world_size)
    return spawn_local(common["spec"], run_dir, plan.world_size)


def _sampler(spec: TprimatConf, spawned: bool):
    """(sampler, None) when telemetry runs, else (None, the reason it does not)."""
    if not spec.benchmark.telemetry:
        return None, {"source": "none", "energy_per_token_j": None, "unavailable": "benchmark.telemetry=false"}
    if spawned:
        return None, {"source": "none", "energy_per_token_j": None,
                      "unavailable": "ranks ran in child processes; run under torchrun or Slurm to sample on rank 0"}
    source, reason = open_source(spec.platform.name)
    if source is None:
        log.warning("telemetry %s", reason)
        return None, {"source": "none", "energy_per_token_j": None, "unavailable": reason}
    return Sampler(source, spec.benchmark.telemetry_interval_s).start(), None


def _wandb_sink(spec: TprimatConf, run_dir: Path, common: dict):
    if spec.logging.wandb.mode == "disabled":
        return None
    from tprimat.sinks.wandb_sink import WandbSink

    return WandbSink(spec.logging.wandb, run_dir, common["run_id"], spec.run_name or common["run_id"],
                     common["spec"], spec.training.max_steps)


def _log_step(spec: TprimatConf, record: StepRecord) -> None:
    if record.step % spec.logging.log_every_steps == 0 or record.step == spec.training.max_steps:
        log.info("repeat %d step %d/%d | loss %.4f | lr %.3e | grad_norm %.3f | step_time %.3f s | %.0f tokens/s%s",
                 record.repeat, record.step, spec.training.max_steps, record.loss, record.lr, record.grad_norm,
                 record.step_time_s, record.tokens / record.step_time_s, " (warm-up)" if record.warmup else "")


def _invalid(problems: list[str], run_dir: Path, common: dict, spec: Optional[dict],
             plan: Optional[dict] = None) -> Outcome:
    for line in problems:
        log.error("invalid: %s", line)
    fields = {k: v for k, v in common.items() if k not in ("spec", "framework", "spec_hash")}
    result = make_result(status="invalid", error="\n".join(problems), spec=spec, plan=plan,
                         framework=common.get("framework"), **fields)
    return _finish(result, run_dir, EXIT_INVALID)


def _finish(result: dict, run_dir: Path, exit_code: int) -> Outcome:
    path = write_result(result, run_dir)
    log.info("result (%s): %s", result["status"], path)
    return Outcome(result["status"], exit_code, path, result)
