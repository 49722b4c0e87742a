"""Triton acceptance kernels (imported lazily through :func:`mmspec.kernels.dispatch.triton_module`).

* greedy: an argmax kernel over the vocabulary (one program per tree node, the bandwidth-heavy part),
  then one program per row walks the whole tree in registers: which nodes their parent's argmax accepts,
  which have a fully accepted ancestry, the first deepest one, its root-first path and the bonus token.
  Parent lookups are one-hot ``[N, N]`` tiles, so a tree of up to a few hundred nodes needs no memory
  round trips.
* residual sampling: one program per row computes the mass of ``max(p - q, 0)``, then finds the token
  where its running sum first exceeds ``u * mass`` (inverse CDF), optionally writing the normalised
  residual on the way.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_NODES = 256  # a row's tree is walked in one program's registers


@triton.jit
def _argmax_kernel(x_ptr, out_ptr, V, s_r, s_v, BLOCK_V: tl.constexpr):
    r = tl.program_id(0)
    best_val = float("-inf")
    best_idx = 0
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(x_ptr + r * s_r + cols * s_v, mask=cols < V, other=float("-inf")).to(tl.float32)
        val, idx = tl.max(x, 0, return_indices=True, return_indices_tie_break_left=True)
        better = val > best_val  # strict: the first maximum wins, like torch.argmax
        best_idx = tl.where(better, start + idx, best_idx)
        best_val = tl.where(better, val, best_val)
    tl.store(out_ptr + r, best_idx)


@triton.jit
def _greedy_walk_kernel(tok_ptr, par_ptr, val_ptr, am_ptr, paths_ptr, len_ptr, bonus_ptr,
                        N, max_depth, st_b, st_n, sp_b, sp_n, sv_b, sv_n, W,
                        BLOCK_N: tl.constexpr):
    b = tl.program_id(0)
    n = tl.arange(0, BLOCK_N)
    ok = n < N
    tok = tl.load(tok_ptr + b * st_b + n * st_n, mask=ok, other=-1)
    par = tl.load(par_ptr + b * sp_b + n * sp_n, mask=ok, other=-1)
    valid = (tl.load(val_ptr + b * sv_b + n * sv_n, mask=ok, other=0) != 0) & ok
    am = tl.load(am_ptr + b * N + n, mask=ok, other=-1)
    is_root = n == 0
    # child_of[i, j]: node j is node i's parent
    child_of = par[:, None] == n[None, :]
    am_parent = tl.sum(tl.where(child_of, am[None, :], 0), 1)
    match = ((tok == am_parent) & valid) | is_root

    accepted = match
    depth = tl.zeros([BLOCK_N], tl.int32)
    for _ in range(max_depth):
        parent_ok = tl.max(tl.where(child_of, accepted.to(tl.int32)[None, :], 0), 1) > 0
        accepted = match & (parent_ok | is_root)
        parent_depth = tl.max(tl.where(child_of, depth[None, :], -1), 1)
        depth = tl.where(is_root | (par < 0), 0, parent_depth + 1)

    key = tl.where(accepted & ok, depth, -1)
    deepest = tl.max(key, 0)
    best = tl.min(tl.where(key == deepest, n, BLOCK_N), 0)  # first node at that depth
    bonus = tl.sum(tl.where(n == best, am, 0), 0)

    on_path = n == best
    for _ in range(max_depth):
        # node j is on the path if one of its children on the path names it as parent
        named = tl.max(tl.where(child_of & on_path[:, None], 1, 0), 0) > 0
        on_path = on_path | named
    tl.store(paths_ptr + b * W + depth, n.to(tl.int64), mask=on_path & ok & (depth < W))
    tl.store(len_ptr + b, (deepest + 1).to(tl.int64))
    tl.store(bonus_ptr + b, bonus.to(tl.int64))


def greedy_tree_accept(logits: torch.Tensor, tokens: torch.LongTensor, parents: torch.LongTensor,
                       valid: torch.BoolTensor, max_depth: int):
    """Same contract as :func:`mmspec.kernels.acceptance.greedy_tree_accept_reference`."""
    B, N, V = logits.shape
    if N > MAX_NODES:
        raise ValueError(f"trees of more than {MAX_NODES} nodes are walked by the torch reference")
    dev = logits.device
    argmax = torch.empty(B, N, dtype=torch.int64, device=dev)
    flat = logits.reshape(B * N, V)
    _argmax_kernel[(B * N,)](flat, argmax, V, *flat.stride(), BLOCK_V=min(4096, triton.next_power_of_2(V)))
    width = max_depth + 1
    paths = torch.zeros(B, width, dtype=torch.long, device=dev)
    lengths = torch.empty(B, dtype=torch.long, device=dev)
    bonus = torch.empty(B, dtype=torch.long, device=dev)
    valid_u8 = valid.view(torch.uint8)
    _greedy_walk_kernel[(B,)](tokens, parents, valid_u8, argmax, paths, lengths, bonus,
                              N, max_depth, *tokens.stride(), *parents.stride(), *valid_u8.stride(), width,
                              BLOCK_N=max(16, triton.next_power_of_2(N)))
    return paths, lengths, bonus


@triton.jit
def _residual_sample_kernel(p_ptr, q_ptr, u_ptr, tok_ptr, res_ptr, V,
                            sp_r, sp_v, sq_r, sq_v, sr_r, sr_v,
                            WRITE_RESIDUAL: tl.constexpr, BLOCK_V: tl.constexpr):
    r = tl.program_id(0)
    u = tl.load(u_ptr + r)
    mass = tl.zeros([BLOCK_V], u.dtype)
    p_mass = tl.zeros([BLOCK_V], u.dtype)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        p = tl.load(p_ptr + r * sp_r + cols * sp_v, mask=cols < V, other=0.0).to(u.dtype)
        q = tl.load(q_ptr + r * sq_r + cols * sq_v, mask=cols < V, other=0.0).to(u.dtype)
        mass += tl.maximum(p - q, 0.0)
        p_mass += p
    total = tl.sum(mass, 0)
    use_p = total <= 0  # p <= q everywhere: fall back to p itself
    total = tl.where(use_p, tl.sum(p_mass, 0), total)
    threshold = u * total

    running = total * 0
    found = V
    last = 0
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        p = tl.load(p_ptr + r * sp_r + cols * sp_v, mask=cols < V, other=0.0).to(u.dtype)
        q = tl.load(q_ptr + r * sq_r + cols * sq_v, mask=cols < V, other=0.0).to(u.dtype)
        w = tl.where(use_p, tl.maximum(p, 0.0), tl.maximum(p - q, 0.0))
        cdf = running + tl.cumsum(w, 0)
        hit = (cdf > threshold) & (w > 0)
        found = tl.minimum(found, tl.min(tl.where(hit, cols, V), 0))
        last = tl.maximum(last, tl.max(tl.where(w > 0, cols, 0), 0))
        running += tl.sum(w, 0)
        if WRITE_RESIDUAL:
            tl.store(res_ptr + r * sr_r + cols * sr_v, (w / total).to(res_ptr.dtype.element_ty), mask=cols < V)
    # rounding can leave u * mass at or past the last running sum: take the last token with mass
    tl.store(tok_ptr + r, tl.where(found < V, found, last).to(tl.int64))


def residual_sample(p: torch.Tensor, q: torch.Tensor, u: torch.Tensor, out_residual: torch.Tensor | None = None):
    """Same contract as :func:`mmspec.kernels.acceptance.residual_sample_reference`."""
    R, V = p.shape
    tokens = torch.empty(R, dtype=torch.long, device=p.device)
    if R == 0:
        return tokens
    u = u.to(torch.float64 if p.dtype == torch.float64 else torch.float32).contiguous()
    res = out_residual if out_residual is not None else p  # unused pointer when not writing
    _residual_sample_kernel[(R,)](p, q, u, tokens, res, V, *p.stride(), *q.stride(), *res.stride(),
                                  WRITE_RESIDUAL=out_residual is not None,
                                  BLOCK_V=min(2048, triton.next_power_of_2(V)))
    return tokens
