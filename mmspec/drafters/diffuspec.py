"""DiffuSpec (Li et al., 2025, "DiffuSpec: Unlocking Diffusion Language Models for Speculative
Decoding"): training-free drafting from a diffusion LM's one-pass token lattice.

* **Causal-consistency path search (CPS, Sec. 3.2):** per slot keep the smallest top-m set whose mass
  reaches ``mass`` (0.8), at most ``max_candidates`` (15); left-to-right beam search (``beam`` = 3) scores
  a path by Σ_i [λ·log q_dlm(π_i) + (1−λ)·log p_causal(π_i | prefix, π_<i)], λ = 0.5, where p_causal is a
  cheap causal proxy (the zoo's token n-gram model, :class:`~mmspec.drafters.ngram.NGramLM`). A path
  that reaches EOS stops expanding; finished and unfinished paths are compared by mean score per token
  (a plain sum would always prefer the path that stopped first).
* **Adaptive draft length (ADL, Sec. 3.3):** L_gen = min(first EOS index − 1, k) of the raw (argmax)
  draft, L_acc = accepted drafts; EMAs with ρ = 0.5;
  k_next = clip(round(EMA_gen + δ·[EMA_acc ≥ EMA_gen]), k_min, k_max). The paper's δ = 10 and
  k ∈ [20, 30] are for 7B models; the defaults here (δ = 4, k ∈ [4, 16]) are scaled to the zoo.
* **Confidence cut (beyond the paper, ``confidence``):** L_gen also ends after the raw draft's first slot whose
  argmax probability is below ``confidence`` (the rule of DEER's block and the AR chain, here per row), and CPS
  searches only those slots. Without it ADL never moves on
  code: the raw draft of a 64-token completion holds no EOS, so L_gen = k and k stays where it started.
* **Lattice tree (beyond the paper):** instead of sending only the best path, merge all final beams into
  a prefix tree and verify it in one target pass (``lattice=True``).

Drafts are deterministic functions of the lattice, so under sampling the verifier treats them as point
masses and stays lossless.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cache import SpecKVCache
from ..state import DraftContext
from ..tree import DraftTree
from ..verifiers.acceptance import AcceptResult
from .base import Drafter, check_confidence
from .diffusion import DiffusionLM


@dataclass
class CPSConfig:
    mass: float = 0.8
    max_candidates: int = 15
    beam: int = 3
    lam: float = 0.5

    def __post_init__(self):
        if not 0 < self.mass <= 1 or self.max_candidates < 1 or self.beam < 1 or not 0 <= self.lam <= 1:
            raise ValueError(f"invalid CPS settings {self}: need 0 < mass <= 1, max_candidates >= 1, beam >= 1, "
                             "0 <= lam <= 1")


@dataclass
class ADLConfig:
    k_min: int = 4
    k_max: int = 16
    delta: int = 4
    rho: float = 0.5

    def __post_init__(self):
        if not 1 <= self.k_min <= self.k_max or self.delta < 0 or not 0 <= self.rho < 1:
            raise ValueError(f"invalid ADL settings {self}: need 1 <= k_min <= k_max, delta >= 0, 0 <= rho < 1")


def candidate_sets(logp: torch.Tensor, mass: float, cap: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per slot, the smallest top-m set with probability mass >= ``mass`` (m <= cap).

    Returns ``(tokens [k, cap], logq [k, cap], m [k])``; entries past m are padding."""
    top_lp, top_tok = logp.topk(min(cap, logp.shape[-1]), dim=-1)
    before = torch.cumsum(top_lp.exp(), dim=-1) - top_lp.exp()  # mass of the higher-ranked candidates
    m = (before < mass).sum(-1).clamp(min=1)
    return top_tok, top_lp, m


