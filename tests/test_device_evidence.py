"""The first device run of the external frameworks (bench/evidence/h100-2026-11-26, docs/benchmarks.md): each
result tprimat wrote while the framework trained agrees, step by step, with that framework's own printed log read
back offline by ``tprimat ingest`` (Megatron-LM core_v0.16.1 and torchtitan 0.2.2 logs, as they printed them)."""

import shutil
import sys

import pytest

from tests.conftest import ROOT
from tprimat.results.result import read_result

sys.path.insert(0, str(ROOT))
from bench.gpu_frameworks import own_log_check  # noqa: E402

EVIDENCE = ROOT / "bench" / "evidence" / "h100-2026-11-26"


@pytest.mark.parametrize("framework,steps", [("megatron", 28), ("torchtitan", 28), ("native", 28)])
def test_each_device_result_agrees_with_its_frameworks_own_log(framework, steps, tmp_path):
    run_dir = tmp_path / framework
    shutil.copytree(EVIDENCE / framework, run_dir)
    result = read_result(run_dir / "result.json")
    assert result["status"] == "ok" and result["spec"]["framework"]["name"] == framework
    ok, why = own_log_check(framework, result, run_dir, "")
    assert ok and f"{steps} steps" in why, why


def test_the_megatron_run_is_the_proxy_tprimat_asked_for():
    """Megatron-LM's own argument dump (its framework.log) holds the proxy's shape: 4 layers at Llama 3.1 8B width."""
    printed = (EVIDENCE / "megatron" / "framework.log").read_text()
    for argument, value in (("num_layers", "4"), ("hidden_size", "4096"), ("ffn_hidden_size", "14336"),
                            ("seq_length", "4096"), ("global_batch_size", "4"), ("transformer_impl", "local")):
        assert any(line.split()[:1] == [argument] and line.split()[-1] == value for line in printed.splitlines()), \
            argument
