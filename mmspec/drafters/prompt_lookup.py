"""Prompt lookup decoding (Saxena 2023): training-free n-gram drafting from the context itself.

For each row, find an earlier occurrence of the context's last n tokens (n from ``max_ngram`` down
to ``min_ngram``) and propose the ``num_tokens`` tokens that followed it. Drafts are
deterministic, so the sampling verifier uses point-mass proposals and stays lossless.
"""

from __future__ import annotations

import torch

from ..state import DraftContext
from ..tree import DraftTree
from .base import Drafter


def lookup_match(context: torch.LongTensor, num_tokens: int, max_ngram: int, min_ngram: int
                 ) -> tuple[torch.LongTensor, int]:
    """The continuation after an earlier match of the context's suffix (may be empty), and the length of the suffix
    matched (0: none). How long the match is says how far to trust it: on the zoo's code target a continuation after
    a one-token match is accepted whole far less often than one after a match of two or three.

    Among matches of the longest n-gram that matches at all, take the one with the longest available
    continuation (up to ``num_tokens``), the most recent among equals: a match right before the end
    of the context has little to offer, which HF's first-match and a plain most-recent rule ignore.
    """
    L = context.shape[0]
    for n in range(min(max_ngram, L - 1), min_ngram - 1, -1):
        windows = context.unfold(0, n, 1)[:-1]  # every n-gram except the suffix itself
        hits = torch.nonzero((windows == context[-n:]).all(1)).flatten()
        if hits.numel():
            available = (L - (hits + n)).clamp(max=num_tokens)
            best = int(hits[(available * (L + 1) + hits).argmax()])
            return context[best + n: best + n + num_tokens], n
    return context[:0], 0


def lookup_continuation(context: torch.LongTensor, num_tokens: int, max_ngram: int, min_ngram: int) -> torch.LongTensor:
    """The continuation of :func:`lookup_match` alone."""
    return lookup_match(context, num_tokens, max_ngram, min_ngram)[0]


class PromptLookupDrafter(Drafter):
    vocab_size = None
    drops_rows = True  # no per-row state: it reads context.state
    catches_up_from_tokens = True  # it reads the tokens in context.state when it drafts: nothing to catch up
    shadow_drafts = True  # nothing kept between steps

    def __init__(self, num_tokens: int = 10, max_ngram: int = 3, min_ngram: int = 1):
        if num_tokens < 1 or min_ngram < 1 or max_ngram < min_ngram:
            raise ValueError("PromptLookupDrafter needs num_tokens >= 1 and 1 <= min_ngram <= max_ngram")
        self.num_tokens, self.max_ngram, self.min_ngram = num_tokens, max_ngram, min_ngram

    @property
    def max_nodes(self) -> int:
        return self.num_tokens + 1

    def propose(self, context: DraftContext, run=None) -> DraftTree:
        state = context.state
        B = state.batch_size
        drafts = torch.zeros(B, self.num_tokens, dtype=torch.long, device=state.tokens.device)
        lengths = torch.zeros(B, dtype=torch.long, device=state.tokens.device)
        for b in range(B):
            if not bool(state.active[b]):
                continue
            cont = lookup_continuation(state.row(b), self.num_tokens, self.max_ngram, self.min_ngram)
            drafts[b, : cont.numel()] = cont
            lengths[b] = cont.numel()
        width = max(int(lengths.max()), 0)
        return DraftTree.chain(state.roots, drafts[:, :width], lengths=lengths)
