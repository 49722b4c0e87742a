"""The tree verifier: one target forward over all tree nodes, then an acceptance rule."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..cache import SpecKVCache
from ..tree import DraftTree
from .acceptance import AcceptResult, greedy_accept, sampling_accept
from .distortion import greedy_output_tv, output_tv
from .logits import SamplingConfig
from .relaxed import relaxed_greedy_accept
from .tree_forward import tree_forward


@dataclass
class Verification:
    result: AcceptResult
    logits: torch.Tensor  # [B, N, V]
    hidden_states: tuple | None  # per-layer hidden states at the tree nodes, when requested

    @property
    def last_hidden(self) -> torch.Tensor | None:
        """[B, N, H] the last layer's hidden states at the tree nodes (None when not requested)."""
        return None if self.hidden_states is None else self.hidden_states[-1]


class TreeVerifier:
    """Runs the target over a DraftTree appended to its cache and decides what to keep.

    The cache is left with the tree as pending nodes; the caller commits the accepted path.
    """

    def __init__(self, sampling: SamplingConfig, relaxation=None, measure_output_tv: bool | int = False):
        self.sampling = sampling
        self.relaxation = relaxation  # None: lossless; a Relaxation: LANTERN / LANTERN++
        # relaxed only: also compute the exact TV of each step's first emitted token (result.output_tv), for every
        # row (True) or the first n rows (an int n: two sampled siblings cost O(V²·k) per row, too much for a
        # large batch's every row)
        self.measure_output_tv = measure_output_tv
        self.output_tv_rows = None if measure_output_tv is True else int(measure_output_tv) or None
        self.output_tv_time = 0.0  # seconds spent on it (callers keep it out of their timings)

    def verify(self, model, cache: SpecKVCache, tree: DraftTree, generator: torch.Generator | None = None,
               output_hidden_states: bool = False, noise: torch.Tensor | None = None) -> Verification:
        """``noise`` [B, N, V] (the Gumbel coupling only): the noise of the token after each node."""
        # direct: a Llama-class target runs its modules in order, without the model-level wrappers (the same
        # arithmetic; a quarter of a millisecond a step on a small model, which is what the loop's overhead is)
        out = tree_forward(model, cache, tree.tokens, tree.parents, tree.valid,
                           output_hidden_states=output_hidden_states, ancestors=tree.ancestor_mask,
                           depth=None if tree.is_root_only else tree.depth, direct=True)
        logits = out.logits
        result = self.accept(tree, logits, generator, noise)
        return Verification(result, logits, out.hidden_states if output_hidden_states else None)

    def accept(self, tree: DraftTree, logits: torch.Tensor, generator: torch.Generator | None = None,
               noise: torch.Tensor | None = None) -> AcceptResult:
        relax = self.relaxation
        if self.sampling.gumbel:
            # the Gumbel coupling: the target's token after each node is argmax(warped logits + that position's
            # noise), so a draft is kept iff it is that token, the greedy rule on the perturbed scores
            if noise is None:
                raise ValueError("the Gumbel coupling verifies with each node's noise (noise=None)")
            return greedy_accept(tree, self.sampling.warp(logits) + noise)
        if not self.sampling.do_sample:
            if relax is None:
                return greedy_accept(tree, logits)
            result = relaxed_greedy_accept(tree, logits, relax)
            if self.measure_output_tv:
                t0 = time.perf_counter()
                result.output_tv = greedy_output_tv(result.emitted_tokens(tree)[0][:, 0], logits)
                self.output_tv_time += time.perf_counter() - t0
            return result
        probs = self.sampling.probs(logits)
        if relax is None:
            return sampling_accept(tree, probs, generator)
        result = sampling_accept(tree, probs, generator, relax=relax)
        if self.measure_output_tv:
            t0 = time.perf_counter()
            result.output_tv = output_tv(tree, probs, relax, self.output_tv_rows)
            self.output_tv_time += time.perf_counter() - t0
        return result
