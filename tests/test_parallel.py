"""Parallel training for real with 2 CPU ranks over gloo (4 for FSDP x TP): every strategy exits 0, its result
validates, losses are finite and fall, ranks agree, and in fp32 the losses equal a single process's. The strategies
run as launch.py runs them, in this process (their ranks forked from its forkserver); the mixed-precision layout runs
through ``python launch.py`` itself, as a user starts it.

Stated tolerance: relative 1e-5 on the loss and 1e-4 on the gradient norm for the first steps (fp32
reductions run in a different order across ranks).
"""

import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_inprocess, run_launch
from tprimat.results.result import read_result, validate_result

pytestmark = pytest.mark.slow  # multi-process runs, Slurm, real frameworks

STEPS = ["training.max_steps=5", "benchmark.warmup_steps=1", "training.optimizer.warmup_steps=1",
         "logging.wandb.mode=disabled", "platform=cpu"]
FP32 = [*STEPS, "training.precision=fp32"]
STRATEGIES = {
    "ddp": ["platform.devices_per_node=2"],
    "fsdp2": ["platform.devices_per_node=2", "parallelism.fsdp=true"],
    "tp": ["platform.devices_per_node=2", "parallelism.tp=2"],
    "tp_sequence_parallel": ["platform.devices_per_node=2", "parallelism.tp=2", "parallelism.sequence_parallel=true"],
    "pp_1f1b": ["platform.devices_per_node=2", "parallelism.pp=2"],
    "pp_gpipe": ["platform.devices_per_node=2", "parallelism.pp=2", "parallelism.pp_schedule=gpipe"],
    "fsdp_x_tp": ["platform.devices_per_node=4", "parallelism.tp=2", "parallelism.fsdp=true"],
}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = run_inprocess(tmp_path_factory.mktemp("single"), FP32)
    assert out.status == "ok"
    return out.result


def launched(tmp_path, overrides):
    proc = run_launch(tmp_path, *overrides)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = read_result(tmp_path / "result.json")
    assert validate_result(result) == [] and result["status"] == "ok"
    return result, proc


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_strategy_matches_a_single_process(tmp_path, single, name, capsys):
    out = run_inprocess(tmp_path, [*FP32, *STRATEGIES[name]])
    assert out.status == "ok", out.result["error"]
    result = out.result
    losses = [s["loss"] for s in result["steps"]]
    assert losses == pytest.approx([s["loss"] for s in single["steps"]], rel=1e-5)
    assert [s["grad_norm"] for s in result["steps"]] == pytest.approx(
        [s["grad_norm"] for s in single["steps"]], rel=1e-4)
    assert losses[-1] < losses[0]
    ranks = result["ranks"]
    assert ranks["world_size"] == result["plan"]["world_size"] == len(ranks["per_rank"])
    assert ranks["loss_max_abs_diff"] < 1e-6  # every rank reported the same global loss
    assert "[rank 0]" in capsys.readouterr().out  # each rank's output, streamed with its prefix
    # Step time is the slowest rank's: each step's time is the maximum over ranks, so its median is at least every
    # rank's own median (it would not be if the result reported rank 0's times), and the spread is their ratio.
    medians = [r["step_time_s_median"] for r in ranks["per_rank"]]
    assert result["summary"]["step_time_s"]["median"] >= max(medians) * (1 - 1e-9)
    assert ranks["slowest_rank"] == medians.index(max(medians))
    assert ranks["spread"] == pytest.approx(max(medians) / min(medians) - 1)


def test_mixed_precision_fsdp_tp_sequence_parallel_with_recompute(tmp_path):
    # bf16 explicitly (the CPU's own best may be fp32); short sequences keep emulated bf16 matmul affordable
    result, proc = launched(tmp_path, [*STEPS, "platform.devices_per_node=4", "parallelism.tp=2", "parallelism.fsdp=true",
                                       "parallelism.sequence_parallel=true", "training.activation_checkpointing=full",
                                       "training.precision=bf16", "training.seq_length=64"])
    assert "[rank 0]" in proc.stdout
    losses = [s["loss"] for s in result["steps"]]
    assert all(loss == loss for loss in losses) and losses[-1] < losses[0]
    assert result["plan"]["dp"] == 2 and result["plan"]["tp"] == 2


def test_under_torchrun_ranks_initialise_from_the_environment(tmp_path):
    """torchrun starts the ranks; tprimat must not launch again, and only rank 0 writes the result."""
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0",
                           str(ROOT / "launch.py"), f"hydra.run.dir={tmp_path}", *STEPS, "platform.devices_per_node=2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "GLOO_SOCKET_IFNAME": "lo"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "launching 2 local ranks" not in proc.stdout + proc.stderr
    result = read_result(tmp_path / "result.json")
    assert result["status"] == "ok" and result["ranks"]["world_size"] == 2
    assert result["environment"]["env"]["WORLD_SIZE"] == "2"


def test_world_size_mismatch_with_torchrun_is_invalid(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    out = run_inprocess(tmp_path, [*STEPS, "platform.devices_per_node=2"])
    assert out.status == "invalid" and "torchrun started 3 ranks" in out.result["error"]


def test_multi_node_needs_an_external_launcher(tmp_path):
    out = run_inprocess(tmp_path, [*STEPS, "platform.nodes=2"])
    assert out.status == "invalid" and "torchrun or Slurm" in out.result["error"]


@pytest.mark.parametrize("nodelist, host", [("localhost", "localhost"), ("node[07-09,12],gpu3", "node07"),
                                            ("gpu-a,gpu-b", "gpu-a"), ("rack1-n[3]", "rack1-n3"),
                                            ("dgx[001-128]", "dgx001")])
def test_slurm_rendezvous_on_the_first_node(nodelist, host):
    from tprimat.execute.distributed import slurm_rendezvous

    env = slurm_rendezvous({"SLURM_JOB_NODELIST": nodelist, "SLURM_JOB_ID": "123456"})
    assert env == {"MASTER_ADDR": host, "MASTER_PORT": str(20000 + 123456 % 20000)}


@pytest.mark.parametrize("value, threads", [("4", 4), ("4,2", 4), (" 2 ", 2), ("0", None), ("", None), ("many", None)])
def test_a_forked_rank_takes_its_threads_from_omp_num_threads_as_openmp_reads_it(value, threads):
    """OpenMP reads OMP_NUM_THREADS as a count, or a list of counts per nesting level (the first is the outer
    level's); a value that gives no count leaves torch's own."""
    from tprimat.execute.spawn import threads_of

    assert threads_of(value) == threads
