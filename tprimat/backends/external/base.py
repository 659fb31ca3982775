"""Shared machinery of the external adapters: materialise the launch (argv, environment, generated files),
run it as a process (argv list, never a shell string), stream its output to ``framework.log`` while parsing
step records line by line with the ingestion parsers, enforce the timeout, and audit what it printed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tprimat.backends.base import StepSink
from tprimat.backends.external.audit import audit, describe_failures
from tprimat.config.schema import TprimatConf
from tprimat.ingest.clean import clean_line
from tprimat.ingest.parsers import PARSERS
from tprimat.plan import Plan
from tprimat.records import StepRecord


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the inherited environment
    cwd: Optional[str] = None
    files: dict[str, str] = field(default_factory=dict)  # generated files: name -> content (written to launch/)

    def as_dict(self) -> dict:
        return {"argv": self.argv, "env": self.env, "cwd": self.cwd, "files": sorted(self.files)}


class ExternalFailed(RuntimeError):
    pass


def rendezvous_env() -> dict[str, str]:
    env = os.environ
    return {"MASTER_ADDR": env.get("MASTER_ADDR", "127.0.0.1"), "MASTER_PORT": env.get("MASTER_PORT", "29500"),
            "NODE_RANK": env.get("NODE_RANK", env.get("SLURM_NODEID", "0"))}


def torchrun(spec: TprimatConf) -> list[str]:
    rdv = rendezvous_env()
    return [spec.framework.python, "-m", "torch.distributed.run",
            f"--nproc_per_node={spec.platform.devices_per_node}", f"--nnodes={spec.platform.nodes}",
            f"--node_rank={rdv['NODE_RANK']}", f"--master_addr={rdv['MASTER_ADDR']}",
            f"--master_port={rdv['MASTER_PORT']}"]


class ExternalBackend:
    name = ""
    launches_own_ranks = True  # torchrun / run_pretrain.sh / NeMo-Run start the ranks, not tprimat
    log_format = "megatron"  # ingestion parser for what the framework prints
    path_env = ""  # environment variable naming the framework checkout

    def framework_path(self, spec: TprimatConf) -> Optional[Path]:
        raw = spec.framework.path or os.environ.get(self.path_env)
        return Path(raw).expanduser() if raw else None

    def launch(self, spec: TprimatConf, plan: Plan, launch_dir: Path) -> Launch:
        raise NotImplementedError

    def version(self) -> str:
        return f"{self.name} (external process; version read from its own output)"

    def describe(self, spec: TprimatConf, plan: Plan) -> str:
        return (f"{self.name} as a separate process: {plan.world_size} GPU(s) on {spec.platform.nodes} node(s), tp "
                f"{plan.tp} pp {plan.pp} cp {plan.cp} dp {plan.dp}, every hyperparameter passed explicitly")

    def check(self, spec: TprimatConf, plan: Plan) -> list[str]:
        if spec.platform.name == "cpu":
            return [f"framework.name={self.name}, platform.name=cpu: {self.name} trains on NVIDIA or AMD GPUs"]
        path = self.framework_path(spec)
        if path is None:
            return [f"framework.path: where is {self.name}? set framework.path=... or {self.path_env}"]
        if not path.exists():
            return [f"framework.path={path}: does not exist"]
        return []

    def config(self, spec: TprimatConf, plan: Plan) -> dict:
        launch = self.launch(spec, plan, Path("launch"))
        return {**launch.as_dict(), "file_contents": launch.files}

    def materialize(self, spec: TprimatConf, plan: Plan, run_dir: Path) -> Launch:
        launch_dir = (run_dir / "launch").resolve()
        launch = self.launch(spec, plan, launch_dir)
        launch_dir.mkdir(parents=True, exist_ok=True)
        for name, content in launch.files.items():
            (launch_dir / name).write_text(content)
        (launch_dir / "command.json").write_text(json.dumps(launch.as_dict(), indent=2) + "\n")
        return launch

    def effective_settings(self, spec: TprimatConf, launch_dir: Path) -> dict:
        """tprimat keys read from a config file the framework wrote itself during the run (none by default)."""
        return {}

    def run(self, spec: TprimatConf, plan: Plan, on_step: StepSink, run_dir: Optional[Path] = None) -> dict:
        run_dir = Path(run_dir or ".")
        launch = self.materialize(spec, plan, run_dir)
        log_path = run_dir / "framework.log"
        steps: list[dict] = []
        proc = subprocess.Popen(launch.argv, cwd=launch.cwd, env={**os.environ, **launch.env}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, errors="replace",
                                start_new_session=True)
        timer = threading.Timer(spec.framework.timeout_min * 60, _kill_group, args=(proc,))
        timer.start()
        started = time.monotonic()
        try:
            with open(log_path, "w") as log:
                for line in proc.stdout:
                    log.write(line)
                    self._step_from(line, spec, plan, steps, on_step)
            code = proc.wait()
        finally:
            timer.cancel()
            _kill_group(proc)
        text = log_path.read_text(errors="replace")
        saved = self.effective_settings(spec, (run_dir / "launch").resolve())
        result = {"command": launch.argv, "audit": audit(spec, text, steps, saved), "log": log_path.name}
        if code != 0:
            timed_out = time.monotonic() - started >= spec.framework.timeout_min * 60
            tail = "\n".join(text.splitlines()[-30:])
            reason = f"timed out after {spec.framework.timeout_min} min" if timed_out else f"exited with code {code}"
            raise ExternalFailed(f"{self.name} {reason}; last lines of {log_path.name}:\n{tail}")
        for line in describe_failures(result["audit"]):
            result.setdefault("audit_failures", []).append(line)
        return result

    def _step_from(self, line: str, spec: TprimatConf, plan: Plan, steps: list[dict], on_step: StepSink) -> None:
        for step in PARSERS[self.log_format]([clean_line(line)]):
            if any(s["step"] == step["step"] for s in steps):
                continue  # printed by several ranks
            steps.append(step)
            reported = step.get("reported") or {}
            gbs = reported.get("global_batch_size") or spec.training.global_batch_size
            on_step(StepRecord(step=int(step["step"]), step_time_s=step.get("step_time_s") or None,
                               tokens=int(gbs * spec.training.seq_length), loss=step.get("loss"), lr=step.get("lr"),
                               grad_norm=step.get("grad_norm"), memory_gib=step.get("memory_gib"),
                               peak_memory_gib=step.get("peak_memory_gib"),
                               warmup=len(steps) <= spec.benchmark.warmup_steps, reported=reported))


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
