"""DraftTree: the one structure every drafter hands to the verifier.

A tree is batched: row ``b`` holds ``N`` node slots. Node 0 is the *root*: the last committed token,
which the target has not seen yet. Every other node is a draft token whose parent index is smaller
than its own (topological order), so a chain is simply ``parents = [-1, 0, 1, 2, ...]``. Rows may
use fewer than ``N`` nodes; unused slots have ``valid = False``.

``q[b, n]`` is the distribution node ``n`` was drawn from (the drafter's distribution at its parent).
``q is None`` means every child was chosen deterministically (point-mass proposals), which the
sampling verifier handles exactly (docs/design.md, "Tree verifier").

Derived views (ancestor mask, depth, ``position_ids``, root-to-leaf paths) follow EAGLE's tree
buffers idea, computed with tensor ops rather than per-node Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal, Sequence

import torch

SiblingRule = Literal["deterministic", "iid", "without_replacement"]


def _child_map(tok: list, par: list, ok: list | None = None) -> dict:
    """One row's ``{(parent, token): node}`` from its lists (``ok``: which nodes are real; None: all)."""
    return {(par[n], tok[n]): n for n in range(1, len(tok)) if ok is None or ok[n]}


def _child_maps(tokens: list, parents: list, valid: list) -> list[dict]:
    """:meth:`DraftTree.child_maps` from the tree's rows as lists."""
    return [_child_map(tok, par, ok) for tok, par, ok in zip(tokens, parents, valid)]


def graft_rows(tokens: list[list[int]], parents: list[list[int]], chains) -> None:
    """Merge each row's chain of tokens (``chains[b]``, drafted after the root) into that row's tree, given as lists of
    its nodes (root first, parent −1; every parent before its child), in place, as a trie: the chain follows the
    tree's nodes while their tokens agree and goes on as new nodes where it leaves them."""
    for tok, par, chain in zip(tokens, parents, chains):
        children = _child_map(tok, par)
        at = 0
        for t in chain:
            t = int(t)
            nxt = children.get((at, t))
            if nxt is None:
                tok.append(t), par.append(at)
                nxt = children[(at, t)] = len(tok) - 1
            at = nxt


