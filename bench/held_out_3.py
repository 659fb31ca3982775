"""A third held-out set: published rows never scored, committed on its own (2026-11-27) before any was scored.

They are the rows of the tables bench/projection.py cites that no projection had scored and the spec expresses:
torchtitan's CP8 at 262,144 tokens (its CP table's one row never scored; torchtitan ran Llama 3.1 8B past its
131,072-token context, so the row does too) and NeMo 24.07's three Llama 2 pre-training rows (the version of its
table the scored rows come from, 164b0097f8). Four rows, none a near-duplicate of another or of a scored row: every
other row of the cited tables is scored or cannot be expressed (bench/projection_rows.py ``NOT_EXPRESSIBLE``).
Scored by ``python bench/projection.py`` (``held_out_median_abs_error``); its first score goes to
docs/benchmarks.md, and nothing in ``tprimat/spec`` is changed for it afterwards: a change made for it would make it
a tuned-on set, and a fourth one is written.
"""

from projection_rows import COMPILE, DELAYED, FSDP, FULL, GRAND_TETON, NEMO, TITAN, llama2, megatron_layout

CP8_256K = [FSDP, FULL, COMPILE, *GRAND_TETON, "training.seq_length=262144", "parallelism.cp=8",
            "model.max_position_embeddings=262144"]


def nemo(name, gpus, gbs, layout, published, model) -> dict:
    """A row of NeMo 24.07's pre-training table: DGX-H100, FP8 (delayed scaling), micro batch 1, 4,096 tokens."""
    return dict(name=f"H100 {name} FP8, NeMo 24.07", gpu="h100", platform="nvidia", gpus=gpus, gbs=gbs, mbs=1,
                precision="fp8", layout=[*layout, "training.seq_length=4096", DELAYED], published=published, source=NEMO,
                model=model, framework="nemo")


PUBLISHED = [
    dict(name="H100 8B FP8 FSDP1 CP8 seq 256k full AC, torchtitan", gpu="h100_96gb", platform="nvidia", gpus=8, gbs=1,
         mbs=1, precision="fp8", layout=CP8_256K, published=548, source=TITAN, framework="torchtitan"),
    nemo("Llama 2 7B x8", 8, 128, megatron_layout(), 16847, llama2("Llama-2-7b-hf", 32, 4096, 11008, 32, 32)),
    nemo("Llama 2 13B PP4 VP10 x16", 16, 128, megatron_layout(1, 4, 1, 10), 8646,
         llama2("Llama-2-13b-hf", 40, 5120, 13824, 40, 40)),
    nemo("Llama 2 70B TP4 PP4 VP20 x64", 64, 128, megatron_layout(4, 4, 1, 20), 1707,
         llama2("Llama-2-70b-hf", 80, 8192, 28672, 64, 8)),
]
