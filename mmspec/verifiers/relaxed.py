"""LANTERN / LANTERN++ relaxed acceptance for visual AR models (Jang et al., 2024; Park et al., 2025).

Visual AR targets spread probability over many similar codes, so a draft x̂ is judged together with its
*latent neighbours* A_k(x̂): the k codes nearest to it in the VQ codebook (L2). With the neighbours sorted
by distance, n_1 … n_k, and S_m = Σ_{i ≤ m} p(n_i):

* LANTERN (additive): the largest m with S_m ≤ δ, so TV(p, p̃) = S_m ≤ δ;
* LANTERN++ (multiplicative): the largest m with S_m ≤ (λ − 1)·p(x̂), so p̃(x̂) ≤ λ·p(x̂);

then p̃ = p with the mass of n_1 … n_m moved onto x̂. Acceptance uses p̃ in place of p: under greedy, x̂
is accepted iff it is the argmax of p̃; under sampling, with probability min(1, p̃(x̂)/q(x̂)), the residual
after a rejection being norm(max(p̃ − q, 0)) (for a point-mass draft: x̂ and its moved neighbours zeroed).
δ = 0 or λ = 1 moves nothing, so the rule is then exactly the lossless verifier's.

What a run reports. S_m is the mass moved onto *one* candidate: TV(p, p̃) for that candidate alone. It bounds
the output's distance from the target only for a single point-mass draft per position: different sampled
drafts (or several siblings) each borrow their neighbours' mass, so the output can be n·S_m away (the mass of
one shared neighbour counted once per draft that borrows it). The verifier returns S_m per row and step as
``moved_mass``; the output's own distortion, the exact total variation between the first emitted token's
distribution and the target's, is computed by :mod:`mmspec.verifiers.distortion`.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch

from ..tree import DraftTree
from .acceptance import AcceptResult, deepest_accepted


@torch.no_grad()
def latent_neighbours(codebook: torch.Tensor, k: int, chunk: int = 2048) -> torch.LongTensor:
    """[V, k] indices of each code's k nearest *other* codes by L2 distance, nearest first.

    Distances are computed ``chunk`` rows at a time (``chunk × V`` floats in memory), so a 16k-entry
    codebook needs 2048 × 16384 × 4 bytes = 128 MiB at a time, on whatever device ``codebook`` is on."""
    V = codebook.shape[0]
    if not 1 <= k < V:
        raise ValueError(f"k must be in [1, {V - 1}] for a codebook of {V} entries, got {k}")
    e = codebook.float()
    sq = (e * e).sum(1)
    out = torch.empty(V, k, dtype=torch.long, device=e.device)
    for s in range(0, V, chunk):
        a = e[s: s + chunk]
        d = sq[s: s + chunk, None] - 2.0 * a @ e.T + sq[None, :]
        rows = torch.arange(a.shape[0], device=e.device)
        d[rows, s + rows] = float("inf")  # not its own neighbour
        out[s: s + chunk] = d.topk(k, dim=1, largest=False).indices
    return out


def cached_neighbours(codebook: torch.Tensor, k: int, cache_dir: str | Path | None = None) -> torch.LongTensor:
    """``latent_neighbours`` computed once per codebook and k: kept in memory (the ``MEMORY_ENTRIES`` most
    recently used tables) and, with ``cache_dir``, on disk (keyed by a hash of the codebook's bytes)."""
    digest = hashlib.sha1(codebook.detach().float().cpu().numpy().tobytes()).hexdigest()[:16]
    key = (digest, k)
    with _MEMORY_LOCK:
        table = _MEMORY.get(key)
        if table is not None:
            _MEMORY.move_to_end(key)
    if table is not None:
        return table.to(codebook.device)
    path = Path(cache_dir) / f"neighbours-{digest}-k{k}.pt" if cache_dir is not None else None
    if path is not None and path.exists():
        table = torch.load(path)
    else:
        table = latent_neighbours(codebook, k).cpu()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(table, path)
    with _MEMORY_LOCK:
        _MEMORY[key] = table
        _MEMORY.move_to_end(key)
        while len(_MEMORY) > MEMORY_ENTRIES:
            _MEMORY.popitem(last=False)
    return table.to(codebook.device)


#: neighbour tables kept in memory (a 16k-code table at k = 8 is 1 MiB), least recently used dropped first
MEMORY_ENTRIES = 8
_MEMORY: OrderedDict[tuple[str, int], torch.Tensor] = OrderedDict()
_MEMORY_LOCK = threading.Lock()


@dataclass
class Relaxation:
    """LANTERN (``delta``) or LANTERN++ (``lam``) over a token-level neighbour table.

    ``neighbours``: [vocab, k] token ids (−1 = none, e.g. for non-code tokens)."""

    neighbours: torch.LongTensor
    delta: float | None = None
    lam: float | None = None

    def __post_init__(self):
        if (self.delta is None) == (self.lam is None):
            raise ValueError("give exactly one of delta (LANTERN) and lam (LANTERN++)")
        if self.delta is not None and self.delta < 0:
            raise ValueError(f"delta must be >= 0, got {self.delta}")
        if self.lam is not None and self.lam < 1:
            raise ValueError(f"lam must be >= 1, got {self.lam}")

    @classmethod
    def from_codebook(cls, codebook: torch.Tensor, vocab_size: int, lantern_k: int, code_offset: int = 0,
                      delta: float | None = None, lam: float | None = None,
                      cache_dir: str | Path | None = None) -> "Relaxation":
        """Token-level table for a model whose code ids are ``code_offset + codebook index``, over each code's
        ``lantern_k`` nearest neighbours (``**registry.resolve_bound(...)`` fits the keywords)."""
        n = codebook.shape[0]
        if code_offset < 0 or code_offset + n > vocab_size:
            raise ValueError(f"codebook of {n} codes at offset {code_offset} does not fit the target's "
                             f"vocabulary of {vocab_size} ids")
        codes = cached_neighbours(codebook, lantern_k, cache_dir)
        table = torch.full((vocab_size, lantern_k), -1, dtype=torch.long, device=codebook.device)
        table[code_offset: code_offset + n] = codes + code_offset
        return cls(table, delta, lam)

    @property
    def name(self) -> str:
        return f"lantern(δ={self.delta})" if self.delta is not None else f"lantern++(λ={self.lam})"

    def moved_neighbours(self, p: torch.Tensor, x: torch.LongTensor):
        """Which neighbours of each draft p̃ takes mass from: (neighbour ids [M, k] clamped to valid ids, kept
        [M, k] (a prefix of the sorted neighbours), S_m [M]) for p: [M, V] and draft tokens x: [M]."""
        idx, has = self.neighbour_ids(x, p.device)
        keep, moved = self.select(p.gather(1, idx), has, p.gather(1, x[:, None]).squeeze(1))
        return idx, keep, moved

    def select(self, pn: torch.Tensor, has: torch.BoolTensor, px: torch.Tensor):
        """The rule itself, for any leading shape: neighbour probabilities ``pn`` [..., k] (nearest first),
        which exist ``has`` [..., k], the draft's own ``px`` [...] -> (kept [..., k], S_m [...])."""
        pn = torch.where(has, pn, torch.zeros((), dtype=pn.dtype, device=pn.device))
        cum = pn.cumsum(-1)
        limit = torch.full_like(px, self.delta) if self.delta is not None else (self.lam - 1.0) * px
        keep = has & (cum <= limit[..., None])
        keep = keep.long().cumprod(-1).bool()  # the nearest m: a prefix of the sorted neighbours
        return keep, (pn * keep).sum(-1)

    def neighbour_ids(self, x: torch.LongTensor, device) -> tuple[torch.LongTensor, torch.BoolTensor]:
        """Neighbour ids of drafts x [...] -> ([..., k] clamped to valid ids, [..., k] which exist)."""
        table = self.neighbours.to(device)
        nb = table.index_select(0, x.reshape(-1)).view(*x.shape, table.shape[1])
        return nb.clamp(min=0), nb >= 0

    def apply(self, p: torch.Tensor, x: torch.LongTensor) -> tuple[torch.Tensor, torch.Tensor]:
        """p: [M, V] distributions, x: [M] draft tokens -> (p̃ [M, V], moved mass S_m [M])."""
        idx, keep, moved = self.moved_neighbours(p, x)
        return self.relaxed(p, x, idx, keep, moved), moved

    @staticmethod
    def relaxed(p: torch.Tensor, x: torch.LongTensor, idx: torch.LongTensor, keep: torch.BoolTensor,
                moved: torch.Tensor) -> torch.Tensor:
        """p̃ [M, V] from :meth:`moved_neighbours`' output: the kept neighbours' mass moved onto x. A draft is
        never its own neighbour, so p̃(x) = p(x) + S_m: a verifier needs the whole of p̃ only on a rejection."""
        rows = torch.arange(p.shape[0], device=p.device)
        gone = torch.zeros_like(p, dtype=torch.bool).scatter_(1, idx, keep)
        out = p.masked_fill(gone, 0.0)
        out[rows, x] = out[rows, x] + moved
        return out


def relaxed_greedy_accept(tree: DraftTree, logits: torch.Tensor, relax: Relaxation) -> AcceptResult:
    """A child is accepted iff it is the argmax of p̃ (p relaxed towards it) at its parent; deepest wins;
    the bonus is the plain argmax there. ``moved_mass`` = the largest S_m moved along the accepted path."""
    B, N, V = logits.shape
    probs = torch.softmax(logits.float(), -1)
    parents = tree.parents.clamp(min=0)
    at_parent = probs.gather(1, parents[..., None].expand(B, N, V))
    relaxed, moved = relax.apply(at_parent.reshape(B * N, V), tree.tokens.reshape(-1))
    best, paths, lengths = deepest_accepted(tree, relaxed.argmax(-1).view(B, N) == tree.tokens)
    moved = moved.view(B, N)
    moved[:, 0] = 0.0
    j = torch.arange(paths.shape[1], device=paths.device)[None, :]
    on_path = moved.gather(1, paths).masked_fill(j >= lengths[:, None], 0.0)
    bonus = logits.argmax(-1).gather(1, best[:, None]).squeeze(1)
    return AcceptResult(paths, lengths, bonus, moved_mass=on_path.max(1).values)


__all__ = ["latent_neighbours", "cached_neighbours", "Relaxation", "relaxed_greedy_accept"]
