"""A second held-out set for ``bench/projection.py``, written on 2026-11-27 and committed on its own before any of it
was scored: CPU configs of tprimat's native trainer that neither the bench's configs nor its first held-out set
contain (its published row turned out to be a scored anchor and was removed: below). It is scored once
(``python bench/projection.py --held-out-2``) and that score goes to docs/benchmarks.md beside the bench's; nothing
in ``tprimat/spec`` or ``tprimat/execute/slice.py`` is changed for it afterwards (a change that would be called a fix
for it makes it a tuned-on set, and a third one is written).

The first held-out set (``CPU_HELD_OUT``, ``HELD_OUT`` in bench/projection.py) was written after the method had been
developed against its neighbours and was scored more than once (0.18, 0.062, 0.042, one config replaced): it is a
second scored set, not a held-out one.
"""

TWO = ["platform.devices_per_node=2"]

# Configs of the measured slice, each a combination the bench never ran: FSDP with selective recompute on Qwen's
# biased QKV, GPT-2 under TP, a 1F1B pipeline at one sequence per micro batch, short sequences with many micro
# batches, and a wider, deeper Llama at 512 tokens.
CPU = [
    ["model=qwen_tiny", *TWO, "parallelism.fsdp=true", "training.activation_checkpointing=selective"],
    ["model=gpt2_tiny", *TWO, "parallelism.tp=2"],
    ["model=mistral_tiny", *TWO, "parallelism.pp=2", "training.global_batch_size=8", "training.micro_batch_size=1"],
    ["model=llama_tiny", "training.seq_length=128", "training.global_batch_size=16", "training.micro_batch_size=2"],
    ["model=llama_tiny", "model.num_layers=6", "model.hidden_size=384", "model.ffn_hidden_size=1024",
     "model.num_attention_heads=6", "model.num_kv_heads=2", "training.seq_length=512", "training.global_batch_size=4",
     "training.micro_batch_size=2"],
]

# Published: none. The one row first written here (MLPerf v5.1 HPE XD670 H200, Llama 3.1 8B FP8 CP2 x64, 11,570
# tokens/s/GPU derived) was already a scored anchor of bench/projection.py (ANCHORS), anchors.json and a recipe's
# source: not held out. It was removed after the one scoring run printed it (+41.9%, the anchor's known miss).
PUBLISHED: list = []
