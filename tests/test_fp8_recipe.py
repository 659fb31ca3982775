"""training.fp8.recipe reaches the Megatron-core frameworks as their own Transformer Engine recipe: the names each
expects are written here from the frameworks' sources, not from tprimat's tables. Megatron-core: ``--fp8-recipe``
takes delayed, tensorwise, mxfp8, blockwise (megatron/core/enums.py Fp8Recipe), and its fp8_utils.py builds
Transformer Engine's Float8CurrentScaling from ``tensorwise``; Megatron-Bridge and NeMo 2 name their presets
bf16_with_fp8_delayed_scaling_mixed / bf16_with_fp8_mixed (delayed) and bf16_with_fp8_current_scaling_mixed (the
latter with first_last_layers_bf16=True, which Megatron-Bridge's performance scripts turn off)."""

import ast
import json
from pathlib import Path

import pytest
import yaml

from tprimat import backends
from tprimat.backends.external.audit import audit, torchtitan_job_config
from tprimat.compose import compose
from tprimat.spec.build import build_spec
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.plan import make_plan
from tprimat.spec.validate import validate

NO_HARDWARE = DetectedHardware("none", "no live hardware: plans for GPUs", 0, 0.0, None)
H100 = ["platform=nvidia", "platform.gpu=h100", "model=llama", "dry_run=true", "training.precision=fp8"]
# the spec's recipe -> Megatron-core's own --fp8-recipe value (tensorwise: current scaling in Megatron's words)
MEGATRON = {"delayed": "delayed", "current": "tensorwise", "tensorwise": "tensorwise"}


def spec_plan(overrides):
    spec = build_spec(compose(overrides), NO_HARDWARE)
    return spec, make_plan(spec, NO_HARDWARE)


def assigned(script: str) -> dict:
    tree = ast.parse(script)
    return {getattr(n.targets[0], "id", ""): n.value for n in tree.body if isinstance(n, ast.Assign)}


@pytest.mark.parametrize("recipe", ["delayed", "current", "tensorwise"])
def test_megatron_lm_and_primus_are_told_the_recipe_in_megatrons_words(recipe):
    spec, plan = spec_plan(["framework=megatron", *H100, f"training.fp8.recipe={recipe}"])
    argv = backends.load("megatron").launch(spec, plan, Path("l")).argv
    assert argv[argv.index("--fp8-recipe") + 1] == MEGATRON[recipe] and argv[argv.index("--fp8-format") + 1] == "hybrid"
    spec, plan = spec_plan(["framework=primus", "platform=amd", "platform.gpu=mi300x", *H100[2:],
                            f"training.fp8.recipe={recipe}"])
    exp = yaml.safe_load(backends.load("primus").launch(spec, plan, Path("l")).files["experiment.yaml"])
    assert exp["modules"]["pre_trainer"]["overrides"]["fp8_recipe"] == MEGATRON[recipe]  # Primus's trainer_base key


def test_without_fp8_no_recipe_is_passed():
    spec, plan = spec_plan(["framework=megatron", *H100[:-1], "training.precision=bf16"])
    assert "--fp8-recipe" not in backends.load("megatron").launch(spec, plan, Path("l")).argv


@pytest.mark.parametrize("recipe,preset", [("delayed", "bf16_with_fp8_delayed_scaling_mixed"),
                                           ("current", "bf16_with_fp8_current_scaling_mixed"),
                                           ("tensorwise", "bf16_with_fp8_current_scaling_mixed")])
def test_megatron_bridge_takes_its_preset_and_every_layer_in_fp8(recipe, preset):
    spec, plan = spec_plan(["framework=nemo", "framework.flavour=bridge", *H100, f"training.fp8.recipe={recipe}"])
    names = assigned(backends.load("nemo").launch(spec, plan, Path("l")).files["nemo_pretrain.py"])
    assert ast.literal_eval(names["PRECISION"]) == preset
    settings = {key: (where, read, value) for key, where, read, value in ast.literal_eval(names["SETTINGS"])}
    assert settings["fp8_recipe"] == (None, "model.fp8_recipe", MEGATRON[recipe])  # read back after finalising
    assert settings["first_last_layers_bf16"] == ("mixed_precision.first_last_layers_bf16",
                                                  "model.first_last_layers_bf16", False)


