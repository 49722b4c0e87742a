"""Target distribution transforms, delegated to HF's own logits warpers so sampling matches
``generate(do_sample=True, temperature=..., top_k=..., top_p=...)`` exactly (same order: temperature,
top-k, top-p)."""

from __future__ import annotations

import torch
from .coupling import check_coupling, gumbel_pick
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)


class SamplingConfig:
    def __init__(self, do_sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, coupling: str = "rejection"):
        if do_sample and (temperature is None or temperature <= 0):
            raise ValueError(f"temperature must be > 0 when sampling, got {temperature}")
        if top_k is not None and top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        if top_p is not None and not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        self.do_sample = do_sample
        # how sampled tokens are drawn and drafts verified: p/q rejection, or the Gumbel-max coupling
        # (mmspec.verifiers.coupling: every sampled token argmax(warped logits + noise fixed per position))
        self.coupling = check_coupling(coupling, do_sample)
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self._warpers = []
        if temperature is not None and temperature != 1.0:
            self._warpers.append(TemperatureLogitsWarper(temperature))
        if top_k is not None and top_k != 0:
            self._warpers.append(TopKLogitsWarper(top_k=top_k, min_tokens_to_keep=1))
        if top_p is not None and top_p < 1.0:
            self._warpers.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))

    def warp(self, logits: torch.Tensor) -> torch.Tensor:
        """Warped logits for any leading shape [..., V] (computed in float32)."""
        shape = logits.shape
        scores = logits.reshape(-1, shape[-1]).float()
        for w in self._warpers:
            scores = w(None, scores)
        return scores.view(shape)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.warp(logits), dim=-1)

    @property
    def gumbel(self) -> bool:
        """Sampling under the Gumbel-max coupling (tokens are argmax(warped logits + the position's noise))."""
        return self.coupling == "gumbel"

    def pick(self, logits: torch.Tensor, generator: torch.Generator | None = None,
             noise: torch.Tensor | None = None) -> torch.LongTensor:
        """Next token from logits [B, V]: argmax (greedy), a draw from the warped distribution, or under the Gumbel
        coupling argmax(warped logits + ``noise``)."""
        if not self.do_sample:
            return logits.argmax(-1)
        if self.gumbel:
            return gumbel_pick(self.warp(logits), noise)
        return torch.multinomial(self.probs(logits), 1, generator=generator).squeeze(-1)
