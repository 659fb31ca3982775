"""Seeded synthetic token data, generated on the fly (like Megatron's mock data): no download, no disk.

Every even position holds a uniformly random token and the next position a fixed, seeded permutation of
it. A model that learns the permutation reaches a loss of about ln(vocab)/2 from ln(vocab): a falling
loss is evidence of real learning, and the data is identical for every framework, rank layout and repeat.
"""

from __future__ import annotations

import torch


class SyntheticTokens:
    def __init__(self, vocab_size: int, seq_length: int, seed: int, global_batch_size: int):
        self.vocab_size, self.seq_length, self.seed = vocab_size, seq_length, seed
        self.global_batch_size = global_batch_size
        self.successor = torch.randperm(vocab_size, generator=torch.Generator().manual_seed(seed))
        self._cached: tuple[int, torch.Tensor] | None = None

    def global_batch(self, step: int) -> torch.Tensor:
        """All ``global_batch_size`` sequences (+1 token for the targets) of optimizer step ``step``."""
        if self._cached is None or self._cached[0] != step:
            gen = torch.Generator().manual_seed(hash((self.seed, step)) & 0x7FFF_FFFF_FFFF_FFFF)
            tokens = torch.randint(self.vocab_size, (self.global_batch_size, self.seq_length + 1), generator=gen)
            tokens[:, 1::2] = self.successor[tokens[:, 0::2][:, : tokens[:, 1::2].shape[1]]]
            self._cached = (step, tokens)
        return self._cached[1]

    def rows(self, step: int, first_row: int, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) for rows [first_row, first_row + num_rows) of step ``step``'s global batch.

        Micro batch m of data-parallel rank r takes rows m * mbs * dp + r * mbs ...: every layout of micro
        batch size, accumulation and dp trains on the same global batch."""
        tokens = self.global_batch(step)[first_row: first_row + num_rows]
        return tokens[:, :-1], tokens[:, 1:]
