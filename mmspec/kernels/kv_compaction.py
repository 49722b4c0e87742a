"""KV compaction: move each row's accepted tree entries into contiguous committed slots.

Torch reference implementation (the Triton version of issue "kernels" must match its signature).
One gather and one scatter per tensor, vectorised over the batch; no per-token Python loop.
"""

from __future__ import annotations

import torch


def compact_kv_(keys: torch.Tensor, values: torch.Tensor, src: torch.LongTensor, dst: torch.LongTensor) -> None:
    """In place: ``keys[b, :, dst[b, j]] = keys[b, :, src[b, j]]`` (same for values), for all b, j.

    ``keys``/``values``: [B, H, S, D]. ``src``/``dst``: [B, L] slot indices. The gather happens before the
    scatter, so overlapping source and destination ranges are safe. Padding entries should point
    ``src == dst`` at a scratch slot.
    """
    B = keys.shape[0]
    rows = torch.arange(B, device=keys.device)[:, None].expand_as(src)
    for buf in (keys, values):
        moved = buf[rows, :, src]  # [B, L, H, D]
        buf[rows, :, dst] = moved
