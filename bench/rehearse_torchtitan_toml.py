"""torchtitan 0.2's own configuration path over tprimat's ``toml`` launch (bench/rehearse.py; run by the Python that
has torchtitan 0.2, in the exported checkout whose TOMLs the launch names): ``python rehearse_torchtitan_toml.py
EXPECTED.json OUT.json``.

As ``torchtitan.train`` 0.2 does before it trains: ``ConfigManager().parse_args(argv)`` reads the TOML and applies
every ``--section.key`` override (tyro refuses one it does not have, by name); the run spec's values (EXPECTED.json)
are read back from the JobConfig as torchtitan saves it (``to_dict``, ``job.save_config_file``) and tprimat's audit
reads a saved one; the model its train spec names is built on the meta device (``model_args.update_from_config``
then ``model_cls``, as its Trainer does) and its parameters counted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rehearse_torchtitan import count_on_meta, spec_settings  # this script's folder is first on its path


def override_rows(config, args: list[str]) -> list[dict]:
    """Every ``--section.key value`` of the launch (but the TOML's path) read back from the JobConfig, the value
    given as text taken in the type torchtitan holds it in (a flag without a value: true)."""
    rows, i = [], 0
    while i < len(args):
        name = args[i][2:]
        given = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        i += 1 if given is None else 2
        if name == "job.config_file":
            continue
        held = config
        for part in name.split("."):  # nested sections too (quantize.linear.float8.recipe_name)
            held = getattr(held, part, "<absent>")
        if given is None:
            want = True
        elif isinstance(held, bool):
            want = given.lower() == "true"
        elif isinstance(held, (int, float)):
            want = type(held)(given)
        elif isinstance(held, list):
            want = given.split(",")
        else:
            want = given
        rows.append({"key": name, "where": f"job config ({name})", "spec": want, "framework": held})
    return rows


def converter_rows(config) -> list[dict]:
    """Each model converter the launch names, looked up in torchtitan's own registry as its Trainer looks it up
    (``ModelConvertersContainer``: an unknown name is a KeyError at start-up, not at parse time)."""
    import torchtitan.components.quantization  # noqa: F401 - registers the float8 and mx converters
    from torchtitan.protocols.model_converter import _registry_model_converter_cls as registry
    return [{"key": f"model.converters[{name}]", "where": "torchtitan's model converter registry", "spec": "registered",
             "framework": "registered" if name in registry else f"unknown (registered: {', '.join(sorted(registry))})"}
            for name in config.model.converters]


def model_of(config):
    """As its Trainer builds it: the train spec's model args for the flavour, updated from the job config."""
    from torchtitan.protocols.train_spec import get_train_spec
    train_spec = get_train_spec(config.model.name)
    model_args = train_spec.model_args[config.model.flavor]
    model_args.update_from_config(config)
    return train_spec.model_cls(model_args)


def main() -> None:
    expected_file, out = sys.argv[1:3]
    point = json.loads(Path(expected_file).read_text())
    record = {"settings": [], "params": None, "error": None}
    try:
        from torchtitan.config import ConfigManager
        config = ConfigManager().parse_args(point["args"])
    except BaseException as exc:  # noqa: BLE001 - torchtitan's own refusal is the finding
        record["error"] = f"ConfigManager: {type(exc).__name__}: {exc}"
        Path(out).write_text(json.dumps(record))
        return
    from tprimat.backends.external.audit import torchtitan_job_config
    found = torchtitan_job_config(config.to_dict())  # as torchtitan saves it, read as the audit reads it
    record["settings"] = [*override_rows(config, point["args"]), *converter_rows(config),
                          *spec_settings(found, point["spec_rows"], "job config")]
    count_on_meta(record, lambda: model_of(config))
    Path(out).write_text(json.dumps(record))


if __name__ == "__main__":
    main()