@pytest.mark.parametrize("recipe", ["delayed", "current"])
def test_nemo2_takes_its_preset_and_every_layer_in_fp8(recipe):
    spec, plan = spec_plan(["framework=nemo", *H100, f"training.fp8.recipe={recipe}"])
    script = backends.load("nemo").launch(spec, plan, Path("l")).files["nemo_pretrain.py"]
    names = assigned(script)
    assert ast.literal_eval(names["V"])["fp8_recipe"] == MEGATRON[recipe]
    # the preset the script calls for V["fp8_recipe"]: NeMo 2's own function names, by the recipe Megatron names
    presets = {ast.literal_eval(k): v.id for k, v in zip(names["FP8_PRESETS"].keys, names["FP8_PRESETS"].values)}
    assert presets == {"tensorwise": "bf16_with_fp8_current_scaling_mixed", "delayed": "bf16_with_fp8_mixed"}
    assert 'recipe.trainer.plugins = FP8_PRESETS[V["fp8_recipe"]]() if V["precision"] == "fp8"' in script
    settings = {key: (where, read, value) for key, where, read, value in ast.literal_eval(names["SETTINGS"])}
    assert settings["fp8_recipe"] == (None, "plugin.dtype_config.fp8_recipe", MEGATRON[recipe])
    assert settings["first_last_layers_bf16"] == ("trainer.plugins.first_last_layers_bf16",
                                                  "plugin.dtype_config.first_last_layers_bf16", False)


@pytest.mark.parametrize("framework", ["megatron", "nemo", "primus"])
def test_rowwise_scaling_is_refused_by_key_under_transformer_engine(framework):
    spec = build_spec(compose([f"framework={framework}", *H100, "training.fp8.recipe=rowwise"]), NO_HARDWARE)
    found = [p for p in validate(spec, NO_HARDWARE, dry_run=True) if p.startswith("training.fp8.recipe=rowwise")]
    assert len(found) == 1 and f"framework.name={framework}" in found[0] and "Transformer Engine" in found[0]


def test_megatron_recomputes_selectively_under_delayed_scaling_and_native_does_not_take_it():
    """Megatron-core replays Transformer Engine's fp8 state in its own recompute; the compatibility table's rule
    holds where tprimat's own trainer would run Transformer Engine's modules."""
    selective = ["training.fp8.recipe=delayed", "training.activation_checkpointing=selective"]
    megatron = build_spec(compose(["framework=megatron", *H100, *selective]), NO_HARDWARE)
    assert not [p for p in validate(megatron, NO_HARDWARE, dry_run=True) if "not supported" in p]
    native = build_spec(compose(["framework=native", *H100, *selective]), NO_HARDWARE)
    assert [p for p in validate(native, NO_HARDWARE, dry_run=True) if "not supported" in p]


@pytest.mark.parametrize("printed,passed", [("tensorwise", False), ("Fp8Recipe.tensorwise", False),
                                            ("delayed", True), ("Fp8Recipe.delayed", True)])
def test_the_audit_reads_the_recipe_megatron_ran(printed, passed):
    """Megatron's argument dump (its own format: name, dots, value) read back: a launch that asked for delayed
    scaling and ran current scaling fails the audit on fp8_recipe."""
    spec, _ = spec_plan(["framework=megatron", *H100, "training.fp8.recipe=delayed"])
    dump = ("------------------------ arguments ------------------------\n"
            "  fp8 ............................................. hybrid\n"
            f"  fp8_recipe ...................................... {printed}\n"
            "  bf16 ............................................ True\n"
            "-------------------- end of arguments ---------------------\n")
    check = next(c for c in audit(spec, dump, [])["checks"] if c["key"] == "fp8_recipe")
    assert check["requested"] == "delayed" and check["ok"] is passed


@pytest.mark.parametrize("gpu,platform,recipe", [("h100", "nvidia", "delayed"), ("h200", "nvidia", "current"),
                                                 ("b200", "nvidia", "current"), ("mi355x", "amd", "delayed")])
def test_maximum_performance_runs_the_scaling_its_source_ran(gpu, platform, recipe):
    """NeMo 24.07 (H100): fp8_hybrid with an amax history, delayed; MLPerf v5.1's HPE XD670 H200 llama31_8b:
    config_common.sh FP8_RECIPE="tensorwise"; Megatron-Bridge's B200 FP8_CS config; AMD's MLPerf MI355X train.py:
    fp8="hybrid" with an amax history of 4, delayed."""
    spec = build_spec(compose(["framework=megatron", f"platform={platform}", f"platform.gpu={gpu}", "model=llama",
                               "methodology=maximum_performance"]), NO_HARDWARE)
    assert spec.training.precision == "fp8" and spec.training.fp8.recipe == recipe


