"""The generated NeMo 2 and Megatron-Bridge scripts refuse a setting their framework would ignore, and the
rehearsal (bench/rehearse.py) runs them with the frameworks' own code where its environments exist.

The expected values come from the frameworks: Megatron-Bridge 0.3.1's ``runtime_config_update`` copies the mixed
precision recipe's ``grad_reduce_in_fp32`` over the DDP config's (so a value set on ``cfg.ddp`` was undone), its
``TrainingConfig`` holds ``eval_iters`` (0.3.x has no ``ValidationConfig``), and its ``GPTDatasetConfig.seq_length``
is a settable alias of megatron-core's ``sequence_length``; NeMo 2's ``MegatronStrategy`` takes ``**kwargs``,
which swallow a misspelled name (nemo_toolkit 2.7.3). Each was seen in the rehearsal of 2026-11-27."""

import dataclasses
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.rehearse import FRAMEWORKS, missing
from tests.conftest import ROOT
from tests.test_external import GPU, spec_plan
from tprimat import backends
from tprimat.backends.external import nemo


def script_namespace(flavour: str) -> dict:
    """The generated script's helpers (put, declares) and tables, without importing the framework."""
    spec, plan = spec_plan(["framework=nemo", f"framework.flavour={flavour}", *GPU[:3]])
    script = backends.load("nemo").launch(spec, plan, Path("l")).files["nemo_pretrain.py"]
    helpers = script[script.index("def declares"):script.index("def meta_parameter_count")]
    namespace = {"dataclasses": dataclasses, "inspect": inspect, "json": json, "VERSION": "test"}
    exec(compile(helpers, "nemo_pretrain.py", "exec"), namespace)  # noqa: S102 - tprimat's own generated code
    return namespace


@dataclasses.dataclass
class DatasetConfig:  # the shape of GPTDatasetConfig: a field, and an alias property with a setter
    sequence_length: int = 0

    @property
    def seq_length(self):
        return self.sequence_length

    @seq_length.setter
    def seq_length(self, value):
        self.sequence_length = value


@dataclasses.dataclass
class Container:
    dataset: DatasetConfig = dataclasses.field(default_factory=DatasetConfig)


def test_put_sets_a_field_or_a_settable_alias_and_refuses_a_name_nothing_reads():
    ns = script_namespace("bridge")
    cfg = Container()
    ns["put"](cfg, "dataset.seq_length", 8192)
    assert cfg.dataset.sequence_length == 8192
    with pytest.raises(SystemExit, match="declares no setting 'num_layer'"):
        ns["put"](cfg, "dataset.num_layer", 32)  # a dataclass would take it as a new attribute, silently
    assert not hasattr(cfg.dataset, "num_layer")


def test_put_refuses_a_name_a_fiddle_class_would_swallow_in_its_kwargs():
    class Strategy:  # MegatronStrategy's shape: named arguments, then **kwargs
        def __init__(self, context_parallel_size=1, **kwargs):
            pass

    class Buildable:  # what Fiddle's Config exposes: the class it builds
        __fn_or_cls__ = Strategy

    ns = script_namespace("nemo2")
    assert ns["declares"](Buildable(), "context_parallel_size")
    assert not ns["declares"](Buildable(), "context_paralel_size")


def test_bridge_sets_grad_reduce_on_the_mixed_precision_recipe_and_reads_it_from_ddp():
    spec, _ = spec_plan(["framework=nemo", "framework.flavour=bridge", *GPU[:3], "training.grad_reduce_in_fp32=false"])
    rows = {row[0]: row for row in nemo.bridge_settings(spec)}
    assert rows["grad_reduce_in_fp32"][1:] == ("mixed_precision.grad_reduce_in_fp32", "ddp.grad_reduce_in_fp32", False)
    assert rows["eval_iters"][1] == "validation.eval_iters"  # 0.4+; the script moves it to train. on 0.3.x


@pytest.mark.slow
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_the_frameworks_own_code_holds_every_setting(framework, tmp_path):
    """bench/rehearse.py over one point of each framework: every setting read back from the framework's own
    finalised objects equals tprimat's, and its own model has the plan's parameter count. Skipped, naming the
    command, where the framework's environment or sources have not been built."""
    reason = missing(framework)
    if reason:
        pytest.skip(reason)
    gpu = FRAMEWORKS[framework].platforms[0]
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "rehearse.py"), "--framework", framework,
                           "--models", "mistral" if framework == "megatron_deepspeed" else "llama",
                           "--platforms", "mi300x" if framework == "megatron_deepspeed" else gpu,
                           "--out", str(tmp_path / "out.json")],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    summary = json.loads((tmp_path / "out.json").read_text())[0]
    assert summary["set"] > 15 and summary["equal"] == summary["set"], proc.stdout[-4000:]
    # Megatron-DeepSpeed's model is not built (its model provider starts DeepSpeed's engine); every other one is
    assert summary["params_built"] > 0 or framework == "megatron_deepspeed", proc.stdout[-4000:]
    assert summary["params_equal"] == summary["params_built"], proc.stdout[-4000:]
    assert proc.stdout.strip().splitlines()[-2] == "frameworks_rehearsed=1"
