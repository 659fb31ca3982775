"""torchtitan's own configuration path over tprimat's generated module (bench/rehearse.py; run by the Python
that has torchtitan, in the launch's directory): ``python rehearse_torchtitan.py LAUNCH_DIR EXPECTED.json
OUT.json``.

As ``torchtitan.train`` does before it trains: ``ConfigManager().parse_args(["--module", M, "--config", F, ...])``
imports the generated module, calls its function and applies the command line; the run spec's values
(EXPECTED.json) are read back from that config object, as torchtitan saves it (``to_dict``) and tprimat's audit
reads a saved one, and the model its ``model_spec`` names is built on the meta device and its parameters
counted."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    launch_dir, expected_file, out = sys.argv[1:4]
    sys.path.insert(0, launch_dir)
    point = json.loads(Path(expected_file).read_text())
    record = {"settings": [], "params": None, "error": None}
    try:
        from torchtitan.config.manager import ConfigManager
        config = ConfigManager().parse_args(point["args"])
    except BaseException as exc:  # noqa: BLE001 - torchtitan's own refusal (or the module's) is the finding
        record["error"] = f"ConfigManager: {type(exc).__name__}: {exc}"
        Path(out).write_text(json.dumps(record))
        return
    from tprimat.backends.external.audit import torchtitan_saved_config
    found = torchtitan_saved_config(config.to_dict())  # the config as torchtitan saves it, read as the audit reads it
    record["settings"] = spec_settings(found, point["spec_rows"], "config")
    count_on_meta(record, lambda: config.model_spec.model.build())
    Path(out).write_text(json.dumps(record))


def spec_settings(found: dict, spec_rows: list, where: str) -> list[dict]:
    """The run spec's values beside what the audit's reader found in torchtitan's config."""
    return [{"key": f"spec {key}", "where": f"{where} ({name})", "spec": value, "framework": found.get(name, "<absent>")}
            for key, name, value in spec_rows]


def count_on_meta(record: dict, build) -> None:
    """The parameters of the model ``build()`` makes on the meta device, or why it could not be built."""
    import torch
    try:
        with torch.device("meta"):
            model = build()
        record["params"] = sum(p.numel() for p in model.parameters())
    except Exception as exc:  # noqa: BLE001
        record["error"] = f"model build: {type(exc).__name__}: {exc}"


if __name__ == "__main__":
    main()
