"""Hardware facts: device-name detection, peaks with sources, MFU refused where it would be a guess."""

import pytest

from tests.conftest import run_inprocess
from tprimat.compose import compose
from tprimat.results.metrics import summarize
from tprimat.results.records import StepRecord
from tprimat.spec.build import build_spec
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.hardware import DEVICES, device_key_from_name
from tprimat.spec.plan import make_plan


@pytest.mark.parametrize("name,key", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA B200", "b200"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI325X", "mi325x"),
    ("AMD Instinct MI355X", "mi355x"), ("NVIDIA GeForce RTX 4090", None), ("AMD Radeon PRO W7900", None),
    ("NVIDIA H100 PCIe", None), ("NVIDIA H100 NVL", None), ("NVIDIA H200 NVL", "h200_nvl"), ("NVIDIA GB200", "gb200"),
    ("NVIDIA B300 SXM6 AC", "b300")])
def test_device_names_map_to_table_rows(name, key):
    assert device_key_from_name(name) == key


def test_every_row_has_a_source_and_dense_peaks():
    for device in DEVICES.values():
        assert device.source and device.memory_gib > 0 and device.tdp_w > 0
        if device.fp8_tflops:
            assert device.fp8_tflops == pytest.approx(2 * device.bf16_tflops, rel=0.01)  # dense, not sparse
        if device.price_per_hour_usd is not None:
            assert device.price_source


def test_detected_gpu_fills_platform_gpu():
    hw = DetectedHardware("nvidia", "NVIDIA H200", 8, 139.8, "h200")
    spec = build_spec(compose(["model=llama"]), hw)
    assert spec.platform.name == "nvidia" and spec.platform.gpu == "h200"
    plan = make_plan(spec, hw)
    assert plan.peak_tflops == 989.4 and plan.device_memory_gib == 139.8


def test_unknown_gpu_gives_null_mfu_with_a_warning(tmp_path):
    out = run_inprocess(tmp_path, ["platform=nvidia", "platform.gpu=rtx4090", "platform.devices_per_node=1",
                                   "dry_run=true"])
    assert out.status == "dry_run"
    assert out.result["plan"]["peak_tflops"] is None
    assert any("rtx4090" in w and "MFU will be null" in w for w in out.result["warnings"])
    records = [StepRecord(step=1, step_time_s=1.0, tokens=1000, loss=1.0, lr=1e-3, grad_norm=1.0)]
    assert summarize(records, 1, 1e9, out.result["plan"]["peak_tflops"])["mfu"] is None


def test_mfu_against_the_spec_peak():
    records = [StepRecord(step=i, step_time_s=2.0, tokens=8192 * 128, loss=1.0, lr=1e-3, grad_norm=1.0)
               for i in range(1, 4)]
    s = summarize(records, world_size=8, flops_per_token=51.47e9, peak_tflops=989.4)
    # by hand: 1,048,576 tokens per 2 s step over 8 devices = 65,536 tokens/s/device; x 51.47 GFLOP/token =
    # 3,373.1 TFLOP/s... per device: 65,536 x 51.47e9 = 3.3731e15 FLOP/s = 3,373.13 TFLOP/s; / 989.4 = 3.4093
    assert s["tokens_per_s_per_device"] == pytest.approx(65_536)
    assert s["tflops_per_device"] == pytest.approx(3373.1, rel=1e-4)
    assert s["mfu"] == pytest.approx(3.4093, rel=1e-4)


def test_fp8_has_no_mfu(tmp_path):
    out = run_inprocess(tmp_path, ["platform=nvidia", "platform.gpu=h100", "platform.devices_per_node=1",
                                   "training.precision=fp8", "dry_run=true"])
    assert out.result["plan"]["peak_tflops"] is None
    assert any("fp8" in w for w in out.result["warnings"])