class CausalPathSearch:
    """CPS over one row's lattice (see module docstring)."""

    def __init__(self, causal=None, config: CPSConfig | None = None, eos_token_id: int | None = None):
        self.causal = causal
        self.cfg = config or CPSConfig()
        self.eos = eos_token_id

    def search(self, logp: torch.Tensor, context: list[int]) -> list[tuple[list[int], float]]:
        """Beams (tokens, mean score) over a [k, V] lattice, best first."""
        cfg = self.cfg
        toks, lq, m = candidate_sets(logp, cfg.mass, cfg.max_candidates)
        toks, lq, m = toks.tolist(), lq.tolist(), m.tolist()
        beams: list[tuple[list[int], float, bool]] = [([], 0.0, False)]
        for i in range(len(m)):
            cand, cand_lq = toks[i][: m[i]], lq[i][: m[i]]
            live = [b for b in beams if not b[2]]
            if not live:
                break
            if self.causal is not None and cfg.lam < 1:
                ctx = [context + b[0] for b in live]
                lp = self.causal.score_batch(ctx, torch.tensor([cand] * len(live))).tolist()
            else:
                lp = [[0.0] * len(cand)] * len(live)
            grown = []
            for b, row_lp in zip(live, lp):
                for c, q, p in zip(cand, cand_lq, row_lp):
                    grown.append((b[0] + [c], b[1] + cfg.lam * q + (1 - cfg.lam) * p, c == self.eos))
            done = [b for b in beams if b[2]]
            beams = sorted(done + grown, key=lambda b: b[1] / len(b[0]), reverse=True)[: cfg.beam]
        return [(b[0], b[1] / max(1, len(b[0]))) for b in beams]


def prefix_tree(paths: list[list[int]]) -> tuple[list[int], list[int]]:
    """Merge token paths into a prefix tree: (tokens, parents) in BFS order, root excluded (parent -1 =
    the root)."""
    nodes: dict[tuple[int, ...], int] = {}
    tokens, parents = [], []
    depth = max((len(p) for p in paths), default=0)
    for d in range(1, depth + 1):
        for p in paths:
            if len(p) >= d and tuple(p[:d]) not in nodes:
                nodes[tuple(p[:d])] = len(tokens)
                tokens.append(p[d - 1])
                parents.append(nodes[tuple(p[: d - 1])] if d > 1 else -1)
    return tokens, parents


@dataclass
class DiffuSpecRun:
    """One call's drafting state: the diffusion LM's cache and the ADL schedule."""

    cache: SpecKVCache | None  # see DiffusionLM.begin
    k: int  # draft length of the next step
    ema_gen: float | None = None  # EMA of L_gen
    ema_acc: float | None = None  # EMA of L_acc
    gen_len: torch.LongTensor | None = None  # [B] L_gen of the last proposal


