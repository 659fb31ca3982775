"""Seeded synthetic token data, generated on the fly (like Megatron's mock data): no download, no disk.

Every even position holds a uniformly random token and the next position a fixed, seeded permutation of
it. A model that learns the permutation reaches a loss of about ln(vocab)/2 from ln(vocab): a falling
loss is evidence of real learning, and the data is identical for every framework, rank layout and repeat.
"""

from __future__ import annotations

import torch


class SyntheticTokens:
    def __init__(self, vocab_size: int, seq_length: int, seed: int):
        self.vocab_size, self.seq_length, self.seed = vocab_size, seq_length, seed
        self.successor = torch.randperm(vocab_size, generator=torch.Generator().manual_seed(seed))

    def batch(self, step: int, micro: int, rows: int, first_row: int = 0, num_rows: int | None = None):
        """(inputs, targets) of the rows [first_row, first_row + num_rows) of micro batch ``micro`` of
        optimizer step ``step``; all ``rows`` rows of that micro batch are drawn so that every rank layout
        sees the same global batch."""
        gen = torch.Generator().manual_seed(hash((self.seed, step, micro)) & 0x7FFF_FFFF_FFFF_FFFF)
        tokens = torch.randint(self.vocab_size, (rows, self.seq_length + 1), generator=gen)
        tokens[:, 1::2] = self.successor[tokens[:, 0::2][:, : tokens[:, 1::2].shape[1]]]
        tokens = tokens[first_row: first_row + (num_rows or rows)]
        return tokens[:, :-1], tokens[:, 1:]
