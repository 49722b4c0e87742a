"""Acceptance rules of the shared tree verifier (docs/design.md, "Tree verifier").

* ``greedy_accept``: a child is accepted iff it is the target's argmax at its parent; the deepest
  accepted node wins, and the target's argmax there is the bonus token. Bit-exact with greedy decoding.
* ``sampling_accept``: lossless multi-draft speculative sampling (SpecInfer / RSD). At a node, try the
  children in order; accept child x_i with probability min(1, p_i(x_i) / q_i(x_i)); on rejection
  p_{i+1} = norm(max(p_i - q_i, 0)). If all fail, the bonus is drawn from the last residual. A chain is
  the one-child case: min(1, p/q) with residual norm(max(p - q, 0)) (Leviathan et al. 2023, Alg. 1).
  Deterministic children use q_i = point mass; siblings drawn without replacement use q_i = q with the
  already drawn siblings removed and renormalised.

Both rules are vectorised over the batch; the only Python loops run over tree depth and sibling rank, except the
greedy rule on a CPU tree built from lists (a DDTree's), which walks those lists (cheaper than any tensor op there).
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

    @classmethod
    def root_kept(cls, bonus: torch.LongTensor) -> "AcceptResult":
        """A one-node tree's result (a plain step): each row keeps its root and emits ``bonus`` after it."""
        zeros = torch.zeros(bonus.shape[0], 1, dtype=torch.long, device=bonus.device)
        return cls(zeros, zeros[:, 0] + 1, bonus)

    @property
    def num_accepted(self) -> torch.LongTensor:
        """Accepted draft tokens per row (root excluded)."""
        return self.path_lengths - 1

    def emitted_tokens(self, tree: DraftTree) -> tuple[torch.LongTensor, torch.LongTensor]:
        """New tokens per row (accepted drafts then the bonus), [B, D+1], and their counts [B]."""
        if self.paths.shape[1] == 1:  # no drafts on any path (a plain step): the bonus alone
            return self.bonus.view(-1, 1), self.path_lengths
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
    if tree.is_root_only:  # a plain step: the root is kept and the target's token follows it
        return AcceptResult.root_kept(logits[:, 0].argmax(-1))
    if backend_for(logits) == "triton":
        # fused: argmax and the whole tree walk in two kernel launches (mmspec.kernels.acceptance)
        depth = tree.num_nodes - 1 if tree.is_chain else tree.max_depth
        return AcceptResult(*greedy_tree_accept(logits, tree.tokens, tree.parents, tree.valid, depth))
    argmax = logits.argmax(-1)  # [B, N]
    if tree.row_lists is not None and argmax.device.type == "cpu":
        return _walk_rows(tree, argmax.tolist(), argmax.device)
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


def _walk_rows(tree: DraftTree, argmax: list[list[int]], device) -> AcceptResult:
    """:func:`greedy_accept` on a tree built from lists (:meth:`DraftTree.from_rows`, which keeps them), walked in
    Python: the same first deepest node whose ancestry the target accepts, its root-first path (padded with 0 to
    the tree's depth + 1) and the bonus. A 17-node tree's walk is a few microseconds, where the tensor ops over
    [B, N, N] cost a CPU step about 0.2 ms."""
    tokens, parents, sizes = tree.row_lists
    width = tree.max_depth + 1
    paths, lengths, bonus = [], [], []
    for tok, par, n, best_of in zip(tokens, parents, sizes, argmax):
        depth = [0] + [-1] * (n - 1)  # -1: not accepted
        best = 0
        for i in range(1, n):
            p = par[i]
            if depth[p] >= 0 and tok[i] == best_of[p]:
                depth[i] = depth[p] + 1
                if depth[i] > depth[best]:
                    best = i
        path, at = [], best
        while at >= 0:
            path.append(at)
            at = par[at]
        path.reverse()
        paths.append(path + [0] * (width - len(path)))
        lengths.append(len(path))
        bonus.append(best_of[best])
    return AcceptResult(torch.tensor(paths, dtype=torch.long, device=device),
                        torch.tensor(lengths, dtype=torch.long, device=device),
                        torch.tensor(bonus, dtype=torch.long, device=device))


