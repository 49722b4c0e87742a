"""What a smaller draft tree would have earned, read off the step that verified a larger one (greedy decoding).

A drafter that offers several tree sizes from one draft forward (:attr:`~mmspec.drafters.base.Drafter.tree_budgets`,
e.g. DFlash's DDTree at 16, 8, 4 and 2 nodes) builds each smaller tree as a part of the larger ones. Under greedy
verification the target's tokens along the verified tree's accepted path, and the bonus token after it, are the
target's own continuation; a tree inside the verified one is accepted exactly as far as it holds that continuation.
So one verified step measures the acceptance of every smaller size at once, and
:class:`~mmspec.drafters.adaptive.AdaptiveDrafter` can choose a size (the load-aware verify length of DSpark and
SGLang's auto-spec) from steps it ran at another size.

What a smaller tree costs is estimated from the two step costs measured: a plain step (one node a row) and the
drafted step (``width`` nodes a row), with the target's verification linear in the nodes in between: on a CPU a
verify forward costs about what its tokens cost, on a GPU at these sizes about the same whatever it holds (the two
measured ends are then close, and so is every size between them).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..tree import DraftTree
from ..verifiers.acceptance import AcceptResult


def target_continuation(tree: DraftTree, result: AcceptResult) -> list[list[int]]:
    """Per row, the tokens the target emitted in a greedy step that verified ``tree``: the accepted drafts, then the
    bonus token."""
    tokens, paths, lengths = tree.tokens.tolist(), result.paths.tolist(), result.path_lengths.tolist()
    bonus = result.bonus.tolist()
    return [[tokens[b][n] for n in paths[b][1:lengths[b]]] + [bonus[b]] for b in range(len(tokens))]


def emitted_by(tree: DraftTree, continuation: list[list[int]]) -> list[int]:
    """Per row, the tokens a greedy step verifying ``tree`` emits when the target's continuation is
    ``continuation`` (its accepted drafts, then one token more): the nodes of the tree that follow it, plus the
    bonus. Exact while ``tree`` lies inside the tree that gave ``continuation``; a lower bound otherwise."""
    return [follow(children, want[:-1])[1] + 1 for children, want in zip(tree.child_maps(), continuation)]


def follow(children: dict, tokens) -> tuple[int, int, bool]:
    """Walk ``tokens`` down a row's tree from the root (``children``: its :meth:`~mmspec.tree.DraftTree.child_maps`
    entry): the node reached, how many tokens it holds in a row, and whether a token left the tree."""
    at, got = 0, 0
    for t in tokens:
        nxt = children.get((at, t))
        if nxt is None:
            return at, got, True
        at, got = nxt, got + 1
    return at, got, False


@dataclass(frozen=True)
class StepCost:
    """A drafted step's measured parts: drafting (the drafter's forward and every size's tree) and the rest
    (the target's verification, acceptance, commit, the drafter's observe) for a tree ``width`` nodes wide."""
    draft: float
    verify: float
    width: int

    def at_width(self, width: int, plain: float | None) -> float:
        """The step's seconds had its tree been ``width`` nodes wide: its own where that is its width (or no
        plain step was measured), else the verification cost interpolated linearly in the nodes between a plain
        step's (``plain`` seconds, one node) and this one's."""
        if width == self.width or plain is None or self.width <= 1:
            return self.draft + self.verify
        return self.draft + plain + (self.verify - plain) * (width - 1) / (self.width - 1)


__all__ = ["StepCost", "emitted_by", "follow", "target_continuation"]
