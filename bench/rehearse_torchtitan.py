"""torchtitan's own configuration path over tprimat's generated module (bench/rehearse.py; run by the Python
that has torchtitan, in the launch's directory): ``python rehearse_torchtitan.py LAUNCH_DIR EXPECTED.json
OUT.json``.

As ``torchtitan.train`` does before it trains: ``ConfigManager().parse_args(["--module", M, "--config", F, ...])``
imports the generated module, calls its function and applies the command line; every ``section.key`` tprimat sets
(EXPECTED.json) is read back from that config object, and the model its ``model_spec`` names is built on the meta
device and its parameters counted."""

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
        import torch
        from torchtitan.config.manager import ConfigManager
        config = ConfigManager().parse_args(point["args"])
    except BaseException as exc:  # noqa: BLE001 - torchtitan's own refusal (or the module's) is the finding
        record["error"] = f"ConfigManager: {type(exc).__name__}: {exc}"
        Path(out).write_text(json.dumps(record))
        return
    for dotted, value in point["expected"].items():
        section, key = dotted.split(".")
        got = getattr(getattr(config, section, None), key, "<absent>")
        plain = isinstance(got, (bool, int, float, str, type(None)))
        record["settings"].append({"key": dotted, "where": f"config.{dotted}", "spec": value,
                                   "framework": got if plain else str(got)})
    try:
        with torch.device("meta"):
            model = config.model_spec.model.build()
        record["params"] = sum(p.numel() for p in model.parameters())
    except Exception as exc:  # noqa: BLE001
        record["error"] = f"model build: {type(exc).__name__}: {exc}"
    Path(out).write_text(json.dumps(record))


if __name__ == "__main__":
    main()