@dataclass
class DraftTree:
    tokens: torch.LongTensor  # [B, N]; column 0 is the root
    parents: torch.LongTensor  # [B, N]; -1 for the root, parents[b, n] < n otherwise
    valid: torch.BoolTensor | None = None  # [B, N]; None = all nodes exist
    q: torch.Tensor | None = None  # [B, N, V] proposal each node was drawn from; None = deterministic
    sibling_rule: SiblingRule = "deterministic"
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        if self.tokens.dim() != 2 or self.tokens.shape != self.parents.shape:
            raise ValueError(
                f"DraftTree tokens and parents must both be [batch, nodes]; got {tuple(self.tokens.shape)} "
                f"and {tuple(self.parents.shape)}"
            )
        if self.valid is None:
            self.valid = torch.ones_like(self.tokens, dtype=torch.bool)
        n = torch.arange(self.num_nodes, device=self.tokens.device)
        bad_order = (self.parents >= n) & self.valid
        if bad_order.any() or (self.parents[:, 0] != -1).any() or ((self.parents[:, 1:] < 0) & self.valid[:, 1:]).any():
            raise ValueError("DraftTree parents must satisfy parents[:, 0] == -1 and 0 <= parents[:, n] < n")
        if self.q is None and self.sibling_rule != "deterministic":
            raise ValueError(f"sibling_rule={self.sibling_rule!r} needs the draft distributions q")

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def chain(cls, root: torch.LongTensor, drafts: torch.LongTensor, q: torch.Tensor | None = None,
              lengths: torch.LongTensor | None = None) -> "DraftTree":
        """A chain root -> d1 -> ... -> dk. ``lengths[b]`` drafts are real in row b (the rest padding).

        ``q`` (optional, [B, k, V]) is the proposal distribution of each draft.
        """
        B, k = drafts.shape
        tokens = torch.cat([root.view(B, 1), drafts], dim=1)
        parents = (torch.arange(k + 1, device=root.device) - 1).expand(B, k + 1).clone()
        valid = None
        if lengths is not None:
            valid = torch.arange(k + 1, device=root.device)[None, :] <= lengths.view(B, 1)
        full_q = None
        if q is not None:
            full_q = torch.cat([torch.zeros_like(q[:, :1]), q], dim=1)
        tree = cls(tokens, parents, valid, full_q, "iid" if q is not None else "deterministic")
        # a chain's ancestor mask is lower-triangular: skip the general computation
        tree._cache["anc"] = torch.tril(torch.ones(k + 1, k + 1, dtype=torch.bool, device=root.device)).expand(
            B, k + 1, k + 1)
        tree._cache["chain"] = True
        return tree

    @classmethod
    def root_only(cls, root: torch.LongTensor) -> "DraftTree":
        """The root alone (a plain step): built without the general checks and derived views, which would cost
        more than the rest of a plain step's bookkeeping on a CPU."""
        tokens = root.view(-1, 1)
        tree = cls.__new__(cls)
        tree.tokens, tree.parents = tokens, torch.full_like(tokens, -1)
        tree.valid, tree.q, tree.sibling_rule = torch.ones_like(tokens, dtype=torch.bool), None, "deterministic"
        tree._cache = {"chain": True, "anc": tree.valid[:, :, None]}
        return tree

    @property
    def row_lists(self) -> tuple[list[list[int]], list[list[int]], list[int]] | None:
        """(tokens, parents, sizes) of each row as the lists :meth:`from_rows` built the tree from (unpadded), or
        None for a tree built from tensors."""
        return self._cache.get("rows")

    @property
    def is_root_only(self) -> bool:
        """One node per row (what a plain step verifies)."""
        return self.tokens.shape[1] == 1

    def child_maps(self) -> list[dict]:
        """Per row, ``(parent node, token) -> node`` over the valid nodes: how a token path is followed down the tree
        (a deterministic tree's siblings hold distinct tokens)."""
        return _child_maps(self.tokens.tolist(), self.parents.tolist(), self.valid.tolist())

    def grafted(self, chains) -> "DraftTree":
        """This deterministic tree with each row's chain of tokens (``chains[b]``, drafted after the root) merged
        in as a trie: the chain follows the tree's nodes while their tokens agree and goes on as new nodes where it
        leaves them, so a continuation the tree already holds costs no extra node."""
        if self.q is not None:
            raise ValueError("only a deterministic tree takes a grafted chain (its nodes would have no proposal q)")
        counts = self.valid.sum(1).tolist()  # a row's valid nodes come first
        tokens = [row[:n] for row, n in zip(self.tokens.tolist(), counts)]
        parents = [row[:n] for row, n in zip(self.parents.tolist(), counts)]
        graft_rows(tokens, parents, chains)
        return DraftTree.from_rows(tokens, parents, self.tokens.device)

    @classmethod
    def from_rows(cls, tokens: list[list[int]], parents: list[list[int]], device=None) -> "DraftTree":
        """A deterministic tree from each row's nodes as lists (root first with parent −1, every parent before its
        child), padded to the longest row with invalid copies of the row's root."""
        width = max(len(t) for t in tokens)
        if any(len(p) != len(t) or p[0] != -1 or any(not 0 <= q < i for i, q in enumerate(p[1:], 1))
               for t, p in zip(tokens, parents)):  # (the tensor checks of __post_init__, on the lists: cheaper)
            raise ValueError("DraftTree rows need as many parents as tokens, the root's -1 and 0 <= parent < node")
        tree = cls.__new__(cls)
        tree.tokens = torch.tensor([t + [t[0]] * (width - len(t)) for t in tokens], device=device)
        padded = [p + [0] * (width - len(p)) for p in parents]
        tree.parents = torch.tensor(padded, device=device)
        tree.valid = torch.tensor([[True] * len(t) + [False] * (width - len(t)) for t in tokens], device=device)
        tree.q, tree.sibling_rule, tree._cache = None, "deterministic", {}
        sizes = [len(t) for t in tokens]
        tree._cache.update(_views_from_lists(padded, sizes, device))
        # each row's lists (a verifier's walk reads them), copied: the caller's lists may go on changing
        tree._cache["rows"] = ([list(t) for t in tokens], [list(p) for p in parents], sizes)
        return tree

    def kept(self, keep: torch.BoolTensor) -> tuple["DraftTree", torch.LongTensor | None]:
        """The tree of the nodes ``keep`` [B, N] marks (the root always; a kept node's ancestors must be kept), in
        their order, and ``index`` [B, N']: the original node of each new one (0 at padding), or None where the
        kept nodes are the first ones of every row (node indices unchanged). Siblings keep their order, so a
        verifier tries them as it would have."""
        B, N = self.tokens.shape
        keep = keep & self.valid
        keep[:, 0] = True
        count = keep.sum(1)
        width = int(count.max())
        q = self.q
        if bool((keep[:, 1:] <= keep[:, :-1]).all()):  # a prefix of every row: the first columns
            ok = keep[:, :width]
            tokens = torch.where(ok, self.tokens[:, :width], self.tokens[:, :1])
            parents = torch.where(ok, self.parents[:, :width], 0)
            parents[:, 0] = -1
            tree = DraftTree(tokens, parents, ok, None if q is None else q[:, :width], self.sibling_rule)
            if self._cache.get("chain"):
                tree._cache["chain"] = True
                tree._cache["anc"] = self.ancestor_mask[:, :width, :width]
            return tree, None
        at = torch.arange(N, device=keep.device)
        index = torch.where(keep, at, N).sort(1).values[:, :width]
        ok = index < N
        index = torch.where(ok, index, 0)
        new_at = keep.long().cumsum(1) - 1  # each kept node's new index
        tokens = torch.where(ok, self.tokens.gather(1, index), self.tokens[:, :1])
        parents = torch.where(ok, new_at.gather(1, self.parents.gather(1, index).clamp(min=0)), 0)
        parents[:, 0] = -1
        if q is not None:
            q = q.gather(1, index[..., None].expand(-1, -1, q.shape[-1]))
        return DraftTree(tokens, parents, ok, q, self.sibling_rule), index

    def first_rows(self, n: int) -> "DraftTree":
        """The same trees for the first ``n`` rows of the batch (derived views are recomputed for them)."""
        return DraftTree(self.tokens[:n], self.parents[:n], self.valid[:n], None if self.q is None else self.q[:n],
                         self.sibling_rule)

    # ------------------------------------------------------------------ derived views
    @property
    def is_chain(self) -> bool:
        """True when every node's parent is the node before it."""
        if "chain" not in self._cache:
            expected = torch.arange(-1, self.num_nodes - 1, device=self.parents.device)
            self._cache["chain"] = bool(((self.parents == expected) | ~self.valid).all())
        return self._cache["chain"]

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def num_nodes(self) -> int:
        return self.tokens.shape[1]

    @property
    def ancestor_mask(self) -> torch.BoolTensor:
        """[B, N, N]: ``mask[b, i, j]`` is True iff node j is node i or one of its ancestors."""
        if "anc" not in self._cache:
            self._cache["anc"] = ancestor_mask(self.parents)
        return self._cache["anc"]

    @property
    def depth(self) -> torch.LongTensor:
        """[B, N]: distance from the root (root = 0)."""
        if "depth" not in self._cache:
            self._cache["depth"] = self.ancestor_mask.sum(-1) - 1
        return self._cache["depth"]

    @property
    def max_depth(self) -> int:
        if "max_depth" not in self._cache:
            self._cache["max_depth"] = int((self.depth * self.valid).max())
        return self._cache["max_depth"]

    @property
    def children_in_order(self) -> tuple[torch.LongTensor, torch.LongTensor, torch.LongTensor]:
        """(kids, first, count), each [B, N]: ``kids`` lists every real non-root node grouped by parent, in
        index order (padding after them); node n's children, in the order a verifier tries them, are
        ``kids[:, first[:, n] : first[:, n] + count[:, n]]``. One sort per tree instead of a scan of every node
        per tried child."""
        if "kids" not in self._cache:
            B, N = self.tokens.shape
            idx = torch.arange(N, device=self.parents.device)
            real = self.valid & (idx > 0)
            parent = self.parents.clamp(min=0)
            kids = torch.where(real, parent * N + idx, N * N).sort(1).values % N
            count = torch.zeros(B, N, dtype=torch.long, device=idx.device).scatter_add_(1, parent, real.long())
            self._cache["kids"] = (kids, count.cumsum(1) - count, count)
        return self._cache["kids"]

    def position_ids(self, committed: torch.LongTensor) -> torch.LongTensor:
        """Positions of the nodes for a target whose row ``b`` has ``committed[b]`` tokens in its cache."""
        return committed.view(-1, 1) + self.depth

    @property
    def is_leaf(self) -> torch.BoolTensor:
        B, N = self.tokens.shape
        has_child = torch.zeros(B, N + 1, dtype=torch.bool, device=self.tokens.device)
        idx = torch.where(self.valid, self.parents, N).clamp(min=0)
        idx[:, 0] = N
        has_child.scatter_(1, idx, True)
        return self.valid & ~has_child[:, :N]

    def paths(self, row: int = 0) -> list[list[int]]:
        """Root-to-leaf node-index paths of one row (for inspection and tests)."""
        anc = self.ancestor_mask[row]
        leaves = torch.nonzero(self.is_leaf[row]).flatten().tolist()
        return [torch.nonzero(anc[leaf]).flatten().tolist() for leaf in leaves]

    def retrieve_indices(self) -> torch.LongTensor:
        """[B, L, D+1] EAGLE-style retrieve buffer: each leaf's path, padded with -1."""
        B = self.batch_size
        rows = [self.paths(b) for b in range(B)]
        n_leaves = max(len(r) for r in rows)
        depth = max(len(p) for r in rows for p in r)
        out = torch.full((B, n_leaves, depth), -1, dtype=torch.long)
        for b, r in enumerate(rows):
            for i, p in enumerate(r):
                out[b, i, : len(p)] = torch.tensor(p)
        return out.to(self.tokens.device)


