"""DEER drafting (Cheng et al., 2025, "DEER: Draft with Diffusion, Verify with Autoregressive Models"):
a masked diffusion LM fills k mask slots after the verified prefix in **one** denoising step; the chain
of k tokens goes to the target's verifier.

Each slot's distribution depends on the prefix only, never on the other drafts, so drawing the drafts
independently from the slot distributions is a valid proposal for speculative sampling: the verifier
gets ``q`` per slot and stays lossless (Leviathan et al. 2023, Alg. 1, with q_i(.|prefix)).

The drafter's alignment training (Stage I continuation distillation, Stage II scribe refinement) lives in
:mod:`mmspec.training.deer`.
"""

from __future__ import annotations

import torch

from ..cache import SpecKVCache
from ..state import DraftContext
from ..tree import DraftTree
from .base import Drafter
from .diffusion import DiffusionLM


class DEERDrafter(Drafter):
    """One-step block drafting of ``num_tokens`` tokens from a :class:`DiffusionLM`."""

    def __init__(self, dlm: DiffusionLM, num_tokens: int = 8):
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
        self.dlm = dlm
        self.num_tokens = int(num_tokens)
        self.vocab_size = dlm.vocab_size

    @property
    def max_nodes(self) -> int:
        return self.num_tokens + 1

    def begin(self, context: DraftContext) -> SpecKVCache | None:
        """The diffusion LM's cache for this call (None when it re-reads its context every step)."""
        return self.dlm.begin(context.state, context.max_length, self.num_tokens)

    @torch.no_grad()
    def propose(self, context: DraftContext, cache: SpecKVCache | None) -> DraftTree:
        state = context.state
        logp = self.dlm.slot_logprobs(state, self.num_tokens, cache)  # [B, k, V]
        dev = logp.device
        roots = state.roots.to(dev)
        sampling = state.sampling
        if not sampling.do_sample:
            return DraftTree.chain(roots, logp.argmax(-1))
        q = sampling.probs(logp)  # the target's warpers applied to the drafter's slots
        B, k, V = q.shape
        drafts = torch.multinomial(q.reshape(B * k, V), 1, generator=state.generator).view(B, k)
        return DraftTree.chain(roots, drafts, q=q)


__all__ = ["DEERDrafter"]
