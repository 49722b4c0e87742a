"""Gumbel-coupled sampling: a sampled token as a deterministic function of noise fixed per position.

Gumbel-max trick: with g_1 … g_V i.i.d. Gumbel(0, 1), ``argmax_x (log p(x) + g_x)`` is a draw from p. Fix each
generated position's noise in advance (``GumbelNoise``: drawn from the call's generator, position by position) and
the target's sample at a position is ``argmax(warped logits + g)``, whatever happens around it. Speculative decoding
then verifies sampled drafts the way it verifies greedy ones (Daliri, Musco & Suresh 2024, "Coupling without
communication and drafter-invariant speculative decoding", §3: a draft is kept iff it equals the target's
Gumbel-max token): every emitted token is the target's own Gumbel-max token, so the output is exactly the target's
distribution (the noise at a position is independent of everything before it) and, for a seed, *the same tokens*
as plain sampling with the same coupling (``mmspec-plain``, ``method="ar"``) — whatever the drafter proposed.

What the drafter gains: it sees the same noise. A drafter's slot proposes ``argmax(log q + g)`` (the target's token
whenever q and p rank the perturbed codes alike), and a tree's siblings are the next best under ``log q + g``: a
list of candidates matched to this position's noise, where p/q rejection can only try independent draws of q.
"""

from __future__ import annotations

import torch

COUPLINGS = ("rejection", "gumbel")  # p/q rejection (the default), or the Gumbel-max coupling above
_CHUNK = 32  # positions drawn at a time: noise over the vocabulary is drawn as the generation reaches it


def gumbel_like(shape, generator: torch.Generator | None, device) -> torch.Tensor:
    """Gumbel(0, 1) noise of ``shape`` (float32), drawn on the generator's device and moved to ``device``."""
    gen_device = generator.device if generator is not None else torch.device("cpu")
    u = torch.rand(shape, generator=generator, device=gen_device, dtype=torch.float32)
    tiny = torch.finfo(torch.float32).tiny
    return (-torch.log(-torch.log(u.clamp(min=tiny, max=1.0 - 2.0 ** -24)))).to(device)


class GumbelNoise:
    """The noise of every generated position of one call, per row: ``at(index)`` is g for generated token number
    ``index`` (0 = the first token after the prompt). Drawn in chunks of positions, in position order, always for
    the call's full batch (a row's noise does not depend on which other rows are still generating), so a seed
    fixes every position's noise however the decoding proceeds."""

    def __init__(self, batch_size: int, vocab_size: int, generator: torch.Generator | None, device):
        self.vocab_size, self.generator, self.device = vocab_size, generator, device
        self.rows = torch.arange(batch_size, device=device)  # the call's rows still held, in the batch's order
        self.batch_size = batch_size
        self.drawn = torch.empty(batch_size, 0, vocab_size, device=device)  # [B_call, positions kept, V]
        self.held = self.drawn  # the rows held
        self.base = 0  # the generated index of drawn[:, 0] (chunks every row has passed are released)
        self.chunks = 0  # chunks drawn so far

    @classmethod
    def for_call(cls, batch_size: int, vocab_size: int, generator: torch.Generator | None, device) -> "GumbelNoise":
        """A call's noise, from a generator of its own seeded by one draw of the call's ``generator`` (None: torch's
        global one): whatever else draws from the call's generator later (a drafter that samples) leaves every
        position's noise as it is, so a seed gives the same tokens with any drafter or none."""
        gen_device = generator.device if generator is not None else torch.device("cpu")
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator, device=gen_device))
        return cls(batch_size, vocab_size, torch.Generator(device=gen_device).manual_seed(seed), device)

    def at(self, index: torch.LongTensor) -> torch.Tensor:
        """Noise [B, n, V] at the generated indices ``index`` [B, n] of the rows held (an index before the released
        positions, a finished row's, reads the first position kept: nothing it reads is emitted)."""
        last = int(index.max())
        if last >= self.chunks * _CHUNK:
            n = (last + 1 - self.chunks * _CHUNK + _CHUNK - 1) // _CHUNK
            chunks = [gumbel_like((self.batch_size, _CHUNK, self.vocab_size), self.generator, self.device)
                      for _ in range(n)]  # one chunk per draw: the same noise however far a call reaches
            self.drawn, self.chunks = torch.cat([self.drawn, *chunks], 1), self.chunks + n
            self.held = self.drawn[self.rows]
        at = (index - self.base).clamp(min=0)
        return self.held.gather(1, at[..., None].expand(*at.shape, self.vocab_size))

    def release_before(self, index: int) -> None:
        """Drop the chunks wholly before generated index ``index`` (every row still generating is past them): a
        long call over a large vocabulary holds a few chunks, not its whole length."""
        drop = min((index - self.base) // _CHUNK * _CHUNK, self.drawn.shape[1])  # (chunks not drawn yet stay due)
        if drop > 0:
            self.drawn, self.base = self.drawn[:, drop:], self.base + drop
            self.held = self.drawn[self.rows]

    def select_rows(self, keep: torch.LongTensor) -> None:
        """Keep rows ``keep`` of those held (the loop dropped finished rows)."""
        self.rows = self.rows[keep.to(self.rows.device)]
        self.held = self.drawn[self.rows]


class CoupledDraws:
    """What a drafter drafts with under the Gumbel coupling: the call's sampling settings and the noise [B, D, V] of
    the D positions after each row's root. A drafter scores token x at depth d (d = 0: the token after the root) by
    log q(x) + g_d(x): its best is the target's own draw wherever q ranks the perturbed tokens as p does."""

    gumbel = True
    do_sample = True

    def __init__(self, sampling, noise: torch.Tensor):
        self.sampling, self.noise = sampling, noise

    def perturbed(self, logits: torch.Tensor, depth: int) -> torch.Tensor:
        """log q + g at ``depth`` for logits [B, V] or [B, F, V] (F nodes at that depth)."""
        g = self.noise[:, depth]
        return torch.log_softmax(self.sampling.warp(logits), -1) + (g if logits.dim() == 2 else g[:, None])

    def perturbed_slots(self, logits: torch.Tensor) -> torch.Tensor:
        """log q + g for a block's slots [B, k, V]: slot j at depth j."""
        return torch.log_softmax(self.sampling.warp(logits), -1) + self.noise[:, : logits.shape[1]]


def gumbel_pick(scores: torch.Tensor, noise: torch.Tensor) -> torch.LongTensor:
    """The Gumbel-max token: ``argmax(scores + noise)`` over the last axis (``scores``: warped logits or log q)."""
    return (scores.float() + noise).argmax(-1)


def check_coupling(coupling: str, do_sample: bool, relaxed: bool = False) -> str:
    """``coupling`` checked: one of :data:`COUPLINGS`. It is a sampling setting: under greedy decoding (no noise
    to couple) it is ignored as the other sampling settings are, and "rejection" comes back. The Gumbel coupling
    verifies losslessly: LANTERN's relaxation moves mass between candidates, which a fixed-noise argmax cannot."""
    if coupling not in COUPLINGS:
        raise ValueError(f"coupling must be one of {COUPLINGS}, got {coupling!r}")
    if not do_sample:
        return "rejection"
    if coupling == "gumbel" and relaxed:
        raise ValueError("coupling='gumbel' verifies losslessly; LANTERN / LANTERN++ relaxed acceptance needs "
                         "coupling='rejection'")
    return coupling


__all__ = ["COUPLINGS", "CoupledDraws", "GumbelNoise", "check_coupling", "gumbel_like", "gumbel_pick"]