def deepest_accepted(tree: DraftTree, match: torch.BoolTensor):
    """Given which nodes their parent accepts (``match`` [B, N]), the first deepest node whose whole
    ancestry is accepted: (node [B], root-first path [B, D+1], path lengths [B])."""
    match = match & tree.valid
    match[:, 0] = True
    # a node is accepted iff it and every ancestor match: one masked reduction over the ancestor mask (a gather
    # per level of the tree cost a deep tree's step more)
    accepted = ~(tree.ancestor_mask & ~match[:, None, :]).any(-1)
    best = torch.where(accepted, tree.depth, -1).argmax(1)
    paths, lengths = _path_to(tree, best)
    return best, paths, lengths


def sample_rows(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.LongTensor:
    """One index per row of ``probs`` [B, V] (non-negative, not necessarily normalised), by inverse CDF: the first
    index whose cumulative mass exceeds u · total. ``torch.multinomial`` does the same draw after validating its
    input, which at batch 1 on a CPU costs more than the rest of a tree's acceptance step."""
    cdf = probs.double().clamp_min(0).cumsum(-1)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=torch.float64)
    total = cdf[:, -1:]
    last = (cdf < total).sum(-1)  # the last index with mass: u · total may round up to the total itself
    return torch.minimum(torch.searchsorted(cdf, u * total, right=True).squeeze(1), last)


