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
from .base import Drafter, check_confidence, confident_length
from .diffusion import DiffusionLM


class DEERDrafter(Drafter):
    """One-step block drafting of ``num_tokens`` tokens from a :class:`DiffusionLM`.

    ``confidence`` (beyond the paper, the rule of HF's ``assistant_confidence_threshold`` applied to the block's
    slots): the block is cut after its first slot whose draft has probability below ``confidence`` in every active
    row. The cut costs no drafting (every slot comes from the same forward) but shortens the verification, whose
    cost grows with the drafts it scores; the cut depends on the drafter's distributions only, so sampling stays
    lossless."""

    def __init__(self, dlm: DiffusionLM, num_tokens: int = 8, confidence: float | None = None):
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
        check_confidence(confidence)
        self.dlm = dlm
        self.num_tokens = int(num_tokens)
        self.confidence = confidence
        self.vocab_size = dlm.vocab_size

    drops_rows = True  # select_rows narrows the diffusion LM's cache

    @property
    def max_nodes(self) -> int:
        return self.num_tokens + 1

    def select_rows(self, cache: SpecKVCache | None, keep: torch.LongTensor) -> SpecKVCache | None:
        if cache is not None:
            cache.select_rows(keep)
        return cache

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
            drafts = logp.argmax(-1)
            keep = confident_length(logp.gather(2, drafts[..., None])[..., 0].exp(), state.active.to(dev),
                                    self.confidence)
            return DraftTree.chain(roots, drafts[:, :keep])
        q = sampling.probs(logp)  # the target's warpers applied to the drafter's slots
        B, k, V = q.shape
        drafts = torch.multinomial(q.reshape(B * k, V), 1, generator=state.generator).view(B, k)
        keep = confident_length(q.gather(2, drafts[..., None])[..., 0], state.active.to(dev), self.confidence)
        return DraftTree.chain(roots, drafts[:, :keep], q=q[:, :keep])


__all__ = ["DEERDrafter"]
