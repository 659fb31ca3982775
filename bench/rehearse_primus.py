"""AMD Primus's own configuration path over tprimat's experiment YAML (bench/rehearse.py; run by Primus's Python
with Primus's sources and its pinned Megatron-LM first on the path): ``python rehearse_primus.py EXPERIMENT.yaml
EXPECTED.json OUT.json MAJOR.MINOR`` (the target GPU's compute capability).

Then Megatron-LM's own ``validate_args`` runs over the namespace Primus built (Primus's ROCm checks that wrap it
need Primus-Turbo's kernels and are left out), its questions of the GPU answered as the target GPU answers them;
the values are read after it, and its ``gpt_builder`` builds the model on the meta device.

As ``primus/cli/main.py train pretrain`` does up to the trainer (its environment as ``examples/run_pretrain.sh`` and
Primus's setup patch give it: ``CUDA_DEVICE_MAX_CONNECTIONS``): ``load_primus_config`` (its ``PrimusParser``: the
YAML loader, ``extends`` and the model preset merged under the module config, then the experiment's overrides),
``get_module_config(..., "pre_trainer")``, and ``MegatronAdapter.convert_config`` (``MegatronArgBuilder``: Megatron
-LM's own argument defaults, overridden by every module parameter Megatron knows; the others are dropped without
a word). Each override tprimat writes must be a Megatron-LM argument of the Megatron-LM Primus pins (else the
builder drops it: an error), and the final argument namespace must hold tprimat's value, of its type
(EXPECTED.json: the values as tprimat meant them, before any YAML); and the run spec's own values are read from
the same namespace under Megatron's names for them. A key Primus's own merged defaults lack is
named beside it (Primus's presets lag its Megatron-LM: its Qwen 2.5 preset still says ``norm_epsilon``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import yaml


def module_params(experiment: Path):
    from primus.core.config.primus_config import get_module_config, load_primus_config
    cli = argparse.Namespace(config=str(experiment), data_path="./data", backend_path=None, export_config=None)
    return get_module_config(load_primus_config(experiment, cli), "pre_trainer").params


def connections(params) -> None:
    """The environment Primus's setup gives its trainer before validate_args: CUDA_DEVICE_MAX_CONNECTIONS, 8 under
    an FSDP, else the launcher's (examples/run_pretrain.sh exports 1 unless set), by Primus's own setup patch."""
    from types import SimpleNamespace

    from primus.backends.megatron.patches import env_patches
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # run_pretrain.sh: ${CUDA_DEVICE_MAX_CONNECTIONS:-1}
    env_patches.log_kv_rank_0 = lambda *args, **kwargs: None  # Primus's logger is set up by its trainer, not here
    env_patches.set_cuda_device_max_connections(SimpleNamespace(extra={"module_config": SimpleNamespace(params=params)}))


def main() -> None:
    experiment, expected_file, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    given = json.loads(Path(expected_file).read_text())
    expected, spec_rows = given["overrides"], given["spec_rows"]
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    record = {"settings": [], "params": None, "error": None}
    try:
        bare = yaml.safe_load(experiment.read_text())
        bare["modules"]["pre_trainer"].pop("overrides")
        defaults_file = Path(tempfile.mkdtemp()) / "defaults.yaml"
        defaults_file.write_text(yaml.safe_dump(bare))
        defaults = set(vars(module_params(defaults_file)))
        params = module_params(experiment)
        from primus.backends.megatron.argument_builder import MegatronArgBuilder, _load_megatron_defaults
        megatron_keys = set(_load_megatron_defaults())
        backend = MegatronArgBuilder().update(params).finalize()
    except Exception as exc:  # noqa: BLE001 - Primus's own refusal is the finding
        record["error"] = f"Primus's config path: {type(exc).__name__}: {exc}"
        Path(out).write_text(json.dumps(record))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import megatron.training.arguments as arguments
    from rehearse_argv import answer_as, meta_params, plain, validate
    answer_as(arguments, tuple(map(int, sys.argv[4].split("."))))
    connections(params)
    record["error"] = validate(arguments, backend)  # Primus's ROCm checks that wrap it need Primus-Turbo: left out
    for key, value in expected.items():  # read after validate_args, as the trainer gets them
        got = getattr(backend, key) if key in megatron_keys else "<not a Megatron-LM argument: MegatronArgBuilder drops it>"
        where = f"megatron_args.{key}" + ("" if key in defaults else " (a key Primus's defaults lack)")
        record["settings"].append({"key": key, "where": where, "spec": value, "framework": plain(got)})
    record["settings"] += [{"key": f"spec {key}", "where": f"megatron_args.{dest}", "spec": value,
                            "framework": plain(getattr(backend, dest, "<absent>"))} for key, dest, value in spec_rows]
    if record["error"] is None:
        try:
            record["params"] = meta_params(backend)
        except Exception as exc:  # noqa: BLE001
            record["error"] = f"model build: {type(exc).__name__}: {exc}"
    Path(out).write_text(json.dumps(record))


if __name__ == "__main__":
    main()
