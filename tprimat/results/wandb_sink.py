"""Weights & Biases sink: the run's spec as config, every step's metrics, the summary.

Offline by default: no network, files under ``<run dir>/wandb/offline-run-*``; sync later with
``wandb sync <run dir>/wandb/offline-run-*``. wandb is imported only when this sink is used.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

from tprimat.results.records import StepRecord
from tprimat.spec.schema import WandbConf

REACH_TIMEOUT_S = 5.0
DEFAULT_BASE_URL = "https://api.wandb.ai"


def unreachable(timeout_s: float = REACH_TIMEOUT_S) -> Optional[str]:
    """Why the W&B server (``WANDB_BASE_URL``, else api.wandb.ai) cannot be reached, from one TCP connection tried
    before anything trains; None when it can. The W&B client would otherwise retry for minutes mid-run."""
    url = urlparse(os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL)
    host, port = url.hostname or "api.wandb.ai", url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"{host}:{port} did not answer within {timeout_s:g} s: {exc.strerror or type(exc).__name__}"


class WandbSink:
    def __init__(self, conf: WandbConf, run_dir: Path, run_id: str, name: str, config: dict,
                 steps_per_repeat: int, mode: Optional[str] = None):
        import wandb

        self.steps_per_repeat = steps_per_repeat
        tags = [f"platform:{config['platform']['name']}", f"gpu:{config['platform']['gpu'] or 'none'}",
                f"framework:{config['framework']['name']}", f"model:{config['model']['name']}",
                f"methodology:{config['methodology']['name']}", *conf.tags]
        settings = wandb.Settings(console="off", x_disable_stats=True, x_save_requirements=False,
                                  disable_git=True)
        # wandb starts a service process and names it in this process's environment (WANDB_SERVICE), which child
        # processes inherit; one this sink started is stopped (and unnamed) in ``finish`` when no run is left
        self.started_service = "WANDB_SERVICE" not in os.environ
        self.run = wandb.init(mode=mode or conf.mode, project=conf.project, entity=conf.entity, group=conf.group,
                              tags=tags, name=name, id=run_id.replace(":", "-"),
                              dir=str(run_dir), config=config, settings=settings, reinit="create_new")

    def on_step(self, record: StepRecord) -> None:
        metrics = {f"train/{k}": v for k, v in record.as_dict().items()
                   if k not in ("step", "repeat") and v is not None}
        metrics["train/repeat"] = record.repeat
        self.run.log(metrics, step=record.repeat * self.steps_per_repeat + record.step)

    def finish(self, status: str, summary: Optional[dict]) -> dict:
        self.run.summary["status"] = status
        for key, value in flatten(summary or {}).items():
            self.run.summary[key] = value
        info = {"mode": self.run.settings.mode, "id": self.run.id, "project": self.run.project,
                "group": self.run.group, "tags": list(self.run.tags),
                "offline_dir": Path(self.run.dir).parent.name if self.run.settings.mode == "offline" else None}
        self.run.finish(exit_code=0 if status in ("ok", "dry_run") else 1)
        import wandb

        if self.started_service and wandb.run is None:  # no run of the user's own: stop the service we started
            wandb.teardown()
        return info


def flatten(data: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}/"))
        elif not isinstance(value, list):
            flat[f"{prefix}{key}"] = value
    return flat
