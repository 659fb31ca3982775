"""Hydra entry point behind ``python launch.py`` and ``tprimat launch``."""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from tprimat.compose import (
    CONFIG_DIR,
    REFERENCE,
    OverrideError,
    check_overrides,
    compose,
    presets,
    register_configs,
    to_plain,
    unknown_preset,
)
from tprimat.execute.claim import DirectoryClaimed, claim
from tprimat.execute.rank import EXIT_FAILED, EXIT_INVALID, EXIT_OK, rank_env
from tprimat.spec.secrets import redact

CLAIMS: list = []  # lock files of the directories this process claimed, held until it exits
SWEEP_OUTCOMES: list[tuple[str, str]] = []  # (overrides, status) of each point run in this process

register_configs()
# conf/hydra/launcher/submitit_{slurm,local}.yaml reuse hydra-submitit-launcher's names and keys for tprimat's
# launchers; Hydra checks them against that plugin's schema of the same name (wanted) and warns that it does.
warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/submitit_(slurm|local)' is validated against")


class ClaimDirectory(Callback):
    """Hydra callback (conf/config.yaml ``hydra.callbacks.claim``): the run or sweep directory is claimed before
    Hydra writes anything into it; a second launch into it exits 2 with one line."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        self._claim(config.hydra.run.dir, "hydra.run.dir", bool(config.get("overwrite", False)))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self._claim(config.hydra.sweep.dir, "hydra.sweep.dir", bool(config.get("overwrite", False)))

    @staticmethod
    def _claim(directory, key: str, overwrite: bool = False) -> None:
        env = rank_env()
        if env is not None and env.rank != 0:  # torchrun / srun: rank 0 holds the claim for the run
            return
        if not str(directory).strip():  # Hydra would write into the working directory itself
            print(f"invalid: {key}='': must name a directory for the run's files (the default is outputs/...)",
                  file=sys.stderr)
            sys.exit(EXIT_INVALID)
        try:
            CLAIMS.append(claim(Path(str(directory)), overwrite))
        except DirectoryClaimed as exc:
            print(f"invalid: {key}={directory}: {exc}", file=sys.stderr)
            sys.exit(EXIT_INVALID)
        except OSError as exc:  # a read-only or full disk: nothing can be measured safely there
            print(f"cannot use {key}={directory}: {exc}", file=sys.stderr)
            sys.exit(EXIT_FAILED)


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def task(cfg: DictConfig) -> int:
    from tprimat.execute.run import execute, refuse_config  # torch: only where a run executes (not a Slurm sweep's)

    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN and cfg.logging.wandb.group is None:  # one W&B group per sweep
        cfg.logging.wandb.group = sweep_group(Path(str(hydra_cfg.sweep.dir)))
    run_dir, overrides = Path(hydra_cfg.runtime.output_dir), task_overrides(hydra_cfg)
    preset = hydra_cfg.runtime.choices.get("experiment")
    try:
        if preset is not None and preset not in presets():
            raise ValueError(unknown_preset(preset))
        plain = to_plain(cfg)
    except OmegaConfBaseException as exc:  # ${missing.key}, ${oc.env:UNSET}, a resolved value of the wrong type
        key = getattr(exc, "full_key", None)
        where = f"{key}: " if key else ""
        outcome = refuse_config(f"cannot resolve the config: {where}{one_line(exc)}", run_dir, overrides)
    except ValueError as exc:  # an unknown preset: Hydra's optional default would skip it silently
        outcome = refuse_config(str(exc), run_dir, overrides)
    else:
        outcome = execute(plain, run_dir, overrides)
    if hydra_cfg.mode == RunMode.MULTIRUN:  # one bad point never stops a sweep
        SWEEP_OUTCOMES.append((" ".join(overrides), outcome.status))
        return outcome.exit_code
    if outcome.exit_code != EXIT_OK:
        sys.exit(outcome.exit_code)
    return outcome.exit_code


def task_overrides(hydra_cfg) -> list[str]:
    """The command line's overrides as typed: not resolved (``${...}`` in one is the user's text)."""
    return [str(o) for o in OmegaConf.to_container(hydra_cfg.overrides.task, resolve=False)]


def one_line(exc: BaseException) -> str:
    """OmegaConf's message without its multi-line context (full_key, object_type)."""
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def refuse_bad_overrides(argv: list[str]) -> None:
    """``tprimat.compose.check_overrides`` before Hydra sees the command line: one line, exit 2 (an unknown
    preset is refused later, in ``task``, with a result written). A single run whose typed interpolation cannot
    resolve is refused here too, naming it: Hydra would otherwise fail naming ``hydra.run.dir``, whose directory
    name interpolates ``model.name`` and ``framework.name``."""
    overrides = [arg for arg in argv if not arg.startswith("-")]
    try:
        check_overrides(overrides, presets_too=False)
        typed = [o.partition("=") for o in overrides]
        if not {"-m", "--multirun"} & set(argv) and any("${" in value for _, _, value in typed):
            keys = run_dir_keys()
            if any("${" in value and key.lstrip("+~") in keys for key, _, value in typed):
                compose(overrides)
    except OverrideError as exc:
        print(f"invalid: {redact(str(exc))}", file=sys.stderr)
        sys.exit(EXIT_INVALID)
    except Exception:  # noqa: BLE001 - anything else Hydra reports itself, as without this check
        pass


def run_dir_keys() -> set[str]:
    """The keys ``hydra.run.dir`` interpolates in conf/config.yaml (and itself): an interpolation typed for one of
    them that cannot resolve fails inside Hydra, before ``task`` could write a result naming it."""
    text = (Path(CONFIG_DIR) / "config.yaml").read_text()
    line = next((ln for ln in text.splitlines() if ln.strip().startswith("dir:") and "${" in ln), "")
    return {"hydra.run.dir", *REFERENCE.findall(line)}


def sweep_group(sweep_dir: Path) -> str:
    """W&B group of a sweep: its directory (outputs/multirun/<date>/<time> -> sweep-<date>-<time>)."""
    return "sweep-" + "-".join(sweep_dir.resolve().parts[-2:])


def main() -> None:
    refuse_bad_overrides(sys.argv[1:])
    env = rank_env()
    if env is not None and env.rank != 0:  # under torchrun / srun: Hydra's config dump is written by rank 0 only
        sys.argv.append("hydra.output_subdir=null")
    if env is not None:
        run_as_rank()
    task()
    exit_after_sweep()


def run_as_rank() -> None:
    """One rank of torchrun / srun: its exit code is the run's, whatever torch.distributed's teardown does."""
    from tprimat.execute.distributed import exit_rank

    try:
        task()
    except SystemExit as exc:
        exit_rank(0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1)
    exit_rank(0)


def exit_after_sweep() -> None:
    """After a sweep: a one-line tally, every point that was not ok, exit 1 if any."""
    from tprimat.sweep.launch import LAST_SUMMARY

    outcomes = [(row["overrides"], row["status"]) for row in LAST_SUMMARY] or SWEEP_OUTCOMES
    if not outcomes:
        return
    bad = [(point, status) for point, status in outcomes if status not in ("ok", "dry_run", "skipped")]
    log = logging.getLogger("tprimat")
    log.info("sweep: %d points, %d ok, %d not ok", len(outcomes), len(outcomes) - len(bad), len(bad))
    for point, status in bad:
        log.info("  %s: %s", status, point or "(defaults)")
    sys.exit(1 if bad else 0)
