"""Fused acceptance steps, batched over rows: torch references and their Triton dispatch.

* :func:`greedy_tree_accept`: the greedy rule over a whole tree (a child is accepted iff it is the
  target's argmax at its parent; the first deepest node with a fully accepted ancestry wins; its argmax is
  the bonus token). On CUDA the argmax and the tree walk are two kernel launches instead of one torch op
  per tree level plus a sort.
* :func:`residual_sample`: the rejection step of speculative sampling, a draw from
  ``norm(max(p - q, 0))`` by inverse CDF at a given uniform ``u`` (so both versions pick the same token
  for the same ``u``, up to summation order at a CDF boundary).
"""

from __future__ import annotations

import torch

from ..tree import ancestor_mask
from .dispatch import backend_for, triton_module


def greedy_tree_accept_reference(logits: torch.Tensor, tokens: torch.LongTensor, parents: torch.LongTensor,
                                 valid: torch.BoolTensor, max_depth: int):
    """``logits`` [B, N, V] at every node, a DraftTree's ``tokens``/``parents``/``valid`` [B, N] and its
    ``max_depth`` -> ``(paths [B, max_depth + 1], path_lengths [B], bonus [B])``; ``paths`` lists node
    indices root first and is 0 past each row's length (the layout of ``AcceptResult``)."""
    B, N, _ = logits.shape
    argmax = logits.argmax(-1)
    up = parents.clamp(min=0)
    match = (tokens == argmax.gather(1, up)) & valid
    match[:, 0] = True
    accepted = match.clone()
    for _ in range(max_depth):
        accepted = match & accepted.gather(1, up)
    anc = ancestor_mask(parents)
    depth = anc.sum(-1) - 1
    best = torch.where(accepted, depth, -1).argmax(1)
    rows = torch.arange(B, device=logits.device)
    width = max_depth + 1
    on_path = anc[rows, best]  # [B, N]
    slot = torch.where(on_path, depth, width)
    paths = torch.zeros(B, width + 1, dtype=torch.long, device=logits.device)
    paths.scatter_(1, slot, torch.arange(N, device=logits.device).expand(B, N))
    return paths[:, :width], depth[rows, best] + 1, argmax[rows, best]


def greedy_tree_accept(logits: torch.Tensor, tokens: torch.LongTensor, parents: torch.LongTensor,
                       valid: torch.BoolTensor, max_depth: int):
    """:func:`greedy_tree_accept_reference`'s contract, run by Triton on CUDA (trees of up to
    ``MAX_NODES`` nodes)."""
    if backend_for(logits, tokens, parents, valid) == "triton":
        kernels = triton_module("triton_acceptance")
        if tokens.shape[1] <= kernels.MAX_NODES:
            return kernels.greedy_tree_accept(logits, tokens, parents, valid, max_depth)
    return greedy_tree_accept_reference(logits, tokens, parents, valid, max_depth)


def residual_sample_reference(p: torch.Tensor, q: torch.Tensor, u: torch.Tensor,
                              out_residual: torch.Tensor | None = None) -> torch.LongTensor:
    """``p``, ``q`` [R, V] probabilities, ``u`` [R] uniforms in [0, 1) -> [R] tokens drawn from
    ``norm(max(p - q, 0))`` (from ``p`` itself where ``p <= q`` everywhere): the first token whose
    running mass exceeds ``u`` times the total. ``out_residual`` ([R, V], optional) receives the
    normalised residual. Sums run in float64 for float64 inputs, float32 otherwise."""
    acc = torch.float64 if p.dtype == torch.float64 else torch.float32
    p, q = p.to(acc), q.to(acc)
    w = (p - q).clamp_min(0.0)
    empty = w.sum(-1, keepdim=True) <= 0
    w = torch.where(empty, p.clamp_min(0.0), w)
    total = w.sum(-1, keepdim=True)
    if out_residual is not None:
        out_residual.copy_(w / total)
    cdf = w.cumsum(-1)
    hit = (cdf > u.to(acc)[:, None] * total) & (w > 0)
    V = p.shape[-1]
    cols = torch.arange(V, device=p.device)
    first = torch.where(hit, cols, V).min(-1).values
    last = torch.where(w > 0, cols, 0).max(-1).values
    return torch.where(first < V, first, last)


def residual_sample(p: torch.Tensor, q: torch.Tensor, u: torch.Tensor,
                    out_residual: torch.Tensor | None = None) -> torch.LongTensor:
    """:func:`residual_sample_reference`'s contract, run by Triton on CUDA."""
    if backend_for(p, q, u) == "triton":
        return triton_module("triton_acceptance").residual_sample(p, q, u, out_residual)
    return residual_sample_reference(p, q, u, out_residual)