def _views_from_lists(parents: list[list[int]], sizes: list[int], device) -> dict:
    """The derived views :class:`DraftTree` computes from its tensors (ancestor mask, depth, max depth, whether it
    is a chain), computed from the rows' parent lists (padding nodes hang off the root) as they are built: a
    step's tree of 17 nodes costs a few list operations per node here, against a chain of gathers over [B, N, N]
    tensors and a device sync per view on the tensors (a tenth of a millisecond a step on a CPU). The mask is
    written as bytes (a list of N² bools through ``torch.tensor`` costs ten times more)."""
    B, N = len(parents), len(parents[0])
    anc = bytearray(B * N * N)
    depths = []
    for b, par in enumerate(parents):
        base, depth = b * N * N, []
        for n, p in enumerate(par):
            row = base + n * N
            if p >= 0:
                anc[row: row + N] = anc[base + p * N: base + (p + 1) * N]
            anc[row + n] = 1
            depth.append(0 if p < 0 else depth[p] + 1)
        depths.append(depth)
    chain = all(par[n] == n - 1 for par, size in zip(parents, sizes) for n in range(1, size))
    return {"anc": torch.frombuffer(anc, dtype=torch.bool).view(B, N, N).to(device),
            "depth": torch.tensor(depths, dtype=torch.long, device=device),
            "max_depth": max(max(d[:size]) for d, size in zip(depths, sizes)), "chain": chain}


