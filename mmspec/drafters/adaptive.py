"""Speculate only where it pays: a wrapper that, step by step, drafts with any drafter or verifies the root alone.

The idea of SGLang's auto-spec and of load-aware verify lengths (DSpark): speculation buys fewer sequential steps
with more compute per step, and when a step's compute grows (a large batch, a slow drafter, a prompt the drafter
cannot guess) a plain step emits more tokens per second. Per ``generate`` call the wrapper measures both kinds of
step as they run — a drafted step's drafting + verification time and the tokens it emitted per row, a plain
step's time (one token per row) — and takes the kind with the higher rate:

    draft next step  ⟺  τ_step / t_draft_step  ≥  1 / t_plain_step

with the medians of each kind's last five steps. It starts by drafting (the first step, which also feeds the prompt to the
drafter, is not measured), takes one plain step to measure it, and re-tries the
kind it is not using every ``probe_every`` steps, so a change in acceptance or load is seen. A plain step is the
root alone (what :class:`~mmspec.drafters.no_draft.NoDrafter` verifies), and the inner drafter still observes it
(it catches up on the tokens it did not draft next time it drafts), so the output is exactly what plain decoding
gives under greedy and the target's distribution under sampling, whatever the choices.
"""

from __future__ import annotations

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
    window: int = 5
    samples: list = field(default_factory=list)

    def add(self, seconds: float, tokens: float) -> None:
        self.samples = (self.samples + [(seconds, tokens)])[-self.window:]

    @property
    def seconds(self) -> float | None:
        return statistics.median(s for s, _ in self.samples) if self.samples else None

    @property
    def rate(self) -> float | None:
        if not self.samples:
            return None
        return statistics.median(t for _, t in self.samples) / max(self.seconds, 1e-9)


WARMUP_STEPS = 2  # drafted steps at the start of a call that are not measured


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


class AdaptiveDrafter(Drafter):
    """``AdaptiveDrafter(inner)``: ``inner``'s drafts where they raise tokens per second, plain steps elsewhere.
    ``probe_every``: steps between two tries of the kind not in use; ``margin``: the drafted rate must beat the
    plain one by this factor (> 1 keeps plain steps on a tie)."""

    def __init__(self, inner: Drafter, probe_every: int = 8, margin: float = 1.0):
        if probe_every < 2 or margin <= 0:
            raise ValueError(f"probe_every must be >= 2 and margin > 0; got {probe_every}, {margin}")
        self.inner, self.probe_every, self.margin = inner, probe_every, margin
        self.vocab_size = inner.vocab_size
        self.needs_target_hidden = inner.needs_target_hidden

    @property
    def max_nodes(self) -> int:
        return self.inner.max_nodes

    def target_features(self, hidden_states: tuple) -> torch.Tensor:
        return self.inner.target_features(hidden_states)

    def check_inputs(self, prefill_inputs: dict) -> None:
        self.inner.check_inputs(prefill_inputs)

    def begin(self, context: DraftContext) -> _AdaptiveRun:
        return _AdaptiveRun(self.inner.begin(context))

    def _choose(self, run: _AdaptiveRun) -> bool:
        """Whether the next step drafts."""
        if run.step < WARMUP_STEPS + 1:
            return True  # draft first (the first steps, which also feed the prompt to the drafter, are not measured)
        if run.plain.seconds is None:
            return False  # then one plain step
        if run.since_switch >= self.probe_every:
            return not run.drafting  # re-try the other kind now and then
        return run.drafted.rate >= self.margin * run.plain.rate

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
        if run.drafting and run.step < WARMUP_STEPS:
            pass  # the drafter's prompt prefill and set-up: not what a drafted step costs
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


__all__ = ["AdaptiveDrafter"]
