"""``tprimat preflight``: measure what this device can actually do, so MFU can be reported against it.

- Achievable dense matmul TFLOP/s per dtype (square GEMMs, best size, median of timed iterations after a
  burn-in; fp32 without TF32).
- Memory bandwidth (``memory_gb_s``): a large tensor copy, bytes read + written per second; per-operation
  overhead (``op_overhead_us``): tiny elementwise ops issued back to back; fused causal attention forward +
  backward (``attention_tflops`` at ``attention_shape``).
- With ``--ranks N`` (N > 1): all-reduce bus bandwidth over N local processes (gloo on CPU, NCCL/RCCL on
  GPUs), bus bandwidth = bytes * 2 (N - 1) / N / time, as nccl-tests reports it. Started as several ranks already
  (``srun -N2 -n2 tprimat preflight``, torchrun), it measures the all-reduce across those ranks instead: the links
  between nodes, with the rendezvous it used; rank 0 writes the file.
The result is a JSON file (``kind: tprimat_preflight``) that ``tprimat compare`` reads.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import torch

from tprimat.execute.rank import rank_env
from tprimat.measure.devices import detect

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_tflops(device: torch.device, dtype: torch.dtype, n: int, iters: int) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    times = []
    for _ in range(iters):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e12


def measure_matmul(device: torch.device, sizes: list[int], iters: int, dtypes: list[str]) -> tuple[dict, list]:
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    best, detail = {}, []
    for name in dtypes:
        for n in sizes:
            value = matmul_tflops(device, DTYPES[name], n, iters)
            detail.append({"dtype": name, "n": n, "tflops": value})
            best[name] = max(best.get(name, 0.0), value)
    return best, detail


def memory_gb_s(device: torch.device, mib: int, iters: int) -> float:
    """Copy bandwidth, bytes read + written per second (STREAM's copy), median of timed copies after a burn-in."""
    src = torch.ones(mib * 2**20 // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    for _ in range(2):
        dst.copy_(src)
    times = []
    for _ in range(iters):
        sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * src.numel() * 4 / statistics.median(times) / 1e9


def attention_tflops(device: torch.device, shape: tuple[int, int, int, int], iters: int) -> float:
    """Fused causal attention (SDPA) forward + backward in bf16 at (batch, heads, seq, head_dim): FLOPs counted
    as flash kernels do the work (causal half; backward 2.5x the forward) per second, median of timed steps."""
    batch, heads, seq, head_dim = shape
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device=device, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))

    def step() -> None:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    for _ in range(2):
        step()
    times = []
    for _ in range(iters):
        sync(device)
        t0 = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - t0)
    forward = 4.0 * batch * heads * seq * seq * head_dim / 2
    return 3.5 * forward / statistics.median(times) / 1e12


def op_overhead_us(device: torch.device, ops: int = 2000) -> float:
    """Per-operation cost of a tiny elementwise op issued back to back (dispatch, and launch on GPUs)."""
    x = torch.zeros(1, device=device)
    for _ in range(50):
        x.add_(1)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(ops):
        x.add_(1)
    sync(device)
    return (time.perf_counter() - t0) / ops * 1e6


def _allreduce_worker(rank: int, world: int, init_file: str, sizes_mib: list[int], iters: int, out: str) -> None:
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    _timed_allreduce(rank, world, device, sizes_mib, iters, out)