def ancestor_mask(parents: torch.LongTensor) -> torch.BoolTensor:
    """Ancestor-or-self mask from parent indices (-1 = no parent).

    Chains (every node's parent the node before it, or none: a left-padded prompt, a drafter's context) are built
    directly: a node sees the nodes from its chain's start up to itself. Anything else by pointer doubling: after
    step k each row holds all ancestors closer than 2^k, so a depth-D tree takes ceil(log2(D + 1)) batched gathers
    instead of D Python iterations (over a 150-token prompt that had cost about a millisecond on a CPU).
    """
    B, N = parents.shape
    order = torch.arange(N, device=parents.device)
    starts = parents < 0
    if bool((starts | (parents == order - 1)).all()):
        start = torch.where(starts, order, 0).cummax(1).values  # [B, N] the first node of each node's chain
        return (order[None, None, :] <= order[None, :, None]) & (order[None, None, :] >= start[:, :, None])
    mask = torch.eye(N, dtype=torch.bool, device=parents.device).expand(B, N, N).clone()
    jump = parents
    while True:
        has = jump >= 0
        if not has.any():
            return mask
        target = jump.clamp(min=0)
        reached = mask.gather(1, target[:, :, None].expand(B, N, N))
        mask |= reached & has[:, :, None]
        jump = torch.where(has, jump.gather(1, target), jump)


