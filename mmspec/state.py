"""What the decoding loop knows about each row, shared with drafters."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .verifiers.logits import SamplingConfig


@dataclass
class DecodeState:
    """Token buffer of the whole batch.

    Row ``b`` holds ``tokens[b, :lengths[b]]``: the left-padded prompt (``starts[b]`` padding slots),
    then every generated token. The last one is the *root* of the next draft tree: it is known but not
    yet in the target's KV cache.
    """

    tokens: torch.LongTensor  # [B, capacity]
    lengths: torch.LongTensor  # [B]
    starts: torch.LongTensor  # [B]
    prompt_length: int
    active: torch.BoolTensor  # [B] rows still generating
    sampling: SamplingConfig
    generator: torch.Generator | None = None

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def roots(self) -> torch.LongTensor:
        return self.tokens.gather(1, (self.lengths - 1)[:, None]).squeeze(1)

    def row(self, b: int) -> torch.LongTensor:
        """Real tokens of one row (no padding)."""
        return self.tokens[b, int(self.starts[b]): int(self.lengths[b])]

    def append(self, new_tokens: torch.LongTensor, counts: torch.LongTensor) -> None:
        """Append ``new_tokens[b, :counts[b]]`` to each row (one scatter; the buffer's last column is
        scratch for the padded entries and never part of a row)."""
        W = new_tokens.shape[1]
        j = torch.arange(W, device=new_tokens.device)[None, :]
        scratch = self.tokens.shape[1] - 1
        idx = torch.where(j < counts[:, None], self.lengths[:, None] + j, scratch)
        self.tokens.scatter_(1, idx, new_tokens)
        self.lengths = self.lengths + counts
