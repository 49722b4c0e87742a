"""Triton tree attention (imported lazily through :func:`mmspec.kernels.dispatch.triton_module`).

One program handles one (row, KV head) pair and a block of query rows, where the query rows are the
(query head of the group, tree node) pairs sharing that KV head: with GQA every K/V tile is loaded once
for the whole group instead of once per query head. Keys are walked in tiles with an online softmax
(flash-attention style). The visibility mask is read per tile, and a tile nobody in the block may see
(left padding, stale slots of shorter rows, other branches' pending nodes) is skipped without loading
its K/V, so a ragged batch costs what its visible entries cost.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634


@triton.jit
def _tree_attention_kernel(
    q_ptr, k_ptr, v_ptr, m_ptr, o_ptr, qk_scale,
    sq_b, sq_h, sq_t, sq_d,
    sk_b, sk_h, sk_s, sk_d,
    sv_b, sv_h, sv_s, sv_d,
    sm_b, sm_h, sm_t, sm_s,
    so_b, so_h, so_t, so_d,
    num_kv_heads, T, S, D, DV,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, PRECISION: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // num_kv_heads
    kvh = pid_bh % num_kv_heads

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (head in group, node) pairs
    row_ok = rows < GROUP * T
    g = rows // T
    t = rows % T
    h = kvh * GROUP + g
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)

    q = tl.load(q_ptr + b * sq_b + h[:, None] * sq_h + t[:, None] * sq_t + d[None, :] * sq_d,
                mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)

    mask_rows = m_ptr + b * sm_b + h[:, None] * sm_h + t[:, None] * sm_t
    for start in range(0, S, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < S
        seen = tl.load(mask_rows + cols[None, :] * sm_s, mask=row_ok[:, None] & col_ok[None, :], other=0) != 0
        if tl.max(seen.to(tl.int32)) > 0:
            k = tl.load(k_ptr + b * sk_b + kvh * sk_h + cols[:, None] * sk_s + d[None, :] * sk_d,
                        mask=col_ok[:, None] & (d[None, :] < D), other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
            s = tl.where(seen, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that have seen nothing yet
            p = tl.exp2(s - m_safe[:, None])
            alpha = tl.exp2(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_ptr + b * sv_b + kvh * sv_h + cols[:, None] * sv_s + dv[None, :] * sv_d,
                        mask=col_ok[:, None] & (dv[None, :] < DV), other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m_i = m_new

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # a row that sees nothing gives 0, like SDPA
    tl.store(o_ptr + b * so_b + h[:, None] * so_h + t[:, None] * so_t + dv[None, :] * so_d,
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & (dv[None, :] < DV))


def _broadcast_strides(x: torch.Tensor) -> list[int]:
    return [0 if size == 1 else stride for size, stride in zip(x.shape, x.stride())]


def tree_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.BoolTensor,
                   scale: float | None = None) -> torch.Tensor:
    """Same contract as :func:`mmspec.kernels.tree_attention.tree_attention_reference`. The result is a
    ``[B, H, T, Dv]`` view of a ``[B, T, H, Dv]`` buffer, the layout HF attention functions return."""
    B, H, T, D = q.shape
    Hkv, S, DV = k.shape[1], k.shape[2], v.shape[-1]
    group = H // Hkv
    scale = D ** -0.5 if scale is None else scale
    out = torch.empty(B, T, H, DV, dtype=q.dtype, device=q.device).transpose(1, 2)
    if T == 0 or B == 0:
        return out
    mask_u8 = mask.view(torch.uint8)
    block_m = min(64, max(16, triton.next_power_of_2(group * T)))
    block_n = 64
    grid = (triton.cdiv(group * T, block_m), B * Hkv)
    _tree_attention_kernel[grid](
        q, k, v, mask_u8, out, float(scale) * _LOG2E,
        *q.stride(), *k.stride(), *v.stride(), *_broadcast_strides(mask_u8), *out.stride(),
        Hkv, T, S, D, DV,
        GROUP=group, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_D=max(16, triton.next_power_of_2(D)), BLOCK_DV=max(16, triton.next_power_of_2(DV)),
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )
    return out