def tree_label(tree):
    """How a tree setting is written in configs and reports: a template's :attr:`~TreeTemplate.label`, else the
    setting itself ("chain", "static", "dynamic", None)."""
    return tree.label if isinstance(tree, TreeTemplate) else tree


# ---------------------------------------------------------------------- static templates
MAX_TREE_NODES = 512  # draft nodes (root included) one verify forward may take: beyond it a step costs far more than
# any tree can win (a verify forward's cost grows with its nodes), and "100x100" would run for minutes


def check_tree_size(nodes: int, what: str) -> None:
    """Refuse, before any work, a tree (or chain, or block) of more than :data:`MAX_TREE_NODES` nodes."""
    if nodes > MAX_TREE_NODES:
        raise ValueError(f"{what} has {nodes} nodes (root included); a draft tree may have at most {MAX_TREE_NODES}")


@dataclass(frozen=True)
class TreeTemplate:
    """A static tree shape: each node is the path of child *ranks* from the root.

    ``[(0,), (1,), (0, 0)]`` = the root's top-1 and top-2 children, and the top-1 child of the top-1
    child. Nodes are stored in breadth-first order so parents precede children.

    A node's children must have the ranks 0, 1, …, n − 1 with no gap. Under sampling the drafter draws
    ranks without replacement (Gumbel top-k), and the verifier's residual removes only the siblings in the
    tree; a skipped rank (say (0,) and (2,) without (1,)) is a draw the verifier never sees, which would
    make sampling lossy, so such templates are refused.
    """

    rank_paths: tuple[tuple[int, ...], ...]

    def __post_init__(self):
        check_tree_size(len(self.rank_paths) + 1, "the tree template")
        paths = set(self.rank_paths)
        for p in self.rank_paths:
            if len(p) == 0:
                raise ValueError("template paths must be non-empty (the root is implicit)")
            if any(not isinstance(r, int) or isinstance(r, bool) or r < 0 for r in p):
                raise ValueError(f"template path {p} must hold child ranks, ints >= 0")
            if len(p) > 1 and p[:-1] not in paths:
                raise ValueError(f"template path {p} has no parent {p[:-1]} in the template")
        ranks: dict[tuple[int, ...], set[int]] = {}
        for p in paths:
            ranks.setdefault(p[:-1], set()).add(p[-1])
        for parent, got in ranks.items():
            if got != set(range(len(got))):
                missing = sorted(set(range(max(got) + 1)) - got)
                where = "the root" if not parent else f"node {parent}"
                raise ValueError(f"the children of {where} have ranks {sorted(got)}, missing {missing}: sibling ranks "
                                 "must be 0..n-1 with no gap (a skipped rank is a draw the verifier never sees, "
                                 "which makes sampling lossy)")
        ordered = tuple(sorted(paths, key=lambda p: (len(p), p)))
        object.__setattr__(self, "rank_paths", ordered)

    @classmethod
    def chain(cls, depth: int) -> "TreeTemplate":
        return cls(tuple((0,) * d for d in range(1, depth + 1)))

    @classmethod
    def full(cls, branching: Sequence[int]) -> "TreeTemplate":
        """Every node at depth d gets ``branching[d]`` children (e.g. (3, 2, 1, 1, 1))."""
        nodes, width = 1, 1
        for k in branching:  # counted before any path is built: "100x100x100x100" would not fit in memory
            width *= max(int(k), 0)
            nodes += width
            check_tree_size(nodes, f"the tree {'x'.join(str(k) for k in branching)}")
        level: list[tuple[int, ...]] = [()]
        out: list[tuple[int, ...]] = []
        for k in branching:
            level = [p + (r,) for p in level for r in range(k)]
            out.extend(level)
        return cls(tuple(out))

    @classmethod
    def spine(cls, depth: int, root_alternatives: int = 1) -> "TreeTemplate":
        """The top-ranked chain to ``depth`` plus the root's next ``root_alternatives`` ranked children as leaves:
        siblings where the drafter is least sure (its first guess, made without a drafted feature), one drafter
        forward per depth. On the zoo's image target (2 CPU threads) a verify forward costs about 0.4 ms more
        per node, and a depth-7 spine with one alternative accepted more per step than 2x1x1x1x1x1 (13 nodes)
        at 9 nodes (``mmspec eval --suite image``; README "Image generation")."""
        if depth < 1 or root_alternatives < 0:
            raise ValueError(f"tree spine{depth}+{root_alternatives}: a spine needs depth >= 1 and root_alternatives "
                             f">= 0, got {depth}, {root_alternatives}")
        check_tree_size(1 + depth + root_alternatives, f"the tree spine{depth}+{root_alternatives}")
        return cls(tuple((0,) * d for d in range(1, depth + 1)) + tuple((r,) for r in range(1, root_alternatives + 1)))

    @classmethod
    def from_label(cls, label: str) -> "TreeTemplate":
        """The template a :attr:`label` names: "2x2x1x1x1" (:meth:`full`) or "spine7+1" (:meth:`spine`), so a
        command line can name any shape the image suite reports."""
        text = str(label).strip()
        try:
            if text.startswith("spine"):
                depth, _, alternatives = text[len("spine"):].partition("+")
                spine = (int(depth), int(alternatives or 0))
            else:
                spine, branching = None, [int(k) for k in text.split("x")]
        except ValueError:
            spine, branching = None, []
        if spine is not None:
            return cls.spine(*spine)
        if not branching or min(branching) < 1:
            raise ValueError(f"tree {label!r}: name a shape as its branching per depth (e.g. '2x2x1x1x1') or as "
                             "'spine<depth>+<alternatives at the root>' (e.g. 'spine7+1')")
        return cls.full(branching)

    @property
    def num_nodes(self) -> int:
        """Nodes including the root."""
        return len(self.rank_paths) + 1

    @property
    def depth(self) -> int:
        return max(len(p) for p in self.rank_paths)

    @property
    def parents(self) -> list[int]:
        index = {(): 0}
        for i, p in enumerate(self.rank_paths, start=1):
            index[p] = i
        return [-1] + [index[p[:-1]] for p in self.rank_paths]

    @property
    def ranks(self) -> list[int]:
        return [0] + [p[-1] for p in self.rank_paths]

    def level(self, d: int) -> list[int]:
        """Node indices (1-based, root = 0) at depth ``d``."""
        return [i for i, p in enumerate(self.rank_paths, start=1) if len(p) == d]

    def _child_counts(self) -> dict[tuple[int, ...], int]:
        """Children per parent path (the root is ``()``)."""
        counts: dict[tuple[int, ...], int] = {}
        for p in self.rank_paths:
            counts[p[:-1]] = counts.get(p[:-1], 0) + 1
        return counts

    @property
    def label(self) -> str:
        """A short name: the branching per depth for a :meth:`full` tree ("2x2x1x1x1"), "spine7+1" for a
        :meth:`spine`, else nodes and depth."""
        children = self._child_counts()
        alternatives = children[()] - 1
        if self.depth > 1 and alternatives and self == TreeTemplate.spine(self.depth, alternatives):
            return f"spine{self.depth}+{alternatives}"
        branching = []
        for d in range(self.depth):
            counts = {children.get(p, 0) for p in ([()] if d == 0 else [q for q in self.rank_paths if len(q) == d])}
            if len(counts) != 1:
                return f"{self.num_nodes - 1}nodes-depth{self.depth}"
            branching.append(counts.pop())
        return "x".join(map(str, branching))

    def max_children(self) -> int:
        return max(self._child_counts().values())

    def layout(self, device) -> "TemplateLayout":
        """The index tensors a drafter expands this shape with, built once per template and device."""
        return _template_layout(self, str(torch.device(device)))


