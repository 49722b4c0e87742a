"""The tree verifier: one target forward over all tree nodes, then an acceptance rule."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cache import SpecKVCache
from ..tree import DraftTree
from .acceptance import AcceptResult, greedy_accept, sampling_accept
from .logits import SamplingConfig
from .relaxed import relaxed_greedy_accept
from .tree_forward import tree_forward


@dataclass
class Verification:
    result: AcceptResult
    logits: torch.Tensor  # [B, N, V]
    hidden_states: tuple | None  # per-layer hidden states at the tree nodes, when requested


class TreeVerifier:
    """Runs the target over a DraftTree appended to its cache and decides what to keep.

    The cache is left with the tree as pending nodes; the caller commits the accepted path.
    """

    def __init__(self, sampling: SamplingConfig, relaxation=None):
        self.sampling = sampling
        self.relaxation = relaxation  # None: lossless; a Relaxation: LANTERN / LANTERN++

    def verify(self, model, cache: SpecKVCache, tree: DraftTree, generator: torch.Generator | None = None,
               output_hidden_states: bool = False) -> Verification:
        out = tree_forward(model, cache, tree.tokens, tree.parents, tree.valid,
                           output_hidden_states=output_hidden_states, ancestors=tree.ancestor_mask)
        logits = out.logits
        result = self.accept(tree, logits, generator)
        return Verification(result, logits, out.hidden_states if output_hidden_states else None)

    def accept(self, tree: DraftTree, logits: torch.Tensor, generator: torch.Generator | None = None) -> AcceptResult:
        if not self.sampling.do_sample:
            if self.relaxation is not None:
                return relaxed_greedy_accept(tree, logits, self.relaxation)
            return greedy_accept(tree, logits)
        if self.relaxation is not None:
            return sampling_accept(tree, self.sampling.probs(logits), generator, relax=self.relaxation)
        return sampling_accept(tree, self.sampling.probs(logits), generator)
