"""What the decoding loop knows about one ``generate`` call, shared with drafters."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .verifiers.coupling import GumbelNoise
from .verifiers.logits import SamplingConfig


@dataclass
class UnseenTokens:
    """Per row, the buffered tokens a drafter has not fed yet (at least the root), left-aligned.

    Column ``j`` of row ``b`` is buffer position ``seen[b] + j``; columns past ``counts[b]`` repeat a clamped
    position and are padding (``valid`` False)."""

    tokens: torch.LongTensor  # [B, m]
    positions: torch.LongTensor  # [B, m] buffer positions of the tokens
    valid: torch.BoolTensor  # [B, m]
    counts: torch.LongTensor  # [B] real tokens per row


@dataclass
class DecodeState:
    """Token buffer of the whole batch.

    Row ``b`` holds ``tokens[b, :lengths[b]]``: the left-padded prompt (``starts[b]`` padding slots),
    then every generated token. The last one is the *root* of the next draft tree: it is known but not
    yet in the target's KV cache.
    """

    tokens: torch.LongTensor  # [B, capacity]
    lengths: torch.LongTensor  # [B]
    starts: torch.LongTensor  # [B]
    prompt_length: int
    active: torch.BoolTensor  # [B] rows still generating
    sampling: SamplingConfig
    generator: torch.Generator | None = None
    noise: GumbelNoise | None = None  # the Gumbel coupling's noise per generated position (sampling.gumbel only)

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def roots(self) -> torch.LongTensor:
        return self.tokens.gather(1, (self.lengths - 1)[:, None]).squeeze(1)

    def noise_after_root(self, depth: torch.LongTensor) -> torch.Tensor:
        """The Gumbel coupling's noise [B, n, V] of the token that follows a node ``depth`` [B, n] levels below each
        row's root (depth 0: the token after the root, which a drafter's first slot proposes)."""
        first = (self.lengths - self.prompt_length).to(depth.device)  # generated index of the token after the root
        return self.noise.at(first[:, None] + depth)

    def row(self, b: int) -> torch.LongTensor:
        """Real tokens of one row (no padding)."""
        return self.tokens[b, int(self.starts[b]): int(self.lengths[b])]

    def unseen(self, seen: torch.LongTensor) -> UnseenTokens:
        """The tokens after the first ``seen[b]`` of each row, on ``seen``'s device: what a drafter that has fed
        ``seen[b]`` tokens of row b into its own cache feeds next (every drafter with a cache catches up this way)."""
        dev = seen.device
        counts = self.lengths.to(dev) - seen
        j = torch.arange(int(counts.max()), device=dev)[None, :]
        positions = (seen[:, None] + j).clamp(max=self.tokens.shape[1] - 1)
        return UnseenTokens(self.tokens.to(dev).gather(1, positions), positions, j < counts[:, None], counts)

    def select_rows(self, keep: torch.LongTensor) -> None:
        """Keep only rows ``keep`` (in place: drafters hold this object)."""
        keep = keep.to(self.tokens.device)
        self.tokens, self.lengths = self.tokens.index_select(0, keep), self.lengths.index_select(0, keep)
        self.starts, self.active = self.starts.index_select(0, keep), self.active.index_select(0, keep)
        if self.noise is not None:
            self.noise.select_rows(keep)

    def append(self, new_tokens: torch.LongTensor, counts: torch.LongTensor) -> None:
        """Append ``new_tokens[b, :counts[b]]`` to each row (one scatter; the buffer's last column is
        scratch for the padded entries and never part of a row)."""
        W = new_tokens.shape[1]
        j = torch.arange(W, device=new_tokens.device)[None, :]
        scratch = self.tokens.shape[1] - 1
        idx = torch.where(j < counts[:, None], self.lengths[:, None] + j, scratch)
        self.tokens.scatter_(1, idx, new_tokens)
        self.lengths = self.lengths + counts


@dataclass
class DraftContext:
    """Everything one ``generate`` call offers its drafter, built by the loop after the target's prefill.

    Drafters read what they need and ignore the rest; they never change it (their own per-call state is the
    object their ``begin`` returns). ``hidden`` and ``image_embeds`` are filled only for drafters whose
    ``needs_target_hidden`` asks the loop for the target's features."""

    state: DecodeState  # the live token buffer (grows after every step), sampling settings and generator
    prompt_ids: torch.LongTensor  # [B, P] the prompt as the target saw it, left-padded, image placeholders kept
    attention_mask: torch.LongTensor  # [B, P] 1 = real prompt token
    max_length: int  # upper bound on ``state.lengths`` for this call
    image_token_id: int | None = None  # the target's image placeholder id (None: a text-only target)
    hidden: torch.Tensor | None = None  # [B, P, F] the target's prefill features (the drafter's target_features:
    # by default the last layer's hidden states)
    image_embeds: torch.Tensor | None = None  # [n_image_tokens, H] projected image embeddings, in the
    # row-major order of image_mask (the order LLaVA scatters them into the prompt)
    rows_leave: bool = False  # the loop drops finished rows from this call (drafters that can follow, see select_rows)

    def select_rows(self, keep: torch.LongTensor) -> None:
        """Keep only rows ``keep`` of the prompt, its features and its pictures' embeddings (in place, as
        :meth:`DecodeState.select_rows`; the loop selects ``state`` itself)."""
        rows = keep.to(self.prompt_ids.device)
        if self.image_embeds is not None:  # the kept rows' image tokens, row-major as before
            token_rows = self.image_mask.nonzero()[:, 0]
            self.image_embeds = self.image_embeds[torch.isin(token_rows, rows).to(self.image_embeds.device)]
        self.prompt_ids = self.prompt_ids.index_select(0, rows)
        self.attention_mask = self.attention_mask.index_select(0, rows)
        if self.hidden is not None:
            self.hidden = self.hidden.index_select(0, keep.to(self.hidden.device))

    @property
    def image_mask(self) -> torch.BoolTensor | None:
        """[B, P] image placeholder positions of the prompt (None for a text-only target)."""
        return None if self.image_token_id is None else self.prompt_ids == self.image_token_id

    @property
    def sampling(self) -> SamplingConfig:
        return self.state.sampling

    @property
    def generator(self) -> torch.Generator | None:
        return self.state.generator
