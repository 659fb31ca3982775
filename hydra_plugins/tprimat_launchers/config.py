"""Launcher configs: ``hydra/launcher=tprimat_basic`` (default), ``tprimat_submitit_local``, ``tprimat_submitit_slurm``;
the sweeper ``hydra/sweeper=tprimat_basic`` (default): Hydra's basic sweeper, each point composed once."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore

PACKAGE = "hydra_plugins.tprimat_launchers.launchers"


@dataclass
class TprimatBasicConf:
    _target_: str = f"{PACKAGE}.TprimatBasicLauncher"


@dataclass
class TprimatSweeperConf:
    """Hydra's BasicSweeper's keys (a preset's ``hydra.sweeper.params`` among them)."""

    _target_: str = f"{PACKAGE}.TprimatSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


@dataclass
class TprimatSubmititConf:
    """submitit executor parameters (see submitit's AutoExecutor); one task per rank."""

    _target_: str = f"{PACKAGE}.TprimatLocalLauncher"
    submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j"
    timeout_min: int = 60
    cpus_per_task: Optional[int] = None
    gpus_per_node: Optional[int] = None
    tasks_per_node: int = 1
    mem_gb: Optional[int] = None
    nodes: int = 1
    name: str = "${hydra.job.name}"
    stderr_to_stdout: bool = True


@dataclass
class TprimatSlurmConf(TprimatSubmititConf):
    _target_: str = f"{PACKAGE}.TprimatSlurmLauncher"
    partition: Optional[str] = None
    qos: Optional[str] = None
    account: Optional[str] = None
    constraint: Optional[str] = None
    signal_delay_s: int = 90
    max_num_timeout: int = 0
    array_parallelism: int = 256
    additional_parameters: Dict[str, Any] = field(default_factory=dict)
    setup: Optional[List[str]] = None
    srun_args: Optional[List[str]] = None
    # hydra-submitit-launcher's other sbatch keys, passed through submitit as they are
    comment: Optional[str] = None
    exclude: Optional[str] = None
    gres: Optional[str] = None
    cpus_per_gpu: Optional[int] = None
    gpus_per_task: Optional[int] = None
    mem_per_gpu: Optional[str] = None
    mem_per_cpu: Optional[str] = None


cs = ConfigStore.instance()
cs.store(group="hydra/sweeper", name="tprimat_basic", node=TprimatSweeperConf, provider="tprimat")
cs.store(group="hydra/launcher", name="tprimat_basic", node=TprimatBasicConf, provider="tprimat")
cs.store(group="hydra/launcher", name="tprimat_submitit_local", node=TprimatSubmititConf, provider="tprimat")
cs.store(group="hydra/launcher", name="tprimat_submitit_slurm", node=TprimatSlurmConf, provider="tprimat")
