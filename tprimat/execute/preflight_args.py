"""``tprimat preflight``'s arguments, apart from the measurements (``tprimat.execute.preflight``, which imports
torch): building the ``tprimat`` parser imports no torch, so ``tprimat ingest``, ``check`` and ``compare`` start
in a fraction of a second."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ranks", type=int, default=1, help="processes for the all-reduce test (> 1 to run it)")
    parser.add_argument("--sizes", default=None, help="matmul sizes, comma-separated (default: per device)")
    parser.add_argument("--dtypes", default=None, help="comma-separated: fp32,bf16,fp16 (default: per device)")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--attention", default=None,
                        help="SDPA shape BATCH,HEADS,SEQ,HEAD_DIM (default: 4,8,256,32 on CPU, the tiny models; "
                             "1,32,8192,128 on GPUs, the 8B models)")
    parser.add_argument("--allreduce-mib", default="1,16,64", help="all-reduce message sizes in MiB")
    parser.add_argument("--out", default=None, help="output file (default: outputs/preflight/<device>.json)")
