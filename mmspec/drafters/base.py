"""The drafter plug-in interface (the candidate-generator pattern of HF ``generate``, for trees).

The decoding loop calls ``begin`` once per ``generate`` call, then per step ``propose`` (a DraftTree
rooted at each row's last token) and ``observe`` (what the verifier accepted). A drafter never changes
what is generated, only how fast.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..state import DecodeState
from ..tree import DraftTree
from ..verifiers.acceptance import AcceptResult


@dataclass
class TargetContext:
    """What the target's prefill computed that a feature drafter reads."""

    hidden: torch.Tensor  # [B, P, H] last-layer hidden states (what the LM head reads)
    input_ids: torch.LongTensor  # [B, P] the prompt as the target saw it (image placeholders included)
    image_mask: torch.BoolTensor | None = None  # [B, P] image placeholder positions
    image_embeds: torch.Tensor | None = None  # [n_image_tokens, H] projected image embeddings, in the
    # row-major order of image_mask (the order LLaVA scatters them into the prompt)


class Drafter:
    #: vocabulary the drafter proposes from (None = whatever the context holds, e.g. prompt lookup)
    vocab_size: int | None = None
    #: feature drafters read the target's last-layer hidden states: the loop then passes
    #: ``begin(..., context=TargetContext)`` and ``observe(..., hidden=[B, N, H])``
    needs_target_hidden: bool = False

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