@dataclass(frozen=True)
class TemplateLevel:
    """One depth of a static template: its node ids, their parents as rows of the previous level's frontier (``local``)
    and their sibling ranks, how many ranked tokens that takes, and the nodes at this depth that get children
    (global node ids, the next frontier; None at the last depth)."""

    nodes: slice  # this depth's node ids (breadth-first order keeps them contiguous)
    local: torch.LongTensor
    ranks: torch.LongTensor
    need_k: int
    expand: torch.LongTensor | None


@dataclass(frozen=True)
class TemplateLayout:
    """A static template's fixed tensors (parents, ancestor mask, depth of every node, and each depth's
    :class:`TemplateLevel`): a drafter drafting the same shape every step builds none of them per step."""

    parents: torch.LongTensor  # [N]
    ancestors: torch.BoolTensor  # [N, N]
    depth: torch.LongTensor  # [N]
    max_depth: int
    levels: tuple[TemplateLevel, ...]

    def tree(self, tokens: torch.LongTensor, q: torch.Tensor | None = None,
             sibling_rule: SiblingRule = "deterministic") -> DraftTree:
        """The DraftTree of this shape holding ``tokens`` [B, N], its derived views already filled in."""
        B, N = tokens.shape
        tree = DraftTree(tokens, self.parents.expand(B, N).contiguous(), q=q, sibling_rule=sibling_rule)
        tree._cache.update(anc=self.ancestors.expand(B, N, N), depth=self.depth.expand(B, N).contiguous(),
                           max_depth=self.max_depth)
        return tree


