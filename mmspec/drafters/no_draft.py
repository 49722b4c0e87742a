"""The own-engine plain baseline: a drafter that proposes nothing.

Every step verifies the root alone, so mmspec's loop decodes one token per target forward (τ = 1). Timed
beside HF's plain ``generate`` it separates the engine's own overhead (cache, tree mask, bookkeeping) from
what speculation gains: method time / this time is the speculation gain, this time / HF plain the engine cost.
"""

from __future__ import annotations

from ..state import DraftContext
from ..tree import DraftTree
from .base import Drafter


class NoDrafter(Drafter):
    vocab_size = None
    drops_rows = True  # no per-row state: it reads context.state

    @property
    def max_nodes(self) -> int:
        return 1

    def propose(self, context: DraftContext, run=None) -> DraftTree:
        return DraftTree.root_only(context.state.roots)
