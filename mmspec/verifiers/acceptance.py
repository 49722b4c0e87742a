"""Acceptance rules of the shared tree verifier (docs/design.md, "Tree verifier").

* ``greedy_accept``: a child is accepted iff it is the target's argmax at its parent; the deepest
  accepted node wins, and the target's argmax there is the bonus token. Bit-exact with greedy decoding.
* ``sampling_accept``: lossless multi-draft speculative sampling (SpecInfer / RSD). At a node, try the
  children in order; accept child x_i with probability min(1, p_i(x_i) / q_i(x_i)); on rejection
  p_{i+1} = norm(max(p_i - q_i, 0)). If all fail, the bonus is drawn from the last residual. A chain is
  the one-child case: min(1, p/q) with residual norm(max(p - q, 0)) (Leviathan et al. 2023, Alg. 1).
  Deterministic children use q_i = point mass; siblings drawn without replacement use q_i = q with the
  already drawn siblings removed and renormalised.

Both rules are vectorised over the batch; the only Python loops run over tree depth and sibling rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..kernels.acceptance import greedy_tree_accept
from ..kernels.dispatch import backend_for
from ..tree import DraftTree


@dataclass
class AcceptResult:
    paths: torch.LongTensor  # [B, D+1] node indices root -> last accepted node (padded with 0)
    path_lengths: torch.LongTensor  # [B] nodes on the path including the root (= accepted drafts + 1)
    bonus: torch.LongTensor  # [B] the token the target emits after the path
    # relaxed acceptance only: [B] the largest mass S_m moved onto one candidate (per candidate, not a bound on
    # the output), and [B] the exact TV of the first emitted token's distribution from the target's (NaN where
    # it has no closed form here; mmspec.verifiers.distortion)
    moved_mass: torch.Tensor | None = None
    output_tv: torch.Tensor | None = None

    @property
    def num_accepted(self) -> torch.LongTensor:
        """Accepted draft tokens per row (root excluded)."""
        return self.path_lengths - 1

    def emitted_tokens(self, tree: DraftTree) -> tuple[torch.LongTensor, torch.LongTensor]:
        """New tokens per row (accepted drafts then the bonus), [B, D+1], and their counts [B]."""
        drafts = tree.tokens.gather(1, self.paths)[:, 1:]
        B, D = drafts.shape
        out = torch.cat([drafts, drafts.new_zeros(B, 1)], dim=1)
        out.scatter_(1, self.num_accepted.view(B, 1), self.bonus.view(B, 1))
        return out, self.path_lengths


def _path_to(tree: DraftTree, node: torch.LongTensor) -> tuple[torch.LongTensor, torch.LongTensor]:
    """Node indices from the root to ``node`` per row (ascending = root first), padded with 0."""
    anc = tree.ancestor_mask[torch.arange(tree.batch_size, device=node.device), node]  # [B, N]
    N = tree.num_nodes
    idx = torch.arange(N, device=node.device).expand_as(anc)
    ordered = torch.sort(torch.where(anc, idx, N), dim=1).values
    length = anc.sum(1)
    width = tree.max_depth + 1
    paths = ordered[:, :width]
    return torch.where(paths == N, 0, paths), length


def greedy_accept(tree: DraftTree, logits: torch.Tensor) -> AcceptResult:
    """logits: [B, N, V] target logits at every node."""
    if backend_for(logits) == "triton":
        # fused: argmax and the whole tree walk in two kernel launches (mmspec.kernels.acceptance)
        depth = tree.num_nodes - 1 if tree.is_chain else tree.max_depth
        return AcceptResult(*greedy_tree_accept(logits, tree.tokens, tree.parents, tree.valid, depth))
    argmax = logits.argmax(-1)  # [B, N]
    if tree.is_chain:
        # chain fast path: the accepted prefix is the run of drafts equal to the previous node's argmax
        B, N = argmax.shape
        match = (tree.tokens[:, 1:] == argmax[:, :-1]) & tree.valid[:, 1:]
        n_acc = match.long().cumprod(1).sum(1)
        paths = torch.arange(N, device=argmax.device).expand(B, N)
        bonus = argmax.gather(1, n_acc[:, None]).squeeze(1)
        return AcceptResult(paths, n_acc + 1, bonus)
    match = tree.tokens == argmax.gather(1, tree.parents.clamp(min=0))
    best, paths, lengths = deepest_accepted(tree, match)
    bonus = argmax.gather(1, best[:, None]).squeeze(1)
    return AcceptResult(paths, lengths, bonus)


def deepest_accepted(tree: DraftTree, match: torch.BoolTensor):
    """Given which nodes their parent accepts (``match`` [B, N]), the first deepest node whose whole
    ancestry is accepted: (node [B], root-first path [B, D+1], path lengths [B])."""
    parents = tree.parents.clamp(min=0)
    match = match & tree.valid
    match[:, 0] = True
    accepted = match.clone()
    for _ in range(tree.max_depth):
        accepted = match & accepted.gather(1, parents)
    best = torch.where(accepted, tree.depth, -1).argmax(1)
    paths, lengths = _path_to(tree, best)
    return best, paths, lengths


def sampling_accept(tree: DraftTree, target_probs: torch.Tensor,
                    generator: torch.Generator | None = None, relax=None) -> AcceptResult:
    """target_probs: [B, N, V] warped target distribution at every node. ``relax`` (a
    :class:`~mmspec.verifiers.relaxed.Relaxation`) judges each child against p̃, the current distribution
    relaxed towards it (LANTERN); None is the lossless rule."""
    B, N, V = target_probs.shape
    dev = target_probs.device
    rows = torch.arange(B, device=dev)
    cur = torch.zeros(B, dtype=torch.long, device=dev)
    walking = torch.ones(B, dtype=torch.bool, device=dev)
    residual = target_probs[:, 0].double()
    width = tree.max_depth + 1
    paths = torch.zeros(B, width, dtype=torch.long, device=dev)
    lengths = torch.ones(B, dtype=torch.long, device=dev)
    without_replacement = tree.sibling_rule == "without_replacement"
    moved_mass = torch.zeros(B, dtype=torch.float64, device=dev)

    for level in range(1, width):
        children = (tree.parents == cur[:, None]) & tree.valid & walking[:, None]
        children[:, 0] = False
        rank = children.long().cumsum(1) - 1
        n_children = children.sum(1)
        moved = torch.zeros(B, dtype=torch.bool, device=dev)
        drawn = torch.zeros(B, V, dtype=torch.bool, device=dev) if without_replacement else None
        for i in range(int(n_children.max()) if n_children.numel() else 0):
            trying = walking & ~moved & (n_children > i)
            if not trying.any():
                break
            child = (children & (rank == i)).long().argmax(1)
            x = tree.tokens[rows, child]
            if tree.q is None:
                q = torch.nn.functional.one_hot(x, V).double()
            else:
                q = tree.q[rows, child].double()
                if without_replacement:
                    q = q.masked_fill(drawn, 0.0)
                    q = q / q.sum(-1, keepdim=True).clamp_min(1e-300)
                # A child its own proposal gives no mass (e.g. more siblings than the draft support)
                # was chosen deterministically given the earlier draws: verify it as a point mass.
                point = q[rows, x] <= 0
                if point.any():
                    q = torch.where(point[:, None], torch.nn.functional.one_hot(x, V).double(), q)
            judged = residual
            if relax is not None:
                judged, shifted = relax.apply(residual, x)
                moved_mass = torch.where(trying, torch.maximum(moved_mass, shifted), moved_mass)
            p_x = judged[rows, x]
            ratio = p_x / q[rows, x]
            u = torch.rand(B, generator=generator, device=dev, dtype=torch.float64)
            accept = trying & (u < ratio.clamp(max=1.0))
            reject = trying & ~accept
            if reject.any():
                leftover = (judged - q).clamp_min(0.0)
                total = leftover.sum(-1, keepdim=True)
                leftover = torch.where(total > 0, leftover / total.clamp_min(1e-300), residual)
                residual = torch.where(reject[:, None], leftover, residual)
            if accept.any():
                residual = torch.where(accept[:, None], target_probs[rows, child].double(), residual)
                cur = torch.where(accept, child, cur)
                paths[:, level] = torch.where(accept, child, paths[:, level])
                lengths = lengths + accept.long()
                moved |= accept
            if drawn is not None:
                drawn[rows[trying], x[trying]] = True
        walking &= moved
        if not walking.any():
            break

    bonus = torch.multinomial(residual.float().clamp_min(0), 1, generator=generator).squeeze(1)
    return AcceptResult(paths, lengths, bonus, moved_mass=moved_mass if relax is not None else None)