def sampling_accept(tree: DraftTree, target_probs: torch.Tensor,
                    generator: torch.Generator | None = None, relax=None) -> AcceptResult:
    """target_probs: [B, N, V] warped target distribution at every node. ``relax`` (a
    :class:`~mmspec.verifiers.relaxed.Relaxation`) judges each child against p̃, the current distribution
    relaxed towards it (LANTERN); None is the lossless rule.

    A node's first child is judged against the target's distribution at the node itself (nothing has been
    rejected there yet), so every first child's test is made at once, over the whole tree, before the walk;
    each node gets its own uniform draw, used only if the walk reaches it. The walk then follows accepted
    first children with a few gathers per level; only a rejection runs the sequential rule (residual, then the
    next sibling). At batch 1 on a CPU each tensor op costs more in dispatch than in arithmetic, and most tried
    children are first children."""
    B, N, V = target_probs.shape
    dev = target_probs.device
    if tree.is_root_only and relax is None:
        # a plain step: the root's next token drawn from p, with the same random draws as the walk below makes
        # (a uniform per node, then the bonus), so a seed gives the same output either way
        torch.rand(B, 1, generator=generator, device=dev, dtype=torch.float64)
        return AcceptResult.root_kept(sample_rows(target_probs[:, 0].double(), generator))
    without_replacement = tree.sibling_rule == "without_replacement"
    kids, first, count = tree.children_in_order

    def row_pick(t, node):  # t[b, node[b]] for t: [B, N, ...] (a gather: cheaper than advanced indexing)
        return t.gather(1, node.view(B, 1, *([1] * (t.dim() - 2))).expand(B, 1, *t.shape[2:])).squeeze(1)

    def proposal(node, x, drawn):
        """[B, V] float64: the proposal node[b]'s token x[b] was drawn from, earlier siblings' draws removed."""
        if tree.q is None:
            return torch.nn.functional.one_hot(x, V).double()
        q = row_pick(tree.q, node).double()
        if without_replacement:
            q = q.masked_fill(drawn[:, :V], 0.0)
            q = q / q.sum(-1, keepdim=True).clamp_min(1e-300)
        # A child its own proposal gives no mass (e.g. more siblings than the draft support) was chosen
        # deterministically given the earlier draws: verify it as a point mass.
        point = row_pick(q, x) <= 0
        if point.any():
            q = torch.where(point[:, None], torch.nn.functional.one_hot(x, V).double(), q)
        return q

    # every node judged as its parent's first child: p at the parent (relaxed towards the node's token) over the
    # node's own proposal, read as [B, N] scalars (no [B, N, V] copy: a text vocabulary is large)
    tokens = tree.tokens
    flat = target_probs.reshape(B, N * V)
    at_parent = tree.parents.clamp(min=0) * V  # [B, N] where each node's parent row starts in ``flat``
    p_x = flat.gather(1, at_parent + tokens).double()
    if tree.q is None:
        q_x = torch.ones_like(p_x)
    else:
        q_x = tree.q.gather(2, tokens[..., None]).squeeze(-1).double()
        if without_replacement:
            q_x = q_x / tree.q.sum(-1, dtype=torch.float64).clamp_min(1e-300)
        q_x = torch.where(q_x > 0, q_x, 1.0)  # point mass, as in ``proposal``
    moved_by_node = None
    if relax is not None:
        idx, has = relax.neighbour_ids(tokens, dev)  # [B, N, k]
        pn = flat.gather(1, (at_parent[..., None] + idx).view(B, -1)).view(idx.shape).double()
        _, moved_by_node = relax.select(pn, has, p_x)
        p_x = p_x + moved_by_node  # p̃(x) = p(x) + S_m
    u = torch.rand(B, N, generator=generator, device=dev, dtype=torch.float64)
    first_accepted = u < (p_x / q_x).clamp(max=1.0)

    cur = torch.zeros(B, dtype=torch.long, device=dev)
    residual = target_probs[:, 0].double()  # where the bonus is drawn from if the walk stops here
    moved_mass = torch.zeros(B, dtype=torch.float64, device=dev) if relax is not None else None
    width = tree.max_depth + 1
    paths = torch.zeros(B, width, dtype=torch.long, device=dev)
    lengths = torch.ones(B, dtype=torch.long, device=dev)
    walking = torch.ones(B, dtype=torch.bool, device=dev)

    for level in range(1, width):
        at = cur[:, None]
        n_children = torch.where(walking, count.gather(1, at).squeeze(1), 0)
        offset = first.gather(1, at).squeeze(1)
        has = n_children > 0
        if not has.any():
            break
        child = row_pick(kids, offset.clamp(max=N - 1))
        if relax is not None:
            moved_mass = torch.where(has, torch.maximum(moved_mass, row_pick(moved_by_node, child)), moved_mass)
        accept = has & row_pick(first_accepted, child)
        rejected = has & ~accept
        if rejected.any():
            # the sequential rule where the first child failed: residual norm(max(p̃ − q, 0)), then the next sibling
            res = residual
            drawn = torch.zeros(B, V + 1, dtype=torch.bool, device=dev) if without_replacement else None
            trying = rejected
            child_i, out = child, rejected  # the first child: judged before the walk, and rejected
            for i in range(int(n_children.max())):
                x = row_pick(tokens, child_i)
                q = proposal(child_i, x, drawn)
                shifted = 0.0
                if relax is not None:
                    idx, keep, shifted = relax.moved_neighbours(res, x)
                if i > 0:
                    if relax is not None:
                        moved_mass = torch.where(trying, torch.maximum(moved_mass, shifted), moved_mass)
                    judged_x = row_pick(res, x) + shifted
                    ok = trying & (row_pick(u, child_i) < (judged_x / row_pick(q, x)).clamp(max=1.0))
                    accept = accept | ok
                    child = torch.where(ok, child_i, child)
                    out = trying & ~ok
                if out.any():
                    judged = res if relax is None else relax.relaxed(res, x, idx, keep, shifted)
                    leftover = (judged - q).clamp_min(0.0)
                    total = leftover.sum(-1, keepdim=True)
                    leftover = torch.where(total > 0, leftover / total.clamp_min(1e-300), res)
                    res = torch.where(out[:, None], leftover, res)
                if drawn is not None:  # a row not trying marks the spare column V
                    drawn.scatter_(1, torch.where(trying, x, V)[:, None], True)
                trying = rejected & ~accept & (n_children > i + 1)  # the next sibling, where there is one
                if not trying.any():
                    break
                child_i = row_pick(kids, (offset + i + 1).clamp(max=N - 1))
            residual = torch.where(rejected[:, None], res, residual)
        if accept.any():
            residual = torch.where(accept[:, None], row_pick(target_probs, child).double(), residual)
            cur = torch.where(accept, child, cur)
            paths[:, level] = torch.where(accept, child, paths[:, level])
            lengths = lengths + accept.long()
        walking = accept
        if not walking.any():
            break

    bonus = sample_rows(residual, generator)
    return AcceptResult(paths, lengths, bonus, moved_mass=moved_mass)
