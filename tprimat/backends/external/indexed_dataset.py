"""A synthetic pre-tokenised dataset in Megatron's indexed format (``.bin`` tokens + ``.idx`` index, "MMIDIDX"
version 1), for frameworks that train only from such files (Megatron-DeepSpeed has no mock data).

The tokens are uniform random ids (a benchmark measures speed, not learning; every framework of a comparison
sees random tokens), one document per ``seq_length + 1`` tokens, stored as uint16 where the vocabulary fits
(as Megatron's preprocessing does) else int32. The format is the one Megatron-DeepSpeed's
``MMapIndexedDataset`` and Megatron-Core's ``IndexedDataset`` read; a test reads it back with the latter.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPE_CODES = {np.uint16: 8, np.int32: 4}  # Megatron's dtype codes
DOCUMENTS = 1024  # the dataset cycles over them (Megatron builds as many epochs as the run needs)


def token_dtype(vocab_size: int) -> type:
    return np.uint16 if vocab_size < 65500 else np.int32  # Megatron's "best fitting" choice


def write(prefix: Path, vocab_size: int, tokens_per_document: int, documents: int = DOCUMENTS,
          seed: int = 1234) -> dict:
    """``prefix.bin`` and ``prefix.idx``; what was written (for the result and the dry run)."""
    dtype = token_dtype(vocab_size)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    with open(prefix.with_suffix(".bin"), "wb") as f:
        for _ in range(documents):  # one document at a time: memory stays one document
            f.write(rng.integers(0, vocab_size, tokens_per_document, dtype=np.int64).astype(dtype).tobytes())
    sizes = np.full(documents, tokens_per_document, dtype=np.int32)
    pointers = np.arange(documents, dtype=np.int64) * tokens_per_document * np.dtype(dtype).itemsize
    doc_idx = np.arange(documents + 1, dtype=np.int64)  # every sequence its own document
    with open(prefix.with_suffix(".idx"), "wb") as f:
        f.write(MAGIC + struct.pack("<Q", VERSION) + struct.pack("<B", DTYPE_CODES[dtype]))
        f.write(struct.pack("<Q", documents) + struct.pack("<Q", len(doc_idx)))
        f.write(sizes.tobytes() + pointers.tobytes() + doc_idx.tobytes())
    return {"prefix": str(prefix), "documents": documents, "tokens_per_document": tokens_per_document,
            "dtype": np.dtype(dtype).name, "vocab_size": vocab_size, "seed": seed, "tokens": "uniform random ids"}