# torchtitan 0.2.2's own ConfigManager over tprimat's toml launch with fp8 and the rowwise recipe (its to_dict, the
# sections the audit reads; read 2026-11-29 with bench/rehearse.py's torchtitan_toml environment). Its registry
# names the converter quantize.linear.float8 (components/quantization/float8.py); the 0.1 name, float8, is not
# registered there, so a launch naming it stops at start-up.
TORCHTITAN_022_FLOAT8 = {"model": {"converters": ["quantize.linear.float8"]},
                         "quantize": {"linear": {"float8": {"enable_fsdp_float8_all_gather": False,
                                                            "precompute_float8_dynamic_scale_for_fsdp": False,
                                                            "recipe_name": "rowwise", "filter_fqns": ["output"],
                                                            "emulate": False}}}}


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_torchtitan_is_told_its_float8_converter_and_recipe(recipe):
    """tensorwise is torchtitan's float8 without a recipe name (its docs/float8.md), rowwise is named."""
    spec, plan = spec_plan(["framework=torchtitan", "framework.flavour=toml", *H100, f"training.fp8.recipe={recipe}"])
    argv = backends.load("torchtitan").launch(spec, plan, Path("l")).argv
    assert argv[argv.index("--model.converters") + 1] == "quantize.linear.float8"
    named = argv[argv.index("--quantize.linear.float8.recipe_name") + 1] if recipe == "rowwise" else None
    assert named == ("rowwise" if recipe == "rowwise" else None)
    assert ("--quantize.linear.float8.recipe_name" in argv) is (recipe == "rowwise")


@pytest.mark.parametrize("recipe", ["delayed", "current"])
def test_torchtitan_refuses_transformer_engines_recipes_by_key(recipe):
    spec, plan = spec_plan(["framework=torchtitan", "framework.flavour=toml", *H100, f"training.fp8.recipe={recipe}"])
    found = [p for p in backends.load("torchtitan").check(spec, plan) if p.startswith(f"training.fp8.recipe={recipe}")]
    assert len(found) == 1 and "torchao" in found[0]


@pytest.mark.parametrize("asked,passed", [("rowwise", True), ("tensorwise", False)])
def test_the_audit_reads_torchtitans_float8_back(asked, passed):
    spec, _ = spec_plan(["framework=torchtitan", "framework.flavour=toml", *H100, f"training.fp8.recipe={asked}"])
    saved = {**TORCHTITAN_022_FLOAT8, "training": {"mixed_precision_param": "bfloat16"}}
    checks = {c["key"]: c for c in audit(spec, "", [], torchtitan_job_config(saved))["checks"]}
    assert checks["precision"]["ok"] and checks["precision"]["effective"] == "fp8"  # bf16 params, float8 linears
    assert checks["fp8_recipe"]["effective"] == "rowwise" and checks["fp8_recipe"]["ok"] is passed


def test_the_audit_reads_torchtitans_default_float8_as_tensorwise_and_its_absence_as_bf16():
    spec, _ = spec_plan(["framework=torchtitan", "framework.flavour=toml", *H100])
    unnamed = json.loads(json.dumps(TORCHTITAN_022_FLOAT8))
    unnamed["quantize"]["linear"]["float8"]["recipe_name"] = None  # torchtitan's own tensorwise path
    checks = {c["key"]: c for c in audit(spec, "", [], torchtitan_job_config(
        {**unnamed, "training": {"mixed_precision_param": "bfloat16"}}))["checks"]}
    assert checks["fp8_recipe"]["ok"] and checks["precision"]["ok"]
    dropped = {"model": {"converters": []}, "training": {"mixed_precision_param": "bfloat16"}}  # no float8 linears
    checks = {c["key"]: c for c in audit(spec, "", [], torchtitan_job_config(dropped))["checks"]}
    assert not checks["precision"]["ok"] and checks["precision"]["effective"] == "bf16"


@pytest.mark.parametrize("framework,gpu,platform", [("megatron", "h100", "nvidia"), ("nemo", "b200", "nvidia"),
                                                    ("primus", "mi355x", "amd"), ("torchtitan", "h200", "nvidia")])
