"""Triton KV compaction (imported lazily through :func:`mmspec.kernels.dispatch.triton_module`).

One program owns all ``L`` moved entries of one (row, head) pair for a slice of the head dimension:
it loads every source entry, waits at a barrier, then stores every destination entry. Rows, heads and
head-dimension slices never touch each other's memory, so "gather before scatter" holds without a
second buffer even when source and destination slots overlap.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_TILE = 8192  # entries x head-dim elements held by one program
MAX_ENTRIES = _TILE  # longer moves (L > MAX_ENTRIES per row) are left to the torch reference


@triton.jit
def _compact_kernel(buf_ptr, src_ptr, dst_ptr, H, L, D,
                    s_b, s_h, s_s, s_d, si_b, si_l, so_b, so_l,
                    BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    j = tl.arange(0, BLOCK_L)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    ok = (j < L)[:, None] & (d < D)[None, :]
    src = tl.load(src_ptr + b * si_b + j * si_l, mask=j < L, other=0)
    dst = tl.load(dst_ptr + b * so_b + j * so_l, mask=j < L, other=0)
    base = buf_ptr + b * s_b + h * s_h + d[None, :] * s_d
    moved = tl.load(base + src[:, None] * s_s, mask=ok)
    tl.debug_barrier()  # every read of this (row, head, slice) lands before any write
    tl.store(base + dst[:, None] * s_s, moved, mask=ok)


def compact_(buf: torch.Tensor, src: torch.LongTensor, dst: torch.LongTensor) -> None:
    """In place on one ``[B, H, S, D]`` buffer: ``buf[b, :, dst[b, j]] = buf[b, :, src[b, j]]``."""
    B, H, _, D = buf.shape
    L = src.shape[1]
    if B == 0 or L == 0:
        return
    block_l = max(2, triton.next_power_of_2(L))
    if block_l > MAX_ENTRIES:
        raise ValueError(f"compaction of {L} entries per row exceeds one program's tile ({MAX_ENTRIES})")
    block_d = max(1, min(triton.next_power_of_2(D), _TILE // block_l))
    grid = (B * H, triton.cdiv(D, block_d))
    _compact_kernel[grid](buf, src, dst, H, L, D, *buf.stride(), *src.stride(), *dst.stride(),
                          BLOCK_L=block_l, BLOCK_D=block_d)
