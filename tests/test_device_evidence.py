"""The first device run of the frameworks (bench/evidence/h100-2026-11-26, docs/benchmarks.md), checked again from
its files: each result tprimat wrote while the framework trained is read back against the framework's printed log
by the bench's own check. For Megatron-LM and torchtitan that is the live stream parser against ``tprimat ingest``
over the same log (a regression test of the parsers on real core_v0.16.1 and 0.2.2 logs, not an independent
measurement); for native and DeepSpeed tprimat's own log; for the Trainer its own printed losses, the one
independent source. Megatron-LM's own printed TFLOP/s is set against tprimat's FLOPs convention."""

import shutil
import sys

import pytest

from tests.conftest import ROOT
from tprimat.results.result import read_result

sys.path.insert(0, str(ROOT))
from bench.gpu_frameworks import own_log_check  # noqa: E402

EVIDENCE = ROOT / "bench" / "evidence" / "h100-2026-11-26"


@pytest.mark.parametrize("framework,expect", [("megatron", "28 steps"), ("torchtitan", "28 steps"),
                                              ("native", "28 steps"), ("deepspeed", "28 steps"),
                                              ("transformers", "30 of 30 steps")])
def test_each_device_result_agrees_with_its_frameworks_own_log(framework, expect, tmp_path):
    run_dir = tmp_path / framework
    shutil.copytree(EVIDENCE / framework, run_dir)
    result = read_result(run_dir / "result.json")
    assert result["status"] == "ok" and result["spec"]["framework"]["name"] == framework
    console = (run_dir / "console.log").read_text() if (run_dir / "console.log").exists() else ""
    ok, why = own_log_check(framework, result, run_dir, console)
    assert ok and expect in why, why


def test_megatrons_own_tflops_agree_with_tprimats_flops_convention():
    """Megatron-LM prints its own TFLOP/s per GPU each iteration (its own FLOPs formula); tprimat's figure for the
    same run, from its formula and the measured step times, is within 1% of the median of Megatron's."""
    result = read_result(EVIDENCE / "megatron" / "result.json")
    printed = result["summary"]["reported"]["tflops_per_gpu"]
    assert abs(result["summary"]["tflops_per_device"] / printed - 1) < 0.01, (result["summary"]["tflops_per_device"],
                                                                               printed)


def test_the_megatron_run_is_the_proxy_tprimat_asked_for():
    """Megatron-LM's own argument dump (its framework.log) holds the proxy's shape: 4 layers at Llama 3.1 8B width."""
    printed = (EVIDENCE / "megatron" / "framework.log").read_text()
    for argument, value in (("num_layers", "4"), ("hidden_size", "4096"), ("ffn_hidden_size", "14336"),
                            ("seq_length", "4096"), ("global_batch_size", "4"), ("transformer_impl", "local")):
        assert any(line.split()[:1] == [argument] and line.split()[-1] == value for line in printed.splitlines()), \
            argument