def test_maximum_performance_keeps_no_fp8_recipe_once_the_precision_is_bf16(framework, gpu, platform):
    spec = build_spec(compose([f"framework={framework}", f"platform={platform}", f"platform.gpu={gpu}", "model=llama",
                               "methodology=maximum_performance", "training.precision=bf16"]), NO_HARDWARE)
    assert spec.training.fp8.recipe == "tensorwise"
    assert not [p for p in validate(spec, NO_HARDWARE, dry_run=True) if p.startswith("training.fp8.recipe")]


@pytest.mark.parametrize("precision,read", [("fp8", None), ("bf16", "bf16")])
def test_torchtitan_03s_saved_config_says_nothing_of_float8_so_an_fp8_runs_precision_is_unchecked(tmp_path, precision,
                                                                                                  read):
    """torchtitan 0.3 converts linears to float8 inside the model's config and its saved to_dict keeps no class name
    (its Float8LinearConverter; parameters stay bfloat16): the saved training section reads bfloat16 either way."""
    spec, _ = spec_plan(["framework=torchtitan", *H100[:4], f"training.precision={precision}",
                         *(["framework.recipe=llama3:llama3_debugmodel_float8"] if precision == "fp8" else [])])
    (tmp_path / "torchtitan").mkdir()
    (tmp_path / "torchtitan" / "tprimat_effective_config.json").write_text(
        json.dumps({"training": {"mixed_precision_param": "bfloat16"}}))
    found = backends.load("torchtitan").effective_settings(spec, tmp_path)
    assert found.get("precision") == read
    result = audit(spec, "", [], found)
    assert ("precision" in result["unchecked"]) is (read is None)


@pytest.mark.parametrize("framework,recipe,apart", [("megatron", "tensorwise", True), ("primus", "current", True),
                                                    ("nemo", "tensorwise", True), ("megatron", "delayed", False)])
def test_compare_keeps_a_launch_from_before_the_recipe_apart_from_a_repeat_made_since(tmp_path, framework, recipe,
                                                                                       apart):
    """Two dry runs of one spec are repeats (one group); the same result with its launch's recipe removed, as a
    Megatron-core launch recorded before 2026-11-29 looked (it ran delayed scaling whatever the spec said), is not."""
    from tests.conftest import run_inprocess
    from tprimat.compare.groups import identity_of

    platform = ["platform=amd", "platform.gpu=mi300x"] if framework == "primus" else H100[:2]
    overrides = [f"framework={framework}", *platform, *H100[2:], f"training.fp8.recipe={recipe}"]
    first = run_inprocess(tmp_path / "a", overrides).result
    second = run_inprocess(tmp_path / "b", overrides).result
    assert identity_of(first) == identity_of(second)
    old = json.loads(json.dumps(first))
    launch = old["plan"]["backend_config"]
    argv = launch["argv"]
    if "--fp8-recipe" in argv:
        del argv[argv.index("--fp8-recipe"):argv.index("--fp8-recipe") + 2]
    launch["file_contents"] = {name: "\n".join(line for line in text.splitlines() if "fp8_recipe" not in line)
                               for name, text in launch["file_contents"].items()}
    # a delayed spec ran delayed then as now: a true repeat
    assert (identity_of(old) != identity_of(first)) is apart


@pytest.mark.parametrize("candidates,precision,expected", [
    ([{"fp8_recipe": "tensorwise", "fp8_dpa": "1", "missing": []}], "fp8", ("tensorwise", True)),
    ([{"fp8_recipe": None, "fp8_dpa": "False", "missing": []}], "fp8", (None, False)),
    # a sourced file absent: it may have set FP8_DPA
    ([{"fp8_recipe": None, "fp8_dpa": None, "missing": ["config_common.sh"]}], "fp8", (None, None)),
    # candidates that disagree leave the field unknown
    ([{"fp8_recipe": "delayed", "fp8_dpa": "1", "missing": []},
      {"fp8_recipe": "tensorwise", "fp8_dpa": "0", "missing": []}], "fp8", (None, None)),
    ([{"fp8_recipe": "tensorwise", "fp8_dpa": "1", "missing": []}], "bf16", (None, False))])
def test_mlperf_rows_record_the_fp8_recipe_and_attention_their_configs_agree_on(candidates, precision, expected):
    import sys

    from tests.conftest import ROOT
    sys.path.insert(0, str(ROOT / "bench"))
    from mlperf_layouts import fp8_of

    got = fp8_of(candidates, precision)
    assert (got["fp8_recipe"], got["fp8_attention"]) == expected
