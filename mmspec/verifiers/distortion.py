"""The relaxed verifier's true distortion: the exact distribution of a step's first emitted token.

LANTERN's S_m is the mass moved onto one candidate; the output is further from the target when several drafts
borrow the same neighbours (siblings, or the many values a sampled draft can take). This module computes, in
closed form, the distribution of the first token a step emits — given the target's distribution p at the root,
the root's children and how they were drafted — by enumerating the acceptance cases of
:func:`~mmspec.verifiers.acceptance.sampling_accept` exactly as it runs them:

* deterministic children (``tree.q is None``): any number, tried in order: child x is emitted with the
  probability that every earlier child was rejected times p̃(x); a rejection leaves norm(p̃ with x zeroed);
* sampled children (one, or two drawn iid / without replacement): the draws are summed over. For the last
  child, every candidate x differs from the base residual max(p − q, 0) in x and its moved neighbours only,
  so the sum costs O(V·k); two siblings cost O(V²·k) per row.

Rows whose first token has no closed form here (three or more sampled siblings, or a proposal with fewer
supported tokens than siblings) get NaN. Greedy relaxed decoding emits a point mass, so its distortion is 0
or 1 (the first token differs from the target's argmax or not).
"""

from __future__ import annotations

import torch

from ..tree import DraftTree

_CHUNK = 1 << 22  # elements of a [rows, V, k] neighbour gather held at once


def first_token_distribution(tree: DraftTree, target_probs: torch.Tensor, relax=None) -> torch.Tensor:
    """[B, V] float64: the distribution of the first token the sampling verifier emits for this tree (NaN rows
    where it has no closed form). ``relax=None`` is the lossless rule, whose answer is the target's own p."""
    B, N, V = target_probs.shape
    p0 = target_probs[:, 0].double()
    out = torch.full((B, V), float("nan"), dtype=torch.float64, device=p0.device)
    is_kid = (tree.parents == 0) & tree.valid
    is_kid[:, 0] = False
    n_kids = is_kid.sum(1)
    sampled = tree.q is not None
    one = torch.nonzero(n_kids == 1).flatten() if sampled else None
    if one is not None and one.numel():  # chains and single sampled children: batched over rows
        child = is_kid[one].long().argmax(1)
        out[one] = _last_sampled(p0[one], tree.q[one, child].double(), relax)
    for b in range(B):
        kids = torch.nonzero(is_kid[b]).flatten()
        if not kids.numel():
            out[b] = p0[b]
        elif not sampled:
            out[b] = _deterministic(p0[b], tree.tokens[b, kids], relax)
        elif kids.numel() == 2:
            q1, q2 = tree.q[b, kids[0]].double(), tree.q[b, kids[1]].double()
            out[b] = _two_sampled(p0[b], q1, q2, tree.sibling_rule == "without_replacement", relax)
    return out


def output_tv(tree: DraftTree, target_probs: torch.Tensor, relax=None, rows: int | None = None) -> torch.Tensor:
    """[B] (or [rows]: the first ``rows`` rows only): total variation between the first emitted token's
    distribution and the target's (NaN: no closed form)."""
    if rows is not None and rows < tree.batch_size:
        tree, target_probs = tree.first_rows(rows), target_probs[:rows]
    dist = first_token_distribution(tree, target_probs, relax)
    return 0.5 * (dist - target_probs[:, 0].double()).abs().sum(-1)


def greedy_output_tv(first_tokens: torch.LongTensor, logits: torch.Tensor) -> torch.Tensor:
    """[B]: greedy decoding's distortion at a step's first token: 1 where it is not the target's argmax, else 0."""
    return (first_tokens != logits[:, 0].argmax(-1)).double()


# ---------------------------------------------------------------------------------------------- cases
def _step(r: torch.Tensor, x: torch.LongTensor, q: torch.Tensor, relax):
    """One child x tried against residual r [R, V] with proposal q [R, V]: (acceptance probability [R], the
    residual after a rejection [R, V]), as sampling_accept computes them."""
    rows = torch.arange(r.shape[0], device=r.device)
    judged = r if relax is None else relax.apply(r, x)[0]
    accept = (judged[rows, x] / q[rows, x]).clamp(max=1.0)
    left = (judged - q).clamp_min(0.0)
    total = left.sum(-1, keepdim=True)
    return accept, torch.where(total > 0, left / total.clamp_min(1e-300), r)


