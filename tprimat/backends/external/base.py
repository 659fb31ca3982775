"""Shared machinery of the external adapters: materialise the launch (argv, environment, generated files),
run it as a process (argv list, never a shell string), stream its output to ``framework.log`` while parsing
step records line by line with the ingestion parsers, enforce the timeout, and audit what it printed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tprimat.backends.base import Backend, RunOutcome, StepSink
from tprimat.backends.external.audit import audit, describe_failures
from tprimat.logs.parsers import PARSERS
from tprimat.results.records import record_from_step
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf


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


class ExternalBackend(Backend):
    name = ""
    launches_own_ranks = True  # torchrun / run_pretrain.sh / NeMo-Run start the ranks, not tprimat
    log_format = "megatron"  # ingestion parser for what the framework prints
    path_env = ""  # environment variable naming the framework checkout
    needs_checkout = True  # a launch needs framework.path (or path_env) to exist on this machine

    def framework_path(self, spec: TprimatConf) -> Optional[Path]:
        raw = spec.framework.path or os.environ.get(self.path_env)
        return Path(raw).expanduser() if raw else None

    @abstractmethod
    def launch(self, spec: TprimatConf, plan: Plan, launch_dir: Path) -> Launch:
        """The command, environment and generated files that run the spec with this framework."""

    def version(self) -> str:
        return f"{self.name} (external process; version read from its own output)"

    def describe(self, spec: TprimatConf, plan: Plan) -> str:
        return (f"{self.name} as a separate process: {plan.world_size} GPU(s) on {spec.platform.nodes} node(s), tp "
                f"{plan.tp} pp {plan.pp} cp {plan.cp} dp {plan.dp}, every hyperparameter passed explicitly")

    def check(self, spec: TprimatConf, plan: Plan) -> list[str]:
        if spec.platform.name == "cpu":
            return [f"framework.name={self.name}, platform.name=cpu: {self.name} trains on NVIDIA or AMD GPUs"]
        if spec.profile.enabled and spec.profile.tool == "torch":
            return [f"profile.tool=torch, framework.name={self.name}: the PyTorch profiler runs inside tprimat's own "
                    "loop; profile an external framework with profile.tool=nsys or rocprof"]
        return []

    def check_install(self, spec: TprimatConf, plan: Plan) -> list[str]:
        if spec.profile.enabled and shutil.which(spec.profile.tool) is None:
            return [f"profile.tool={spec.profile.tool}: {spec.profile.tool} is not installed (not on PATH)"]
        if not self.needs_checkout:  # runs with the framework's own interpreter (framework.python)
            return []
        path = self.framework_path(spec)
        if path is None:
            return [f"framework.path: where is {self.name}? set framework.path=... or {self.path_env}"]
        if not path.exists():
            return [f"framework.path={path}: does not exist"]
        return []

    def generated_config(self, spec: TprimatConf, plan: Plan) -> dict:
        launch = self.launch(spec, plan, Path("launch"))
        return {**launch.as_dict(), "file_contents": launch.files}

    def materialize(self, spec: TprimatConf, plan: Plan, run_dir: Path) -> dict:
        launch = self.write_launch(spec, plan, run_dir)
        return {**launch.as_dict(), "file_contents": launch.files}

    def write_launch(self, spec: TprimatConf, plan: Plan, run_dir: Path) -> Launch:
        """Write the generated files and command.json under ``run_dir/launch``."""
        launch_dir = (run_dir / "launch").resolve()
        launch = self.launch(spec, plan, launch_dir)
        if spec.profile.enabled:
            launch.argv = profiler_prefix(spec.profile.tool, run_dir.resolve() / "profile") + launch.argv
        launch_dir.mkdir(parents=True, exist_ok=True)
        for name, content in launch.files.items():
            (launch_dir / name).write_text(content)
        (launch_dir / "command.json").write_text(json.dumps(launch.as_dict(), indent=2) + "\n")
        return launch

    def effective_settings(self, spec: TprimatConf, launch_dir: Path) -> dict:
        """tprimat keys read from a config file the framework wrote itself during the run (none by default)."""
        return {}

    def run(self, spec: TprimatConf, plan: Plan, on_step: StepSink, run_dir: Optional[Path] = None) -> RunOutcome:
        """Run the framework as a process group, stream and parse its output, audit what it printed."""
        run_dir = Path(run_dir or ".")
        launch = self.write_launch(spec, plan, run_dir)
        log_path = run_dir / "framework.log"
        started = time.monotonic()
        code = self._stream(launch, spec, plan, log_path, on_step)
        text = log_path.read_text(errors="replace")
        if code != 0:
            timed_out = time.monotonic() - started >= spec.framework.timeout_min * 60
            tail = "\n".join(text.splitlines()[-30:])
            reason = f"timed out after {spec.framework.timeout_min} min" if timed_out else f"exited with code {code}"
            raise ExternalFailed(f"{self.name} {reason}; last lines of {log_path.name}:\n{tail}")
        saved = self.effective_settings(spec, (run_dir / "launch").resolve())
        report = audit(spec, text, self._steps, saved)
        profile = {"profile": {"tool": spec.profile.tool, "output": "profile/"}} if spec.profile.enabled else {}
        return RunOutcome(effective={"command": launch.argv, "log": log_path.name, **saved}, audit=report,
                          audit_failures=describe_failures(report), sections=profile)

    def _stream(self, launch: Launch, spec: TprimatConf, plan: Plan, log_path: Path, on_step: StepSink) -> int:
        """Start the command in its own session, tee its output to ``log_path`` while parsing steps; its exit code."""
        live = LiveSteps(self.log_format, spec, plan.world_size, on_step)
        self._steps = live.steps
        proc = subprocess.Popen(launch.argv, cwd=launch.cwd, env={**os.environ, **launch.env}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, errors="replace",
                                start_new_session=True)
        timer = threading.Timer(spec.framework.timeout_min * 60, _kill_group, args=(proc,))
        timer.start()
        try:
            with open(log_path, "w") as log:
                for line in proc.stdout:
                    log.write(line)
                    live.line(line)
            return proc.wait()
        finally:
            live.close()
            timer.cancel()
            _kill_group(proc)


class LiveSteps:
    """A framework's output, line by line, through the same stream parser ``tprimat ingest`` uses: each step
    becomes a record as soon as the lines that complete it have been printed."""

    def __init__(self, fmt: str, spec: TprimatConf, world_size: int, on_step: StepSink) -> None:
        self.parser = PARSERS[fmt]()
        self.spec, self.world_size, self.on_step = spec, world_size, on_step
        self.steps: list[dict] = []
        self.warnings: list[str] = []

    def line(self, raw: str) -> None:
        for step in self.parser.feed(raw):
            self._emit(step)

    def close(self) -> None:
        for step in self.parser.finish():
            self._emit(step)

    def _emit(self, step: dict) -> None:
        tr = self.spec.training
        previous = self.steps[-1] if self.steps else None
        self.steps.append(step)
        warmup = len(self.steps) <= self.spec.benchmark.warmup_steps
        self.on_step(record_from_step(step, tr.global_batch_size, tr.seq_length, self.world_size, previous, warmup,
                                      self.warnings))


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


def profiler_prefix(tool: str, out: Path) -> list[str]:
    """nsys or rocprof in front of the framework's command, writing under the run directory."""
    if tool == "nsys":
        return ["nsys", "profile", "--trace=cuda,nvtx,osrt", "--force-overwrite=true", "-o", str(out / "nsys")]
    return ["rocprof", "--stats", "--timestamp", "on", "-d", str(out), "-o", str(out / "rocprof.csv")]

