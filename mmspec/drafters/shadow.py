"""A draft the target never verifies, scored against the target's own continuation as plain steps produce it.

Where a drafted step costs several plain steps (a large batch on a CPU: five or six at 8–16 rows on the zoo's code
suite), finding out whether drafting pays again costs the adaptive policy more than it can win back: a drafting probe
is two drafted steps (the one that catches the drafter up, and one to measure). Under greedy decoding the target's
next tokens do not depend on how they are found, so a draft can be proposed on a plain step, left unverified, and
read against the tokens the plain steps then emit: a tree emits its nodes along the continuation, plus one (the rule
of :func:`~mmspec.drafters.budgets.emitted_by`). That costs the drafter's forward alone (about one plain step there),
and it says exactly what a drafted step at that point would have emitted.

The answer comes as the continuation does, a token a row per plain step; a row's count is known once the
continuation leaves the tree (or reaches a leaf, or the row stops), so :meth:`ShadowDraft.bounds` gives per row the
least and the most it can still be, and the policy decides as soon as either bound settles the comparison.
"""

from __future__ import annotations

from ..state import DecodeState
from ..tree import DraftTree
from .budgets import follow


class ShadowDraft:
    """An unverified draft ``tree`` proposed when ``state`` held each row's root as its last token."""

    def __init__(self, tree: DraftTree, state: DecodeState):
        self.rows = state.active.tolist()  # the rows a drafted step would have generated for
        self.start = state.lengths.tolist()  # each row's continuation begins at this buffer position
        self.children = tree.child_maps()
        self.height = []  # per row: per node, the most nodes on a path below it
        for parents, valid in zip(tree.parents.tolist(), tree.valid.tolist()):
            below = [0] * len(parents)
            for n in range(len(parents) - 1, 0, -1):  # parents come before their children
                if valid[n]:
                    below[parents[n]] = max(below[parents[n]], below[n] + 1)
            self.height.append(below)
        self.depth = max((h[0] for h in self.height), default=0)

    def bounds(self, state: DecodeState) -> tuple[list, list, bool]:
        """Per row, the least and the most tokens a greedy step verifying the draft would have emitted, from the
        continuation ``state`` holds now (None for rows that were not generating), and whether every row's count
        is known (the two bounds equal)."""
        end = min(max(self.start) + self.depth + 1, state.tokens.shape[1])
        begin = min(self.start)
        window = state.tokens[:, begin:end].tolist()
        lengths, active = state.lengths.tolist(), state.active.tolist()
        low, high = [], []
        for b, generating in enumerate(self.rows):
            if not generating:
                low.append(None), high.append(None)
                continue
            seen = window[b][self.start[b] - begin: lengths[b] - begin]  # the continuation so far
            at, got, left = follow(self.children[b], seen)
            if not left and not active[b]:  # the row ended (EOS or its budget) inside the draft: a step stops there
                low.append(max(got, 1)), high.append(max(got, 1))
                continue
            known = left or self.height[b][at] == 0  # off the tree, or at a leaf: the next token is the bonus
            low.append(got + 1)
            high.append(got + 1 if known else got + 1 + self.height[b][at])
        return low, high, low == high


__all__ = ["ShadowDraft"]
