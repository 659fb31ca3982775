"""Megatron-LM's or Megatron-DeepSpeed's own ``parse_args`` and ``validate_args``, as their ``pretrain_gpt.py``
runs them, over each point's command line (bench/rehearse.py; run by the framework's Python, its sources first
on the path): ``python rehearse_argv.py ARGUMENTS_MODULE POINTS.json OUT.json``.

Every flag tprimat passes is looked up in the framework's own parser (an unknown flag fails there, as it would at
launch), its value converted by the parser's own type (``store_true``/``store_false`` flags give True/False under
the argument's own destination name, ``--disable-bias-linear`` -> ``add_bias_linear``), and compared with what the
argument namespace holds after ``validate_args``. The launch's own environment (``CUDA_DEVICE_MAX_CONNECTIONS``)
is set as the launch sets it. Where ``validate_args`` asks the GPU's architecture (tp or cp above 1, Megatron
FSDP: ``get_device_arch_version``) it gets the target GPU's compute capability, as that GPU would answer; any
other question to the GPU stops the check there (every check before it passed), and that is recorded.
Megatron-LM's model is built by its own ``gpt_builder`` on the meta device, as one rank, with the vocabulary padded
for the launch's tensor parallelism (a multiple of 128 x TP), as the run pads it."""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import os
import sys
import tempfile
import traceback

ARGS_DEFAULTS = {"tokenizer_type": "GPT2BPETokenizer"}  # what both pretrain_gpt.py pass to pretrain()
GPU_STOPS = ("get_device_arch_version", "is_torch_min_version_with_cuda", "_get_cuda_capability")


def capture_parser():
    """The framework builds its parser inside parse_args: keep the instance whose parse_args it calls."""
    seen = []
    original = argparse.ArgumentParser.parse_args

    def parse_args(self, *a, **k):
        seen.append(self)
        return original(self, *a, **k)

    argparse.ArgumentParser.parse_args = parse_args
    return seen


def expected(parser, argv):
    """{flag: (dest, value the framework's parser makes of tprimat's string)} for every flag in argv."""
    out, i = {}, 0
    while i < len(argv):
        flag = argv[i]
        action = parser._option_string_actions[flag]
        if action.nargs == 0:
            out[flag] = (action.dest, action.const)
            i += 1
            continue
        values = []
        i += 1
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(action.type(argv[i]) if callable(action.type) else argv[i])
            i += 1
        out[flag] = (action.dest, values[0] if action.nargs in (None, "?") else values)
    return out


def plain(value):
    """A value as JSON holds it, else its text."""
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    if isinstance(value, list) and all(isinstance(v, (int, float, str)) for v in value):
        return value
    return str(value)


def read_back(namespace, flag_rows: dict, spec_rows: list) -> list[dict]:
    """The namespace's value for every flag (tprimat's string as the framework's parser makes it) and for every
    spec value (the run spec's own, under the framework's name for it)."""
    rows = [{"key": flag, "where": f"args.{dest}", "spec": value, "framework": plain(getattr(namespace, dest, "<absent>"))}
            for flag, (dest, value) in flag_rows.items()]
    return rows + [{"key": f"spec {key}", "where": f"args.{dest}", "spec": value,
                    "framework": plain(getattr(namespace, dest, "<absent>"))} for key, dest, value in spec_rows]


def validate(module, args) -> str | None:
    """The framework's validate_args over args; its refusal, if any, as one line."""
    try:
        module.validate_args(args, dict(ARGS_DEFAULTS))
    except BaseException as exc:  # noqa: BLE001 - the framework's own refusal is the finding
        frames = [f.name for f in traceback.extract_tb(exc.__traceback__)]
        if any(stop in frames for stop in GPU_STOPS):
            return "validate_args asks the GPU something else (the checks before it passed)"
        return f"validate_args: {type(exc).__name__}: {exc}"
    return None


def meta_params(args) -> int | None:
    """Megatron-LM's own gpt_builder over the validated arguments, on the meta device, one rank."""
    import torch
    import torch.distributed as dist
    try:
        from gpt_builders import gpt_builder
    except ImportError:
        return None
    from megatron.core import parallel_state
    from megatron.training.global_vars import set_global_variables
    args = copy.copy(args)
    # no Transformer Engine or apex here: local layers without their fusions, as the device kit's runs (the same
    # parameters)
    args.transformer_impl = "local"
    args.apply_rope_fusion = args.gradient_accumulation_fusion = args.masked_softmax_fusion = False
    args.bias_dropout_fusion, args.no_persist_layer_norm, args.moe_permute_fusion = False, True, False
    args.use_cpu_initialization = True
    set_global_variables(args, build_tokenizer=True)  # pads the vocabulary for the launch's own TP, as the run does
    # then the whole model on one rank: the launch's vocabulary, every layer
    args.tensor_model_parallel_size = args.pipeline_model_parallel_size = args.context_parallel_size = 1
    args.sequence_parallel = args.use_megatron_fsdp = False
    # one stage: no virtual stages and no split to count the embedding and the loss in (kept, Megatron would build
    # (layers + 2) / 1 of them on its one non-interleaved stage)
    args.virtual_pipeline_model_parallel_size = None
    args.account_for_embedding_in_pipeline_split = args.account_for_loss_in_pipeline_split = False
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/rendezvous", rank=0, world_size=1)
        parallel_state.initialize_model_parallel()
    with torch.device("meta"):
        model = gpt_builder(args, True, True)
    return sum(p.numel() for p in model.parameters())


def answer_as(module, arch: tuple[int, int]) -> None:
    """validate_args' questions of the GPU answered as the target GPU answers them (its compute capability)."""
    import torch
    torch.cuda.get_device_capability = lambda *_: arch
    if hasattr(module, "get_device_arch_version"):
        module.get_device_arch_version = lambda: arch[0]


def rehearse(module, point) -> dict:
    os.environ.update(point["env"], WORLD_SIZE=str(point["world_size"]), RANK="0", LOCAL_RANK="0")
    answer_as(module, tuple(point["arch"]))
    sys.argv = ["pretrain_gpt.py", *point["argv"]]
    parsers = capture_parser()
    record = {"settings": [], "params": None, "error": None}
    try:
        args = module.parse_args()
    except SystemExit as stop:  # argparse's refusal (an unknown flag, a bad value): the finding
        record["error"] = f"parse_args refused the command line (exit {stop.code})"
        return record
    record["error"] = validate(module, args)
    record["settings"] = read_back(args, expected(parsers[-1], point["argv"]), point["spec_rows"])
    if record["error"] is None:
        try:
            record["params"] = meta_params(args)
        except Exception as exc:  # noqa: BLE001
            record["error"] = f"model build: {type(exc).__name__}: {exc}"
    return record


def main() -> None:
    name, points_file, out = sys.argv[1:4]  # read before each point sets sys.argv to its command line
    module = importlib.import_module(name)
    records = [rehearse(module, point) for point in json.load(open(points_file))]
    with open(out, "w") as f:
        json.dump(records, f)


if __name__ == "__main__":
    main()
