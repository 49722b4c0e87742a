"""Speculate only where it pays: a wrapper that, step by step, drafts with any drafter or verifies the root alone.

The idea of SGLang's auto-spec and of load-aware verify lengths (DSpark): speculation buys fewer sequential steps
with more compute per step, and when a step's compute grows (a large batch, a slow drafter, a prompt the drafter
cannot guess) a plain step emits more tokens per second. Per ``generate`` call the wrapper measures both kinds of
step as they run — a drafted step's drafting + verification time and the tokens it emitted per row, a plain
step's time (one token per row) — and takes the kind with the higher rate:

    draft next step  ⟺  τ_step / t_draft_step  ≥  1 / t_plain_step

with each kind's last eight steps (the median time, the mean tokens). It starts by drafting (the first drafted step, which also feeds the
prompt to the drafter, is not measured), takes one plain step to measure it, and re-tries the kind it is not using
every ``probe_every`` steps (doubling the interval, up to 64, while the probes lose), so a change in acceptance
or load is seen. A later call at the same batch size starts from the last call's measurements. A plain step is the
root alone (what :class:`~mmspec.drafters.no_draft.NoDrafter` verifies), and the inner drafter still observes it
(it catches up on the tokens it did not draft next time it drafts), so the output is exactly what plain decoding
gives under greedy and the target's distribution under sampling, whatever the choices.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..state import DraftContext
from ..tree import DraftTree
from ..verifiers.acceptance import AcceptResult
from .base import Drafter


@dataclass
class _Rate:
    """The recent steps of one kind: seconds and tokens emitted per row; their medians resist the odd slow step
    (a shared machine, a first call's lazy set-up) that would swing an average for many steps."""
    window: int = 8
    samples: list = field(default_factory=list)

    def add(self, seconds: float, tokens: float) -> None:
        self.samples = (self.samples + [(seconds, tokens)])[-self.window:]

    @property
    def seconds(self) -> float | None:
        return statistics.median(s for s, _ in self.samples) if self.samples else None

    @property
    def rate(self) -> float | None:
        """Tokens per row per second: the mean tokens a step emits (acceptance is skewed: a few long runs carry
        it) over the median step time."""
        if not self.samples:
            return None
        return statistics.fmean(t for _, t in self.samples) / max(self.seconds, 1e-9)


MAX_PROBE_EVERY = 64  # probes that keep losing space out to this many steps (times the drafted step's cost)
HYSTERESIS = 0.15


@dataclass
class _AdaptiveRun:
    inner: Any  # the inner drafter's state for this call
    drafted: _Rate = field(default_factory=_Rate)
    plain: _Rate = field(default_factory=_Rate)
    step: int = 0
    drafting: bool = True  # the kind of the step in flight
    since_switch: int = 0  # steps of the current kind since it was chosen
    t_proposed: float = 0.0
    t_draft: float = 0.0  # drafting time of the step in flight
    drafted_steps: int = 0
    plain_steps: int = 0
    rows: int = 1
    probe_every: int = 8  # the current interval between probes (doubles while probes lose)
    probing: bool = False  # the step in flight is a probe of the kind not in use
    fed: bool = False  # the inner drafter has drafted once in this call (its prompt prefill is paid)


class AdaptiveDrafter(Drafter):
    """``AdaptiveDrafter(inner)``: ``inner``'s drafts where they raise tokens per second, plain steps elsewhere.
    ``probe_every``: steps between two tries of the kind not in use; ``margin``: the drafted rate must beat the
    plain one by this factor (> 1 keeps plain steps on a tie)."""

    def __init__(self, inner: Drafter, probe_every: int = 8, margin: float = 1.0):
        if not isinstance(inner, Drafter):
            raise ValueError(f"AdaptiveDrafter wraps a Drafter (e.g. mmspec.pipeline(...).drafter), got "
                             f"{type(inner).__name__}")
        if isinstance(probe_every, bool) or not isinstance(probe_every, int) or probe_every < 2:
            raise ValueError(f"probe_every must be an int >= 2, got {probe_every!r}")
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) or margin <= 0:
            raise ValueError(f"margin must be a finite number > 0, got {margin!r}")
        self.inner, self.probe_every, self.margin = inner, probe_every, margin
        self.vocab_size = inner.vocab_size
        self.needs_target_hidden = inner.needs_target_hidden
        # per batch size, the recent steps of the last call: the next call at that size starts from them instead
        # of drafting to find out (what a server learns over time); a dict write per step is safe across threads
        self._memory: dict[int, tuple[list, list]] = {}

    @property
    def max_nodes(self) -> int:
        return self.inner.max_nodes

    def target_features(self, hidden_states: tuple) -> torch.Tensor:
        return self.inner.target_features(hidden_states)

    def check_inputs(self, prefill_inputs: dict) -> None:
        self.inner.check_inputs(prefill_inputs)

    def begin(self, context: DraftContext) -> _AdaptiveRun:
        rows = context.state.tokens.shape[0]
        run = _AdaptiveRun(self.inner.begin(context), rows=rows, probe_every=self.probe_every)
        known = self._memory.get(rows)
        if known is not None:
            run.drafted.samples, run.plain.samples = list(known[0]), list(known[1])
        return run

    def _choose(self, run: _AdaptiveRun) -> bool:
        """Whether the next step drafts."""
        if run.drafted.seconds is None:
            return True  # draft first (the call's first drafted step also feeds the prompt: not measured)
        if run.plain.seconds is None:
            return False  # then one plain step
        # hysteresis: the kind in use is kept until the other one is 15% better (the estimates are noisy)
        better = run.drafted.rate >= self.margin * run.plain.rate * (1 - HYSTERESIS if run.drafting else 1 + HYSTERESIS)
        if run.probing:  # a probe of the kind not in use just ran: did it win?
            if run.drafting and run.since_switch == 0:
                return True  # a drafted probe's first step only brings the drafter up to date: measure the next
            run.probing = False
            lost = better != run.drafting
            run.probe_every = min(2 * run.probe_every, MAX_PROBE_EVERY) if lost else self.probe_every
            return better
        # a drafted probe costs what a drafted step costs: probe as much less often as it is dearer than a plain step
        dearer = max(1.0, run.drafted.seconds / max(run.plain.seconds, 1e-9)) if not run.drafting else 1.0
        if run.since_switch >= run.probe_every * dearer:
            run.probing = True
            return not run.drafting  # re-try the other kind now and then
        return better

    def propose(self, context: DraftContext, run: _AdaptiveRun) -> DraftTree:
        drafting = self._choose(run)
        run.since_switch = run.since_switch + 1 if drafting == run.drafting else 0
        run.drafting = drafting
        t0 = time.perf_counter()
        tree = self.inner.propose(context, run.inner) if drafting else DraftTree.root_only(context.state.roots)
        run.t_proposed = time.perf_counter()
        run.t_draft = run.t_proposed - t0 if drafting else 0.0
        return tree

    def observe(self, context: DraftContext, run: _AdaptiveRun, tree: DraftTree, result: AcceptResult,
                hidden: torch.Tensor | None = None) -> None:
        verified = time.perf_counter() - run.t_proposed  # the target's forward, acceptance and commit
        t0 = time.perf_counter()
        self.inner.observe(context, run.inner, tree, result, hidden)
        observed = time.perf_counter() - t0
        if run.drafting and (not run.fed or run.since_switch == 0):
            # the call's first drafted step feeds the prompt to the drafter, a step after plain ones the tokens it
            # did not draft: neither is what a drafted step costs
            run.fed = True
        elif run.drafting:
            active = context.state.active
            emitted = (result.num_accepted.to(active.device)[active].float() + 1).mean().item() if active.any() \
                else 1.0
            run.drafted.add(run.t_draft + verified + observed, emitted)
            run.drafted_steps += 1
        else:
            run.plain.add(verified + observed, 1.0)
            run.plain_steps += 1
        run.step += 1
        if run.drafted.samples and run.plain.samples:
            self._memory[run.rows] = (list(run.drafted.samples), list(run.plain.samples))


__all__ = ["AdaptiveDrafter"]