@lru_cache(maxsize=64)
def _template_layout(template: TreeTemplate, device: str) -> TemplateLayout:
    dev = torch.device(device)
    parents = template.parents
    ranks = template.ranks
    frontier = [0]  # the nodes whose next-token logits the drafter holds, in row order
    levels = []
    for d in range(1, template.depth + 1):
        level = template.level(d)
        row = {node: i for i, node in enumerate(frontier)}
        expand = sorted({parents[i] for i in template.level(d + 1)}) if d < template.depth else None
        levels.append(TemplateLevel(slice(level[0], level[-1] + 1),
                                    torch.tensor([row[parents[i]] for i in level], device=dev),
                                    torch.tensor([ranks[i] for i in level], device=dev),
                                    max(ranks[i] for i in level) + 1,
                                    None if expand is None else torch.tensor(expand, device=dev)))
        frontier = expand
    par = torch.tensor(parents, device=dev)
    anc = ancestor_mask(par[None])[0]
    return TemplateLayout(par, anc, anc.sum(-1) - 1, template.depth, tuple(levels))


# A LANTERN++/EAGLE-like depth-5 shape: wide near the root, thin deeper down.
DEFAULT_TREE = TreeTemplate.full((3, 2, 1, 1, 1))


def select_best_nodes(scores: torch.Tensor, parents: torch.LongTensor, depth: torch.LongTensor,
                      valid: torch.BoolTensor, keep: int) -> torch.LongTensor:
    """EAGLE-2 re-ranking: keep the ``keep`` nodes with the highest cumulative log-probability.

    Returns node indices [B, keep] sorted so that parents precede children (root first). A child's
    cumulative score never exceeds its parent's, so the kept set is closed under ancestors; ties are
    broken toward shallower nodes to keep that true.
    """
    B, N = scores.shape
    keep = min(keep, N)
    key = torch.where(valid, scores, torch.full_like(scores, float("-inf")))
    key[:, 0] = float("inf")  # the root is always kept
    order = _lexsort_desc(key, depth)
    chosen = order[:, :keep]
    # Restore topological order: sort by node index (parents always have smaller indices).
    return torch.sort(chosen, dim=1).values


def _lexsort_desc(key: torch.Tensor, depth: torch.LongTensor) -> torch.LongTensor:
    """Sort by key descending, then depth ascending (stable)."""
    by_depth = torch.argsort(depth, dim=1, stable=True)
    key_sorted = key.gather(1, by_depth)
    by_key = torch.argsort(key_sorted, dim=1, descending=True, stable=True)
    return by_depth.gather(1, by_key)


def subtree(tree_tokens: torch.LongTensor, parents: torch.LongTensor, keep_idx: torch.LongTensor,
            q: torch.Tensor | None = None, valid: torch.BoolTensor | None = None):
    """Restrict a tree to nodes ``keep_idx`` ([B, K], ancestor-closed, ascending) and re-index parents."""
    B, N = parents.shape
    remap = torch.full((B, N), -1, dtype=torch.long, device=parents.device)
    remap.scatter_(1, keep_idx, torch.arange(keep_idx.shape[1], device=parents.device).expand(B, -1).contiguous())
    old_par = parents.gather(1, keep_idx)
    new_par = torch.where(old_par >= 0, remap.gather(1, old_par.clamp(min=0)), old_par)
    tokens = tree_tokens.gather(1, keep_idx)
    new_q = None if q is None else q.gather(1, keep_idx[..., None].expand(-1, -1, q.shape[-1]))
    new_valid = None if valid is None else valid.gather(1, keep_idx)
    return tokens, new_par, new_q, new_valid
