"""The drafter plug-in interface (the candidate-generator pattern of HF ``generate``, for trees).

The decoding loop calls ``begin`` once per ``generate`` call, then per step ``propose`` (a DraftTree
rooted at each row's last token) and ``observe`` (what the verifier accepted). A drafter never changes
what is generated, only how fast.
"""

from __future__ import annotations

from ..state import DecodeState
from ..tree import DraftTree
from ..verifiers.acceptance import AcceptResult


class Drafter:
    #: vocabulary the drafter proposes from (None = whatever the context holds, e.g. prompt lookup)
    vocab_size: int | None = None

    @property
    def max_nodes(self) -> int:
        """Upper bound on tree nodes per step, root included (sizes the target cache)."""
        raise NotImplementedError

    def begin(self, state: DecodeState, max_length: int) -> None:
        """Start a new batch; ``max_length`` bounds ``state.lengths`` for this call."""

    def propose(self, state: DecodeState) -> DraftTree:
        raise NotImplementedError

    def observe(self, state: DecodeState, tree: DraftTree, result: AcceptResult) -> None:
        """Called after the verifier accepted ``result`` and ``state`` was extended."""
