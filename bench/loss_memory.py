"""The memory of torchtitan's loss, traced here: its ``cross_entropy_loss`` (the bf16 logits upcast to fp32, then
``torch.nn.functional.cross_entropy``) run forward and backward over bf16 logits of T x V, eager and under
``torch.compile``, each in a fresh process; the peak resident memory above the logits themselves, per logit
element. ``tprimat.spec.memory.logits_bytes`` uses both figures (eager: 12 bytes, the fp32 upcast, its softmax and
its gradient; compiled: the fused kernel keeps only the logits' bf16 gradient). Measured on this CPU with
inductor's CPU code; a GPU's generated kernels may keep more.

    python bench/loss_memory.py [--tokens 2048] [--vocab 128256]

Last line ``compiled_loss_bytes_per_logit=<x>``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

PROBE = """
import resource, sys, torch
mode, T, V = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def loss_fn(pred, labels):  # torchtitan.components.loss.cross_entropy_loss
    return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))

fn = torch.compile(loss_fn) if mode == "compiled" else loss_fn
labels = torch.randint(0, V, (1, T))
small = torch.randn(1, 64, V, dtype=torch.bfloat16, requires_grad=True)  # compile (and warm up) on a small shape
fn(small, labels[:, :64]).backward()
del small
logits = torch.randn(1, T, V, dtype=torch.bfloat16, requires_grad=True)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fn(logits, labels).backward()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((peak - before) * 1024 / (T * V))
"""


def bytes_per_logit(mode: str, tokens: int, vocab: int) -> float:
    proc = subprocess.run([sys.executable, "-c", PROBE, mode, str(tokens), str(vocab)], capture_output=True,
                          text=True, check=True, timeout=900)
    return float(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=128256)
    args = ap.parse_args(argv)
    figures = {mode: bytes_per_logit(mode, args.tokens, args.vocab) for mode in ("eager", "compiled")}
    for mode, value in figures.items():
        print(f"{mode}: {value:.2f} bytes per logit element above the bf16 logits ({args.tokens} x {args.vocab})")
    print(f"compiled_loss_bytes_per_logit={figures['compiled']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