def _timed_allreduce(rank: int, world: int, device: torch.device, sizes_mib: list[int], iters: int, out: str) -> None:
    """Each size's all-reduce bus bandwidth over the process group already formed; rank 0 writes them to ``out``."""
    import torch.distributed as dist

    results = {}
    for mib in sizes_mib:
        x = torch.ones(mib * 2**20 // 4, dtype=torch.float32, device=device)
        dist.all_reduce(x)
        sync(device)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        sync(device)
        seconds = (time.perf_counter() - t0) / iters
        results[str(mib)] = mib * 2**20 * 2 * (world - 1) / world / seconds / 1e9
    if rank == 0:
        Path(out).write_text(json.dumps(results))
    dist.destroy_process_group()


def measure_allreduce_across(env, sizes_mib: list[int], iters: int) -> Optional[dict]:
    """The all-reduce over the ranks something else started (srun across nodes, torchrun): the links between
    them, as a training run's gradients cross them; rank 0's figures, None on the other ranks."""
    from tprimat.execute.distributed import device_type, init_process_group, rendezvous_used

    kind = "cuda" if torch.cuda.is_available() else "cpu"
    watch = init_process_group(env, device_type("nvidia" if kind == "cuda" else "cpu"))
    device = torch.device("cuda", env.local_rank) if kind == "cuda" else torch.device("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "busbw.json")
        _timed_allreduce(env.rank, env.world_size, device, sizes_mib, iters, out)
        busbw = json.loads(Path(out).read_text()) if env.rank == 0 else None  # the group is destroyed by then
    watch.stop()
    if busbw is None:
        return None
    return {"ranks": env.world_size, "backend": "nccl" if kind == "cuda" else "gloo", "launched_by": env.source,
            "rendezvous": rendezvous_used(), "busbw_gbps_by_mib": busbw, "max_busbw_gbps": max(busbw.values())}


def measure_allreduce(ranks: int, sizes_mib: list[int], iters: int) -> dict:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        init_file, out = os.path.join(tmp, "init"), os.path.join(tmp, "busbw.json")
        mp.spawn(_allreduce_worker, args=(ranks, init_file, sizes_mib, iters, out), nprocs=ranks, join=True)
        busbw = json.loads(Path(out).read_text())
    return {"ranks": ranks, "backend": "nccl" if torch.cuda.is_available() else "gloo",
            "busbw_gbps_by_mib": busbw, "max_busbw_gbps": max(busbw.values())}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def run(args: argparse.Namespace) -> int:
    hw = detect()
    device = torch.device("cuda", 0) if hw.kind != "cpu" else torch.device("cpu")
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else (
        [1024, 2048] if device.type == "cpu" else [4096, 8192])
    dtypes = args.dtypes.split(",") if args.dtypes else (["fp32", "bf16"] if device.type == "cpu"
                                                         else ["fp32", "bf16", "fp16"])
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        print(f"--dtypes {','.join(unknown)}: must be among {', '.join(DTYPES)}")
        return 2
    best, detail = measure_matmul(device, sizes, args.iters, dtypes)
    shape = [int(x) for x in args.attention.split(",")] if args.attention else (
        [4, 8, 256, 32] if device.type == "cpu" else [1, 32, 8192, 128])
    if len(shape) != 4 or min(shape) < 1:
        print(f"--attention {args.attention}: must be BATCH,HEADS,SEQ,HEAD_DIM, four positive integers")
        return 2
    record = {"kind": "tprimat_preflight", "version": 1,
              "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "host": socket.gethostname(), "platform": hw.kind, "device_name": hw.device_name,
              "device_key": hw.gpu_key, "torch": torch.__version__, "threads": torch.get_num_threads(),
              "matmul_tflops": best, "matmul_detail": detail,
              "memory_gb_s": memory_gb_s(device, 256 if device.type == "cpu" else 2048, max(args.iters, 5)),
              "op_overhead_us": op_overhead_us(device), "attention_shape": shape,
              "attention_tflops": attention_tflops(device, tuple(shape), max(args.iters, 3)), "allreduce": None}
    sizes_mib = [int(s) for s in args.allreduce_mib.split(",")]
    env = rank_env()
    if env is not None and env.world_size > 1:  # ranks started across nodes (srun) or by torchrun: their links
        record["allreduce"] = measure_allreduce_across(env, sizes_mib, args.iters)
        if env.rank != 0:
            return 0
    elif args.ranks > 1:
        record["allreduce"] = measure_allreduce(args.ranks, sizes_mib, args.iters)
    out = Path(args.out) if args.out else Path("outputs") / "preflight" / f"{slug(hw.device_name)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    for name, value in best.items():
        print(f"matmul {name}: {value:.3f} TFLOP/s ({hw.device_name})")
    print(f"memory copy: {record['memory_gb_s']:.1f} GB/s; per-operation overhead {record['op_overhead_us']:.1f} us; "
          f"attention {record['attention_tflops']:.4f} TFLOP/s at {shape}")
    if record["allreduce"]:
        print(f"all-reduce ({record['allreduce']['ranks']} ranks, {record['allreduce']['backend']}): "
              f"{record['allreduce']['max_busbw_gbps']:.2f} GB/s bus bandwidth")
    print(f"wrote {out}")
    return 0