def _deterministic(p: torch.Tensor, x: torch.LongTensor, relax) -> torch.Tensor:
    out = torch.zeros_like(p)
    alive, r = 1.0, p[None]
    for tok in x.view(-1, 1):
        a, r = _step(r, tok, torch.nn.functional.one_hot(tok, p.shape[0]).double(), relax)
        out[tok] += alive * a
        alive = alive * (1 - a)
    return out + alive * r[0]


def _last_sampled(r: torch.Tensor, q: torch.Tensor, relax) -> torch.Tensor:
    """[R, V]: the first token's distribution when a child x ~ q [R, V] is tried against r [R, V] and, if it
    is rejected, the bonus is drawn from the residual. Summed over every x in O(V·k) per row: p̃_x differs
    from r only at x and at the neighbours moved onto it."""
    R, V = r.shape
    k = relax.neighbours.shape[1] if relax is not None else 1
    step = max(1, _CHUNK // (V * k))
    return torch.cat([_last_sampled_chunk(r[i: i + step], q[i: i + step], relax) for i in range(0, R, step)])


def _last_sampled_chunk(r: torch.Tensor, q: torch.Tensor, relax) -> torch.Tensor:
    R, V = r.shape
    if relax is None:
        idx = torch.zeros(V, 1, dtype=torch.long, device=r.device)
        keep = torch.zeros(R, V, 1, dtype=torch.bool, device=r.device)
        moved = torch.zeros(R, V, dtype=r.dtype, device=r.device)
    else:  # every candidate x of every row: its neighbours [V, k] are the same in all rows
        idx, has = relax.neighbour_ids(torch.arange(V, device=r.device), r.device)
        keep, moved = relax.select(r[:, idx], has.expand(R, -1, -1), r)
    base = (r - q).clamp_min(0.0)  # max(r − q, 0): every candidate's leftover away from x and its neighbours
    px = r + moved  # p̃_x(x)
    accept = torch.where(q > 0, (px / q.clamp_min(1e-300)).clamp(max=1.0), torch.zeros_like(q))
    lx = (px - q).clamp_min(0.0)
    base_nb = base[:, idx] * keep  # [R, V, k]: base at the moved neighbours
    total = base.sum(-1, keepdim=True) - base + lx - base_nb.sum(-1)
    rejected = q * (1 - accept)
    ok = total > 1e-300
    w = torch.where(ok, rejected / total.clamp_min(1e-300), torch.zeros_like(total))
    out = q * accept  # accepted: x itself
    out = out + w.sum(-1, keepdim=True) * base
    out = out + w * (lx - base)  # at x: its own leftover instead of base(x)
    out = out.scatter_add(1, idx.reshape(1, -1).expand(R, -1), (-w[..., None] * base_nb).reshape(R, -1))  # moved: emptied
    # no leftover at all (p̃_x ≤ q everywhere): the verifier keeps the residual it had
    return out + (rejected * ~ok).sum(-1, keepdim=True) * r


def _two_sampled(p: torch.Tensor, q1: torch.Tensor, q2: torch.Tensor, without_replacement: bool, relax) -> torch.Tensor:
    V = p.shape[0]
    x1 = torch.arange(V, device=p.device)
    a1, r1 = _step(p.expand(V, V), x1, q1.expand(V, V), relax)  # row i: first child = token i
    q2s = q2.expand(V, V).clone()
    if without_replacement:
        q2s[x1, x1] = 0.0
        mass = q2s.sum(-1, keepdim=True)
        if bool(((mass <= 0).squeeze(1) & (q1 > 0)).any()):
            return torch.full_like(p, float("nan"))  # the second draw is forced off the proposal: no closed form
        q2s = q2s / mass.clamp_min(1e-300)
    second = _last_sampled(r1, q2s, relax)  # [V, V]: given token i was tried first and rejected
    live = q1 > 0  # tokens the first draw never takes carry no weight (0/0 there)
    a1 = torch.where(live, a1, torch.zeros_like(a1))
    out = (q1 * a1).double()
    return out + ((q1 * (1 - a1) * live)[:, None] * torch.where(live[:, None], second, 0.0)).sum(0)


__all__ = ["first_token_distribution", "output_tv", "greedy_output_tv"]