class DiffuSpecDrafter(Drafter):
    """DiffuSpec drafting from a :class:`DiffusionLM` (CPS and ADL switchable, optional lattice tree)."""

    def __init__(self, dlm: DiffusionLM, causal=None, eos_token_id: int | None = None, num_tokens: int = 8,
                 cps: bool = True, adl: bool = True, lattice: bool = False, cps_config: CPSConfig | None = None,
                 adl_config: ADLConfig | None = None, confidence: float | None = None):
        check_confidence(confidence)
        self.confidence = confidence
        self.dlm = dlm
        self.vocab_size = dlm.vocab_size
        self.cps_on, self.adl_on, self.lattice = cps, adl, lattice
        self.cps = CausalPathSearch(causal, cps_config, eos_token_id)
        self.adl = adl_config or ADLConfig()
        self.eos = eos_token_id
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
        if lattice and not cps:
            raise ValueError("lattice=True merges CPS beams: it needs cps=True")
        self.k0 = min(max(num_tokens, self.adl.k_min), self.adl.k_max) if adl else num_tokens

    @property
    def max_nodes(self) -> int:
        k = self.adl.k_max if self.adl_on else self.k0
        return 1 + k * (self.cps.cfg.beam if self.lattice else 1)

    drops_rows = True  # select_rows narrows the diffusion LM's cache (the ADL schedule is the call's, not a row's)

    def select_rows(self, run: DiffuSpecRun, keep: torch.LongTensor) -> DiffuSpecRun:
        if run.cache is not None:
            run.cache.select_rows(keep)
        run.gen_len = None  # a step's own: the next proposal sets it
        return run

    def begin(self, context: DraftContext) -> DiffuSpecRun:
        max_slots = self.adl.k_max if self.adl_on else self.k0
        return DiffuSpecRun(self.dlm.begin(context.state, context.max_length, max_slots), self.k0)

    @torch.no_grad()
    def propose(self, context: DraftContext, run: DiffuSpecRun) -> DraftTree:
        state = context.state
        k = run.k
        logp = self.dlm.slot_logprobs(state, k, run.cache)  # [B, k, V]
        B, dev = logp.shape[0], logp.device
        top, raw = logp.max(-1)
        before_eos = self._generated_length(raw)
        span = self._trusted_span(top)  # the slots CPS searches (it stops at an EOS of its own)
        run.gen_len = torch.minimum(before_eos, span)
        roots = state.roots.to(dev)
        if not self.cps_on:
            with_eos = torch.clamp(before_eos + (before_eos < k).long(), max=k)  # keep the EOS itself
            return DraftTree.chain(roots, raw, lengths=torch.minimum(with_eos, span))
        order = self.cps.causal.order - 1 if getattr(self.cps.causal, "order", None) else 0
        rows_paths = []
        for b in range(B):
            ctx = state.row(b)[-order:].tolist() if order > 0 else []
            beams = self.cps.search(logp[b, : int(span[b])], ctx) if bool(state.active[b]) else [([], 0.0)]
            rows_paths.append([p for p, _ in beams] if self.lattice else [beams[0][0]])
        return self._tree(roots, rows_paths)

    def _trusted_span(self, top_logp: torch.Tensor) -> torch.Tensor:
        """Per row, the slots up to and including the first whose raw draft has probability below ``confidence``
        (all k without a threshold)."""
        B, k = top_logp.shape
        if self.confidence is None:
            return torch.full((B,), k, dtype=torch.long, device=top_logp.device)
        lead = (top_logp.exp() >= self.confidence).long().cumprod(1).sum(1)  # leading trusted slots
        return torch.clamp(lead + 1, max=k)

    def _generated_length(self, raw: torch.Tensor) -> torch.Tensor:
        """L_gen per row: drafts before the first EOS (k without one)."""
        k = raw.shape[1]
        if self.eos is None:
            return torch.full((raw.shape[0],), k, dtype=torch.long, device=raw.device)
        is_eos = raw == self.eos
        first = torch.where(is_eos.any(1), is_eos.float().argmax(1), torch.full_like(is_eos[:, 0], k, dtype=torch.long))
        return first.long()

    @staticmethod
    def _tree(roots: torch.Tensor, rows_paths: list[list[list[int]]]) -> DraftTree:
        B, dev = roots.shape[0], roots.device
        built = [prefix_tree(paths) for paths in rows_paths]
        n = 1 + max((len(t) for t, _ in built), default=0)
        tokens = torch.zeros(B, n, dtype=torch.long, device=dev)
        parents = torch.zeros(B, n, dtype=torch.long, device=dev)
        valid = torch.zeros(B, n, dtype=torch.bool, device=dev)
        tokens[:, 0], parents[:, 0], valid[:, 0] = roots, -1, True
        for b, (toks, pars) in enumerate(built):
            m = len(toks)
            tokens[b, 1: 1 + m] = torch.tensor(toks, dtype=torch.long)
            parents[b, 1: 1 + m] = torch.tensor(pars, dtype=torch.long) + 1
            valid[b, 1: 1 + m] = True
            parents[b, 1 + m:] = torch.arange(m, n - 1)  # padding: a harmless chain off the last node
        if all(len(p) <= 1 for p in rows_paths):
            lengths = valid.sum(1) - 1
            return DraftTree.chain(roots, tokens[:, 1:], lengths=lengths)
        return DraftTree(tokens, parents, valid)

    def observe(self, context: DraftContext, run: DiffuSpecRun, tree: DraftTree, result: AcceptResult,
                hidden: torch.Tensor | None = None) -> None:
        """ADL: the next draft length from the EMAs of L_gen and L_acc."""
        if not self.adl_on:
            return
        active = context.state.active.to(result.num_accepted.device)
        rho = self.adl.rho
        gen = float(run.gen_len.float().mean())
        acc = float(result.num_accepted[active].float().mean()) if active.any() else gen
        run.ema_gen = gen if run.ema_gen is None else rho * run.ema_gen + (1 - rho) * gen
        run.ema_acc = acc if run.ema_acc is None else rho * run.ema_acc + (1 - rho) * acc
        grow = self.adl.delta if run.ema_acc >= run.ema_gen else 0
        run.k = int(min(max(round(run.ema_gen + grow), self.adl.k_min), self.adl.k_max))


__all__ = ["DiffuSpecDrafter", "DiffuSpecRun", "CausalPathSearch", "CPSConfig", "ADLConfig", "candidate_sets",
           "prefix_tree"]
