"""Row fidelity: every MLPerf submission the projection bench scores composes to the layout its own config states
(bench/mlperf_rows_v51.json: each row's values as read from its implementation's config_*.sh and its logs)."""

import json
import sys

import pytest

from tests.conftest import ROOT
from tprimat.compose import Composer
from tprimat.spec.build import build_spec
from tprimat.spec.detect import DetectedHardware

sys.path.insert(0, str(ROOT / "bench"))
# composed as bench/projection.py composes them: the sweep's fast composition, equal to Hydra's (tests/test_sweep.py)
COMPOSER = Composer()
from mlperf_projection_rows import load, why_not  # noqa: E402

HW = DetectedHardware("cpu", "test", 1, 0.0, None)
SETS = ["mlperf_rows_v51.json", "mlperf_rows_v50.json", "mlperf_rows_v41.json", "mlperf_rows_v40.json",  # scored; held out
        "mlperf_rows_v51_405b.json"]
# the systems' JSONs' accelerator names as the hardware table's rows, by hand
GPU = {"NVIDIA H100-SXM5-80GB": "h100", "NVIDIA H200-SXM5-141GB": "h200", "NVIDIA H200-NVL-141GB": "h200_nvl",
       "NVIDIA Blackwell GPU (B200-SXM-180GB)": "b200", "NVIDIA Blackwell Ultra GPU (B300-SXM-270GB)": "b300",
       "NVIDIA Blackwell GPU (GB200)": "gb200", "NVIDIA Blackwell Ultra GPU (GB300)": "gb300",
       "AMD Instinct MI300X 192GB HBM3": "mi300x", "AMD Instinct MI325X 256GB HBM3E": "mi325x",
       "AMD Instinct MI325X 256GB HBM3e": "mi325x", "AMD Instinct MI325X 256GB HBM3E DLC": "mi325x",
       "AMD Instinct MI350X": "mi350x", "AMD Instinct MI355X": "mi355x"}
MODEL = {"llama31_8b": (32, 4096, "none"), "llama2_70b_lora": (80, 8192, "lora"), "llama31_405b": (126, 16384, "none")}


def source_rows(name):
    return [r for r in json.loads((ROOT / "bench" / name).read_text()) if why_not(r) is None]


@pytest.mark.parametrize("name", SETS)
def test_every_expressed_row_composes_to_its_sources_layout(name):
    expressed, _ = load(name)
    sources = source_rows(name)
    assert len(expressed) == len(sources) > 0
    for r, source in zip(expressed, sources):
        spec = build_spec(COMPOSER.compose(r["overrides"]), HW)
        par, tr, plat = spec.parallelism, spec.training, spec.platform
        assert (par.tp, par.pp, par.cp, par.vp) == (source["tp"], source["pp"], source["cp"], source["vp"] or 1), r
        assert (tr.micro_batch_size, tr.global_batch_size, tr.seq_length) == (
            source["micro_batch_size"], source["global_batch_size"], source["seq_length"]), r
        assert tr.precision == source["precision"] and spec.framework.name == "nemo", r
        assert plat.nodes * plat.devices_per_node == source["nodes"] * source["devices_per_node"], r
        assert plat.gpu == GPU.get(source["accelerator"], source["accelerator"]), r
        if plat.gpu.startswith("gb"):  # an NVL72 rack is one NVLink domain: never more than 72 GPUs in it
            assert plat.devices_per_node <= 72 and plat.devices_per_node % 4 == 0, r
        else:
            assert (plat.nodes, plat.devices_per_node) == (source["nodes"], source["devices_per_node"]), r
        layers, hidden, peft = MODEL[source["benchmark"]]
        assert (spec.model.num_layers, spec.model.hidden_size, tr.peft) == (layers, hidden, peft), r
        assert r["published"] == source["tokens_per_s_per_device"], r
        # recompute as the config sets it (files made before the field existed: none stated, none composed)
        assert tr.activation_checkpointing == (source.get("recompute") or "none"), r
        block = source.get("recompute_method") == "block"
        assert tr.recompute_num_layers == (source["recompute_num_layers"] if block else None), r
        # Megatron's uneven pipeline split as the config sets it (ASYM_PP_EMBED / ASYM_PP_LOSS)
        assert (par.account_for_embedding_in_pipeline_split, par.account_for_loss_in_pipeline_split) == (
            bool(source.get("account_for_embedding_in_pipeline_split")),
            bool(source.get("account_for_loss_in_pipeline_split"))), r
        # Transformer Engine's FP8 scaling as the config names it (Megatron's tensorwise and TE's Float8CurrentScaling
        # are current scaling; delayed, DelayedScaling, or none named: NeMo's and TE's default, delayed)
        if tr.precision == "fp8":
            named = source.get("fp8_recipe")
            assert tr.fp8.recipe == ("current" if named in ("tensorwise", "Float8CurrentScaling") else "delayed"), r
        # attention in FP8 where the config turns FP8_DPA on (unknown: BF16, the default)
        assert tr.fp8.attention is (source.get("fp8_attention") is True), r
        # context parallelism's exchange as the config, its yaml or its log says (unknown: the ring, the default)
        assert par.cp_comm_type == ("a2a" if source["cp"] > 1 and source.get("cp_comm_type") == "a2a" else "p2p"), r


@pytest.mark.parametrize("name", SETS)
def test_every_row_is_scored_or_listed_with_why(name):
    everything = json.loads((ROOT / "bench" / name).read_text())
    expressed, listed = load(name)
    assert len(expressed) + len(listed) == len(everything)
    assert all(why for _, why in listed)
    fp4 = [why for (_, why) in listed if why.startswith("precision fp4")]
    assert all("no spec-sheet peak" in why for why in fp4)  # FP4 counts once the table has its peak
    assert fp4 or name != "mlperf_rows_v51.json"  # v5.1's NVFP4 submissions
