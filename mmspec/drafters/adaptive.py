"""Speculate only where it pays: a wrapper that, step by step, drafts with any drafter or verifies the root alone.

The idea of SGLang's auto-spec and of load-aware verify lengths (DSpark): speculation buys fewer sequential steps
with more compute per step, and when a step's compute grows (a large batch, a slow drafter, a prompt the drafter
cannot guess) a plain step emits more tokens per second. Per ``generate`` call the wrapper measures both kinds of
step as they run — a drafted step's drafting + verification time and the tokens it emitted, a plain step's time
(one token per row) — and takes the kind with the higher rate:

    draft next step  ⟺  τ_step / t_draft_step  ≥  1 / t_plain_step

over each kind's recent steps (the median time; drafted steps over their last 32, since acceptance comes in runs,
plain ones over their last 8). A batch's call ends when its **slowest row** does, so τ_step
of a batch is its slowest row's: the lowest, over the rows still generating, of a row's mean tokens per drafted
step in the window (at batch 1 simply the mean). A batch whose rows accept unevenly gains less from drafting than
its mean acceptance says: the rows that ran ahead wait for the one that did not. Where the loop drops finished rows
and a step costs per row (``DraftContext.rows_leave`` on a CPU), τ_step is what the batch gets under the loop's rule
instead (:func:`narrowed_tokens`), and a narrowed batch judges both kinds afresh (:meth:`AdaptiveDrafter.select_rows`).

It starts by drafting (the call's first drafted step, which also feeds the prompt to the drafter, is not
measured) for four measured steps, takes one plain step to measure it (at one row a probe: drafting stays the kind
in use), and re-tries the kind it is not using every ``probe_every`` steps
(times the drafted step's cost over the plain one's when drafting is the dearer kind), doubling the interval, up to
64, while the probes lose (straight to 64 when the slowest row's rate is a quarter behind and the rows' average
acceptance would not clearly win either), so a change in acceptance or load is seen. The first drafted step after plain ones
catches the drafter up on the tokens it did not draft; it is measured with the others (what a switch costs is a
cost of drafting). A later call at the same batch size starts where the last one stopped: its measurements, the kind in
use, the probe interval and the steps since the last switch (what a server learns over time) — unless drafting won
somewhere in one of the recent calls there (its measured rate beat plain steps'; the calls that ran the last four
prompts: four at one row, the last one from four rows up): then the call keeps the plain steps' measurements but
measures drafting afresh from its opening, as a first call does (one call's prompt says little about the next's: at one
row, one code prompt the drafter could not guess had turned every later call to plain steps). At one row, that
judgement pools the call's own drafted steps with the recent calls' tokens a step, worth four steps of its own: a
prompt's first lines are often the ones the drafter guesses worst, and four such steps had turned HumanEval calls to
plain steps where drafting all the way was 25-35% faster (pooled: 1.59x → 1.66x against always drafting's 1.67x,
interleaved on 24 prompts). A new prompt is often text
the drafter knows again, while the last call may have ended on text it could not guess (a VLM's answer generated past
its end: at batch 1 resuming on plain steps kept 85% of always drafting's speedup); where drafting never wins (a large
batch) a call still starts on plain steps. Such a call's first step drafts all the same when the last call's first
drafted step beat plain steps by the margin a switch to drafting needs (its slowest row's tokens over its time, the
drafter's prompt prefill included): a short answer the drafter knows often comes whole in the first block. That opening
is judged on its own and kept out of the windows and counters, so the resumed kind goes on after it — but at one row,
an opening that wins says the prompt is one the drafter knows, and the call drafts on, judged afresh as after a recent
win (VLM suite, EOS off, 16 prompts × 2 rounds interleaved: 1.18× → 1.22× plain, always drafting 1.30×). A call that judges
drafting afresh (at two rows or more) stops the trial after two measured steps that are far behind the plain steps it
remembers when each costs three plain steps or more.

Where the inner drafter can draft on a plain step without the draft being verified (``shadow_drafts``: DFlash,
prompt lookup) and the call is greedy, a drafting probe is screened first (:mod:`mmspec.drafters.shadow`): a draft
proposed on a plain step is read against the tokens the plain steps then emit, which tells exactly what a drafted
step would have emitted there, at a drafter forward's cost instead of two drafted steps' (at 8–16 rows on a CPU a
drafted step costs five or six plain ones); only where it would have beaten plain steps at the drafted steps' measured
cost does the probe run. A call after one where drafting won resumes then too, with such a draft at once, where a
drafted step is dear. And at a batch size where drafting is hopeless (the last call ended on plain steps, never won,
its probes at the longest interval), three calls in four read no target features at all (:meth:`reads_features`):
they cost what the loop without a drafter costs. With ``tree_sizes`` (off by default) it also
picks among the inner drafter's nested tree sizes per step (:mod:`mmspec.drafters.budgets`). A plain step is the
root alone (what :class:`~mmspec.drafters.no_draft.NoDrafter` verifies), and the inner drafter still
observes it, so the output is exactly what plain decoding gives under greedy and the target's distribution under
sampling, whatever the choices.
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
from .budgets import StepCost, emitted_by, target_continuation
from .shadow import ShadowDraft


class RowTokens(list):
    """A step's tokens per row (None: a row not generating), tagged with the call it ran in: row j of one call and
    row j of another are different prompts, so a row's mean is taken within its call (see :attr:`_Rate.tokens`)."""

    __slots__ = ("call",)

    def __init__(self, values, call: int):
        super().__init__(values)
        self.call = call


@dataclass
class _Rate:
    """The recent steps of one kind: seconds and tokens emitted per row; their medians resist the odd slow step
    (a shared machine, a first call's lazy set-up) that would swing an average for many steps."""
    window: int = 8
    samples: list = field(default_factory=list)
    rows_leave: bool = False  # rows that finish leave the batch and a step costs per row: see `tokens`
    plain_seconds: float | None = None  # a plain step's seconds, for the costs of tree sizes not run (see `add`)
    # (rows, seconds) of a drafted step at a smaller batch size: with this window's own cost, what part of a step
    # does not shrink as rows leave (see `fixed_share`)
    reference: tuple | None = None
    # (tokens a step, weight in steps) of the recent calls' drafted steps, pooled with this window's own steps where
    # a one-row call judges drafting afresh (see `tokens` and AdaptiveDrafter.begin); None: the window alone
    prior: tuple | None = None
    # the last `tokens` and what it was read from: the policy reads a window's rate several times a step, and at 16
    # rows each read walks 32 steps × 16 rows (0.2 ms on a CPU); `add` replaces the sample list, never changes it
    _memo: tuple | None = field(default=None, repr=False, compare=False)

    def like(self, window: int, samples: list, plain_seconds: float | None = None) -> "_Rate":
        """A window of other samples judged the same way (rows leaving, costs, reference)."""
        return _Rate(window, samples, self.rows_leave,
                     self.plain_seconds if plain_seconds is None else plain_seconds, self.reference)

    def add(self, seconds, tokens) -> None:
        """``seconds``: a float, or ``(StepCost, width, largest)`` for a tree size ``width`` nodes wide measured in
        a step that verified a tree of ``StepCost.width`` (the largest size if ``largest``); read off a larger
        tree's step, its cost is estimated when the rate is asked for, from the plain step's cost then known.
        ``tokens``: a float, or a per-row list of tokens emitted (None for a row that was not generating)."""
        self.samples = (self.samples + [(seconds, tokens)])[-self.window:]

    def _seconds(self, cost) -> float:
        if not isinstance(cost, tuple):
            return cost
        step, width, _ = cost
        return step.at_width(width, self.plain_seconds)

    @property
    def seconds(self) -> float | None:
        """The median step's seconds; for a tree size, over the steps that verified it where there are any (a
        measurement beats an estimate)."""
        if not self.samples:
            return None
        costs = [c for c, _ in self.samples]
        own = [c for c in costs if isinstance(c, tuple) and c[0].width == c[1]]  # (step, width, _): its own width
        return statistics.median(self._seconds(c) for c in (own or costs))

    @property
    def rate(self) -> float | None:
        """Tokens per row per second: the mean tokens a step emits (acceptance is skewed: a few long runs carry
        it) over the median step time."""
        if not self.samples:
            return None
        return self.tokens / max(self.seconds, 1e-9)

    def _per_step(self) -> list[list]:
        """Each sample's tokens as a per-row list (a float is one row)."""
        return [t if isinstance(t, (list, tuple)) else [t] for _, t in self.samples]

    @property
    def best_rate(self) -> float | None:
        """Tokens per row per second at the rows' average acceptance (what a batch without stragglers would get)."""
        if not self.samples:
            return None
        flat = [x for t in self._per_step() for x in t if x is not None]
        return (statistics.fmean(flat) if flat else 1.0) / max(self.seconds, 1e-9)

    @property
    def tokens(self) -> float:
        """The window's tokens per step of its slowest row: per row, the mean over the steps it generated in;
        then the lowest over the rows of the latest step that were generating (a plain step: 1).

        With ``rows_leave``, what the batch gets under the loop's rule for dropping finished rows instead
        (:func:`narrowed_tokens`): where a step's cost grows with its rows (a CPU), a row that runs ahead pays for
        itself once half the batch has left with it (on a GPU at these sizes a step costs the same whatever rows
        it holds, and the slowest row is what the call waits for)."""
        key = (self.rows_leave, self.reference, self.plain_seconds, self.prior)
        if self._memo is not None and self._memo[0] is self.samples and self._memo[1] == key:
            return self._memo[2]
        calls: dict = {}  # the window's steps by the call they ran in (untagged steps: one call)
        for t in self._per_step():
            calls.setdefault(getattr(t, "call", None), []).append(t)
        # a window that spans calls: each call's batch had its own stragglers, and a batch pays for its own (mixing
        # rows of different calls hid them: a code batch of 8 rows whose slowest row emitted 2.2 tokens a step
        # looked like one emitting 4 or more, and kept drafting at a loss). What the window's steps got in all: each
        # call's tokens a step times its steps, over the steps
        if len(calls) == 1:
            tokens = self._call_tokens(next(iter(calls.values())))
        else:
            tokens = sum(len(steps) * self._call_tokens(steps) for steps in calls.values()) / \
                sum(map(len, calls.values()))
        if self.prior is not None:  # the recent calls' tokens a step count as `weight` steps of this window's
            prior_tokens, weight = self.prior
            steps = len(self.samples)
            tokens = (weight * prior_tokens + steps * tokens) / (weight + steps)
        self._memo = (self.samples, key, tokens)
        return tokens

    def _call_tokens(self, per_step: list) -> float:
        """:attr:`tokens` over the steps of one call."""
        width = len(per_step[-1])
        if any(len(t) != width for t in per_step):
            per_step = [[statistics.fmean(x for x in t if x is not None)] for t in per_step]
            width = 1
        rows = [j for j in range(width) if per_step[-1][j] is not None] or range(width)
        means = []
        for j in rows:
            seen = [t[j] for t in per_step if t[j] is not None]
            if seen:
                means.append(statistics.fmean(seen))
        if not means:
            return 1.0
        return max(narrowed_tokens(means, self.fixed_share(width)) if self.rows_leave else min(means), 1e-9)

    def fixed_share(self, rows: int) -> float:
        """The part of a drafted step's cost at ``rows`` rows that stays when rows leave: with the step at this
        window's median cost and at the reference's smaller batch size, a straight line cost(k) = a + b·k gives
        a / cost(rows). 0 (a step costs in proportion to its rows) without a reference. On the zoo's code target
        on 2 CPU threads a DFlash step costs about 12 + 7.3·k ms: a sixth of an 8-row step stays."""
        if self.reference is None or not self.samples:
            return 0.0
        small, small_seconds = self.reference
        here = self.seconds
        if rows <= small or here <= 0:
            return 0.0
        per_row = max(0.0, (here - small_seconds) / (rows - small))
        return min(1.0, max(0.0, small_seconds - per_row * small) / here)


def narrowed_tokens(per_row: list[float], fixed_share: float = 0.0) -> float:
    """Tokens per step that rows emitting ``per_row`` tokens a step get together, when a step costs in proportion
    to the rows it holds, but for ``fixed_share`` of a whole batch's step that any step costs, and the loop drops the
    finished rows once they are half the batch (``SpeculativeGenerator._narrow``): every row generates the same
    tokens, so row b ends after 1 / per_row[b] steps a token; until half the rows have ended the whole batch is
    computed. Between the slowest row's rate (no rows dropped, or a fixed share of 1) and the rows' harmonic mean
    (every row dropped as it ends, a step's whole cost per row)."""
    ends = sorted(1.0 / max(t, 1e-9) for t in per_row)
    n, done, cost, last = len(ends), 0, 0.0, 0.0
    rows = n
    for end in ends:
        done += 1
        if 2 * (rows - done) <= rows:  # (always so at the last row)
            cost += (fixed_share * n + (1.0 - fixed_share) * rows) * (end - last)
            last, rows, done = end, rows - done, 0
    return n / cost


DRAFTED_WINDOW = 32
FIRST_DRAFTED = 4  # measured drafted steps before the first plain one (one step is a noisy estimate of acceptance)
PRIOR_STEPS = 4  # at one row, the recent calls' acceptance counts as this many of a call's own drafted steps
PROBE_STEPS = 2  # a drafting probe: the step that catches the drafter up, and one more
MAX_PROBE_EVERY = 64  # probes that keep losing space out to this many steps (times the drafted step's cost)
HYSTERESIS = 0.15
SIZE_HYSTERESIS = 0.05  # a tree size replaces the one in use when its rate is this much higher (no switching cost)
LARGEST_EVERY = 4  # drafted steps at a smaller size between two steps at the largest (which measure every size)
SIZE_WINDOW = 8  # steps at the largest size the sizes are compared over
CUT_DEARER = 3.0  # a drafted step this many plain steps' cost or more: a trial far behind stops after two steps
CHECK_EVERY = 4  # where drafting is hopeless at a batch size, one call in this many reads the target's features
RECENT_PROMPTS = 4  # a call judges drafting afresh where it won in any of the calls before it, at its batch size,
# that together ran this many prompts (the last four calls at one row, two at two, the last call from four rows up)
FAR_BEHIND = 0.75  # a drafting probe whose slowest row is this far behind plain steps' rate (and whose average row
# does not clearly win either) backs off to the longest interval at once


@dataclass
class _AdaptiveRun:
    inner: Any  # the inner drafter's state for this call
    # acceptance comes in runs (a stretch of code the drafter knows, then one it does not): the drafted kind is
    # judged over its last 32 steps so that one bad stretch does not switch drafting off; a plain step's time is
    # steady, eight suffice. One window per tree size the inner drafter offers (``tree_budgets``, greedy calls;
    # else one): every drafted step measures its own size and the smaller ones (mmspec.drafters.budgets)
    arms: list = field(default_factory=lambda: [_Rate(DRAFTED_WINDOW)])
    plain: _Rate = field(default_factory=_Rate)
    arm: int = 0  # the tree size drafted steps use (an index into the inner drafter's tree_budgets)
    arm_run: int = 0  # the size of the step in flight
    sized: list = field(default_factory=list)  # the step in flight's trees: its own, then every smaller size
    since_largest: int = 0  # drafted steps since one at the largest size
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
    begun: bool = True  # the inner drafter's begin has run (deferred to its first drafted step when it can be)
    fixed: bool = False  # a sampling call with when_sampling=False: every step drafts, nothing is measured
    active_before: list = field(default_factory=list)  # the rows generating when the drafted step in flight began
    won: bool = False  # drafting's measured rate beat plain steps' at some step of this call
    won_before: tuple = ()  # `won` of the calls before the last one at this batch size (see RECENT_PROMPTS)
    open_drafted: bool = False  # a call resumed on plain steps drafts its first step all the same
    opening_won: bool = True  # the call's first drafted step emitted tokens faster than plain steps do
    opening_rate: float | None = None  # its rate, judged once plain steps are measured (a first call has none yet)
    narrowed: bool = False  # the loop dropped finished rows: the windows no longer describe a call of `rows` rows
    cut_short: bool = False  # the call's first drafted steps lost so clearly that it stopped them early
    shadows: bool = False  # drafting probes are screened by unverified drafts (greedy, one tree size, shadow_drafts)
    shadow: ShadowDraft | None = None  # an unverified draft waiting for the target's continuation
    shadow_now: bool = False  # the plain step in flight proposes an unverified draft
    since_shadow: int = 0  # plain steps since the last unverified draft
    shadow_seconds: float | None = None  # what the last unverified draft cost
    verdict: bool | None = None  # the last unverified draft's verdict, for the next choice
    featureless: bool = False  # the loop hands no target features this call: every step is plain
    plain_calls: int = 0  # calls at this batch size since drafting became hopeless there
    call: int = 0  # which call of the policy this is (drafted steps are tagged with it: RowTokens)

    @property
    def drafted(self) -> _Rate:
        """The drafted kind's window: the tree size in use."""
        return self.arms[self.arm]

    @property
    def opening(self) -> bool:
        """The step in flight is the drafted first step of a call resumed on plain steps."""
        return self.open_drafted and self.step == 0


class AdaptiveDrafter(Drafter):
    """``AdaptiveDrafter(inner)``: ``inner``'s drafts where they raise tokens per second, plain steps elsewhere.
    ``probe_every``: steps between two tries of the kind not in use; ``margin``: the drafted rate must beat the
    plain one by this factor (> 1 keeps plain steps on a tie); ``tree_sizes``: in greedy calls, also choose among the
    inner drafter's tree sizes (``tree_budgets``) where it offers several. Off by default: on the zoo's code suite
    (2 CPU threads, 2026-11-27) a DDTree step's rate is within a few percent across its sizes, and choosing cost
    8% at one row and 9% at sixteen in an interleaved run (README, "Batch scaling")."""

    def __init__(self, inner: Drafter, probe_every: int = 8, margin: float = 1.0, when_sampling: bool = True,
                 tree_sizes: bool = False):
        if not isinstance(inner, Drafter):
            raise ValueError(f"AdaptiveDrafter wraps a Drafter (e.g. mmspec.pipeline(...).drafter), got "
                             f"{type(inner).__name__}")
        if isinstance(probe_every, bool) or not isinstance(probe_every, int) or probe_every < 2:
            raise ValueError(f"probe_every must be an int >= 2, got {probe_every!r}")
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) or margin <= 0:
            raise ValueError(f"margin must be a finite number > 0, got {margin!r}")
        if not isinstance(when_sampling, bool):
            raise ValueError(f"when_sampling must be true or false, got {when_sampling!r}")
        if not isinstance(tree_sizes, bool):
            raise ValueError(f"tree_sizes must be true or false, got {tree_sizes!r}")
        self.tree_sizes = tree_sizes
        self.inner, self.probe_every, self.margin = inner, probe_every, margin
        # the choices follow the clock, so under sampling they change which random numbers each step draws: the
        # output keeps the target's distribution but a seed no longer fixes it. when_sampling=False drafts every
        # step of a sampling call (a seed then reproduces the output) and adapts greedy calls only
        self.when_sampling = when_sampling
        self.vocab_size = inner.vocab_size
        self.needs_target_hidden = inner.needs_target_hidden
        # per batch size, the recent steps of the last call: the next call at that size starts from them instead
        # of drafting to find out (what a server learns over time); a dict write per step is safe across threads
        self._memory: dict[int, dict] = {}
        self._calls = 0

    @property
    def max_nodes(self) -> int:
        return self.inner.max_nodes

    @property
    def drops_rows(self) -> bool:
        return self.inner.drops_rows

    def select_rows(self, run: _AdaptiveRun, keep: torch.LongTensor) -> _AdaptiveRun:
        """The inner drafter's rows narrowed, and both kinds judged afresh: the loop dropped half the batch or more,
        so every step time measured so far belongs to a batch that no longer runs (drafting, dearer per row, gains
        the most). The memory of the call's batch size is no longer written: it describes the call's start."""
        if run.inner is not None:
            run.inner = self.inner.select_rows(run.inner, keep)
        if not run.fixed:
            run.arms = [_Rate(DRAFTED_WINDOW, rows_leave=run.drafted.rows_leave, reference=run.drafted.reference)
                        for _ in run.arms]
            run.plain, run.arm, run.cut_short = _Rate(), 0, False
            run.since_switch, run.probing, run.probe_every = 0, False, self.probe_every
            run.shadow, run.verdict = None, None  # its rows are no longer the batch's
        run.active_before, run.narrowed = [], True
        return run

    def target_features(self, hidden_states: tuple) -> torch.Tensor:
        return self.inner.target_features(hidden_states)

    def reads_features(self, rows: int, do_sample: bool = False, max_new_tokens: int | None = None) -> bool:
        """No target features for a call that will draft nothing: the target's hidden states at the prefill and
        every step and the drafter's feature buffer cost a call of plain steps 5–7% at 8–16 rows on a CPU (SGLang
        turns speculation off under load the same way). Such a call is one at a batch size whose last call ended on
        plain steps, with neither drafting nor its opening having won there, where

        - the next unverified draft screening a probe (greedy calls) is not due within the call's
          ``max_new_tokens`` steps (:func:`_draft_due_within`), or
        - drafting is hopeless there (probes at the longest interval), but for one call in ``CHECK_EVERY``, which
          looks again."""
        if not self.inner.needs_target_hidden:
            return False
        if do_sample and not self.when_sampling:
            return True  # such a call drafts every step, as the inner drafter alone would
        known = self._memory.get(rows)
        if known is None or not _plain_and_lost(known):
            return True
        if self._screens(do_sample) and max_new_tokens is not None and \
                not _draft_due_within(known, max_new_tokens):
            return False
        if not _hopeless(known):
            return True
        known["plain_calls"] += 1
        return known["plain_calls"] % CHECK_EVERY == 0

    def _arms(self, do_sample: bool) -> int:
        """How many tree sizes a call's drafted steps are judged at: in greedy calls, with ``tree_sizes``, each the
        inner drafter offers (a smaller tree's acceptance is read off a larger one's step from the target's
        continuation, which a sampled step does not give); else one."""
        return max(len(self.inner.tree_budgets) if self.tree_sizes and not do_sample else 0, 1)

    def _screens(self, do_sample: bool) -> bool:
        """Whether a call's drafting probes are screened by unverified drafts (what ``begin`` decides, from the call's
        kind alone)."""
        return self.inner.shadow_drafts and not do_sample and self._arms(do_sample) == 1

    def check_inputs(self, prefill_inputs: dict) -> None:
        self.inner.check_inputs(prefill_inputs)

    def begin(self, context: DraftContext) -> _AdaptiveRun:
        rows = context.state.tokens.shape[0]
        fixed = context.state.sampling.do_sample and not self.when_sampling
        lazy = self.inner.catches_up_from_tokens and not fixed
        # a drafter that catches up from tokens begins when it first drafts: a call of plain steps only (a large
        # batch) then never pays for its prompt prefill
        # a call the loop hands no features (reads_features) runs on plain steps alone, the drafter never begun
        featureless = self.inner.needs_target_hidden and context.hidden is None
        lazy = lazy or featureless
        run = _AdaptiveRun(None if lazy else self.inner.begin(context), rows=rows, probe_every=self.probe_every)
        run.begun, run.featureless = not lazy, featureless
        self._calls += 1
        run.call = self._calls
        rows_leave = context.rows_leave and context.state.tokens.device.type == "cpu"
        reference = self._reference(rows) if rows_leave else None
        run.arms = [_Rate(DRAFTED_WINDOW, rows_leave=rows_leave, reference=reference)
                    for _ in range(self._arms(context.state.sampling.do_sample))]
        if fixed:
            run.fixed = True  # every step drafts, as the inner drafter alone would
            return run
        run.shadows = self._screens(context.state.sampling.do_sample)
        known = self._memory.get(rows)
        if known is not None:
            run.plain.samples = list(known["plain"])
            run.opening_won, run.plain_calls = known["opening_won"], known["plain_calls"]
            # where a drafted step is dear and an unverified draft can tell whether drafting would win, a call after
            # one where drafting won somewhere resumes too, with that draft due at once (instead of a trial of
            # drafted steps: at 8 rows on a CPU each costs five or six plain steps)
            dear = run.shadows and _dear(_Rate(DRAFTED_WINDOW, known["arms"][0]), run.plain)
            # start where the last call at this batch size stopped (its tree sizes: a greedy call after a sampling
            # one has sizes that call did not measure, and judges them afresh)
            run.won_before = _last((*known["won_before"], known["won"]), _recent_calls(rows) - 1)
            if (not _won_lately(known) or dear) and len(known["arms"]) == len(run.arms):
                for arm, samples in zip(run.arms, known["arms"]):
                    arm.samples = list(samples)
                run.arm = known["arm"]
                run.drafting, run.since_switch, run.probe_every = known["drafting"], known["since_switch"], \
                    known["probe_every"]
                run.since_shadow = math.inf if _won_lately(known) else known["since_shadow"]  # (a draft at once)
                run.open_drafted = not run.drafting and run.opening_won and not featureless
            elif rows == 1 and len(run.arms) == 1 and known["arms"][0]:
                # drafting won lately: the call drafts its first FIRST_DRAFTED measured steps and judges drafting
                # afresh, its own steps pooled with the recent calls' acceptance (PRIOR_STEPS steps' worth): a
                # prompt's first lines are often ones the drafter guesses worst (HumanEval at one row: four steps of
                # 1.25 tokens turned calls to plain steps whose always-drafting run was 25-35% faster than plain)
                run.drafted.prior = _prior(known["arms"][0])
            # else (a batch, judged on its own steps: its rows already pool several prompts, and a drafted step is
            # dear) drafting won lately: its first FIRST_DRAFTED measured steps draft, judged afresh
        return run

    def _reference(self, rows: int) -> tuple | None:
        """(rows, seconds) of a drafted step at the smallest batch size below ``rows`` that the memory holds drafted
        steps for (its largest tree size), or None: with the steps measured at ``rows``, what part of a step's cost
        stays as rows leave (:meth:`_Rate.fixed_share`)."""
        for small in sorted(r for r in self._memory if r < rows):
            seconds = _Rate(DRAFTED_WINDOW, self._memory[small]["arms"][0]).seconds
            if seconds is not None:
                return small, seconds
        return None

    @staticmethod
    def _choose_size(run: _AdaptiveRun) -> None:
        """The tree size with the highest rate (tokens a row per second) becomes the one drafted steps use.

        The sizes are compared on the same steps, the last ``SIZE_WINDOW`` at the largest size (which measure every
        size; a smaller size's own steps cannot tell what a larger tree would have accepted, and acceptance comes in
        runs), each at its cost (:attr:`_Rate.seconds`: measured where it ran, else estimated, which needs a plain
        step's cost)."""
        plain = run.plain.seconds
        for arm in run.arms:
            arm.plain_seconds = plain
        if len(run.arms) == 1 or plain is None:
            return
        rates = []
        for arm in run.arms:
            same = [(cost, tokens) for cost, tokens in arm.samples if cost[2]][-SIZE_WINDOW:]  # at the largest
            if len(same) < FIRST_DRAFTED:
                rates.append(None)
                continue
            rates.append(arm.like(len(same), same).tokens / max(arm.seconds, 1e-9))
        best = max((i for i, r in enumerate(rates) if r is not None), key=lambda i: rates[i], default=run.arm)
        if rates[run.arm] is None or rates[best] > (1 + SIZE_HYSTERESIS) * rates[run.arm]:
            run.arm = best

    def _choose(self, run: _AdaptiveRun) -> bool:
        """Whether the next step drafts (and at which tree size)."""
        if run.featureless:
            return False
        self._choose_size(run)
        if len(run.drafted.samples) < FIRST_DRAFTED and not run.cut_short:
            if run.rows > 1 and len(run.drafted.samples) >= PROBE_STEPS and _dear(run.drafted, run.plain) and \
                    run.drafted.rate < FAR_BEHIND * run.plain.rate:
                # judging drafting afresh against plain steps it remembers (a call after one where drafting won
                # somewhere), two measured steps far behind them end the trial as a lost probe would, where a
                # drafted step is dear: at 16 rows on a CPU (five plain steps' cost) a full trial's five drafted
                # steps cost a fifth of a call. Not at one row, where a step is cheap (2.4 plain steps), a prompt's
                # first steps say little about the rest, and a noisy cut turned a call to plain steps (a code sweep's
                # one-row column fell to 89% of always drafting's)
                run.cut_short = True
                run.probe_every = min(2 * run.probe_every, MAX_PROBE_EVERY)
                return False
            return True  # draft first (the call's first drafted step also feeds the prompt: not measured)
        if run.plain.seconds is None:
            # then one plain step, to measure it. At one row it is a probe (drafting stays the kind in use): as a
            # switch, drafting had to win by the band to come back, and calls of lookup_alone whose first drafted
            # steps had won by 10-25% ran plain steps until the next probe. From two rows up it is a switch: there a
            # drafted step costs three to five plain steps, and as a probe it kept drafting on near ties (VLM sweeps
            # fell below mmspec-plain at 4, 8 and 16 rows: 0.91x, 0.96x, 0.87x)
            run.probing = run.rows == 1
            return False
        # hysteresis, on the side of drafting only: plain steps are kept until drafting is 15% faster (the estimates
        # are noisy, and switching costs a catch-up), drafting only while it is at least as fast as plain steps (a
        # band below 1.0 kept batches drafting at up to 15% loss where the two kinds ran close: 4-row VLM batches)
        # (the band follows the kind in use: during a probe, the step in flight is of the other kind. It followed
        # the probe's kind until 2026-11-27, which inverted it at probes: a drafting probe won a tie, and a plain
        # probe took drafting off unless it was 15% faster)
        drafting_in_use = run.drafting != run.probing
        better = run.drafted.rate >= self.margin * run.plain.rate * (1.0 if drafting_in_use else 1 + HYSTERESIS)
        if run.verdict is not None:  # an unverified draft was read off the continuation: the probe it screens
            won, run.verdict = run.verdict, None
            if won:
                run.probing = True
                return True  # the drafting probe, judged as any other
            self._lost_probe(run)
            run.won |= better
            return better
        if run.probing:  # a probe of the kind not in use just ran: did it win?
            if run.drafting and run.since_switch == 0:
                return True  # a drafted probe's first step only brings the drafter up to date: measure the next
            run.probing = False
            if run.drafting and not better:
                # the window still holds the steps drafted before the plain stretch: the probe's own two steps
                # win it back on their own when they beat plain steps clearly (acceptance may have changed)
                fresh = run.drafted.like(PROBE_STEPS, run.drafted.samples[-PROBE_STEPS:], run.plain.seconds)
                better = fresh.rate >= self.margin * run.plain.rate * (1 + HYSTERESIS)
            lost = better != run.drafting
            if not lost:
                run.probe_every = self.probe_every
            elif run.drafting:
                self._lost_probe(run)
            else:
                run.probe_every = min(2 * run.probe_every, MAX_PROBE_EVERY)
            run.won |= better
            return better
        if run.shadows and not run.drafting:
            # drafting probes are screened: an unverified draft on a plain step, as much less often as it is dearer
            # than a plain step, and a probe only where it says drafting would win (the verdict above)
            dearer = max(1.0, (run.shadow_seconds or 0.0) / max(run.plain.seconds, 1e-9))
            run.shadow_now = run.shadow is None and run.since_shadow >= run.probe_every * dearer
        else:
            # a drafted probe costs what a drafted step costs: probe as much less often as it is dearer than a
            # plain step
            dearer = max(1.0, run.drafted.seconds / max(run.plain.seconds, 1e-9)) if not run.drafting else 1.0
            if run.since_switch >= run.probe_every * dearer:
                run.probing = True
                return not run.drafting  # re-try the other kind now and then
        run.won |= better
        return better

    def _lost_probe(self, run: _AdaptiveRun) -> None:
        """A drafting probe (or the unverified draft screening one) lost: the next one waits twice as long, or the
        longest where drafting is hopeless — the slowest row's rate far behind plain steps', and even the rows'
        average acceptance not clearly paying for a drafted step (a large batch on a busy device): a change that
        would make drafting win is unlikely."""
        if len(run.drafted.samples) >= FIRST_DRAFTED and run.drafted.rate < FAR_BEHIND * run.plain.rate and \
                run.drafted.best_rate < (1 + HYSTERESIS) * run.plain.rate:
            run.probe_every = MAX_PROBE_EVERY
        else:
            run.probe_every = min(2 * run.probe_every, MAX_PROBE_EVERY)

    def propose(self, context: DraftContext, run: _AdaptiveRun) -> DraftTree:
        if run.fixed:
            return self.inner.propose(context, run.inner)
        if run.opening:  # drafted outside the policy's windows and counters: the resumed kind goes on after it
            drafting = True
        else:
            drafting = self._choose(run)
            run.since_switch = run.since_switch + 1 if drafting == run.drafting else 0
            run.drafting = drafting
        if drafting:
            run.active_before = context.state.active.tolist()  # the rows this step generates for
            run.shadow_now = False
        t0 = time.perf_counter()
        if (drafting or run.shadow_now) and not run.begun:
            run.inner, run.begun = self.inner.begin(context), True
        if not drafting:
            run.since_shadow += 1
            if run.shadow_now:  # drafted, not verified: read off the continuation the plain steps give
                run.shadow = ShadowDraft(self.inner.propose(context, run.inner), context.state)
                run.shadow_now, run.since_shadow, run.fed = False, 0, True  # (the drafter's prompt is fed)
                run.shadow_seconds = time.perf_counter() - t0
            tree = DraftTree.root_only(context.state.roots)
        elif len(run.arms) == 1:
            tree = self.inner.propose(context, run.inner)
        else:
            # now and then a step at the largest size, which measures every size (the smaller ones' windows are
            # read off it); the others run the chosen size and measure the sizes below it
            largest = run.arm == 0 or run.since_largest >= LARGEST_EVERY
            run.arm_run = 0 if largest else run.arm
            run.since_largest = 0 if largest else run.since_largest + 1
            run.sized = self.inner.propose_sized(context, run.inner, list(range(run.arm_run, len(run.arms))))
            tree = run.sized[0]
        run.t_proposed = time.perf_counter()
        run.t_draft = run.t_proposed - t0 if drafting else 0.0
        return tree

    def observe(self, context: DraftContext, run: _AdaptiveRun, tree: DraftTree, result: AcceptResult,
                hidden: torch.Tensor | None = None) -> None:
        verified = time.perf_counter() - run.t_proposed  # the target's forward, acceptance and commit
        t0 = time.perf_counter()
        if run.begun:  # (a fixed run begins at once)
            self.inner.observe(context, run.inner, tree, result, hidden)
        if run.fixed:
            return
        observed = time.perf_counter() - t0
        drafted = run.drafting or run.opening
        emitted = (result.num_accepted.cpu() + 1).tolist() if drafted else None
        if drafted and run.step == 0:
            # the call's first step drafted: did it beat plain steps, its drafter prefill paid? (an answer the
            # drafter knows often comes whole in its first block: the next call's opening then drafts as well)
            seconds = run.t_draft + verified + observed
            tokens = [n for n, a in zip(emitted, run.active_before) if a]
            run.opening_rate = run.drafted.like(1, [(seconds, tokens or [1])]).rate
            self._judge_opening(run)
            if run.opening and run.rows == 1 and run.opening_won:
                self._go_on_drafting(run)
        if drafted and not run.fed:
            # the call's first drafted step feeds the prompt to the drafter: a one-off, not what a step costs
            run.fed = True
        elif run.drafting:
            active = run.active_before
            if len(run.arms) == 1:
                run.drafted.add(run.t_draft + verified + observed,
                                RowTokens([n if a else None for n, a in zip(emitted, active)], run.call))
            else:
                cost = StepCost(run.t_draft, verified + observed, tree.num_nodes)
                follows = target_continuation(tree, result)
                for arm, sized in zip(run.arms[run.arm_run:], run.sized):
                    got = emitted if sized is tree else emitted_by(sized, follows)
                    arm.add((cost, sized.num_nodes, run.arm_run == 0),
                            RowTokens([n if a else None for n, a in zip(got, active)], run.call))
            run.drafted_steps += 1
        else:
            run.plain.add(verified + observed, 1.0)
            run.plain_steps += 1
        if run.shadow is not None:
            self._read_shadow(context, run)
        run.step += 1
        if run.opening_rate is not None:  # a first call's opening, judged at its first plain step
            self._judge_opening(run)
        if run.drafted.samples and run.plain.samples and not run.narrowed:
            # the sample lists are replaced, never changed in place, on every add: no copy needed
            memory = {"arms": [arm.samples for arm in run.arms], "arm": run.arm, "plain": run.plain.samples,
                      "drafting": run.drafting, "since_switch": run.since_switch, "probe_every": run.probe_every,
                      "since_shadow": run.since_shadow, "won": run.won, "won_before": run.won_before,
                      "opening_won": run.opening_won}
            memory["plain_calls"] = run.plain_calls if _hopeless(memory) else 0
            self._memory[run.rows] = memory  # (one dict write: safe across threads)

    def _go_on_drafting(self, run: _AdaptiveRun) -> None:
        """A one-row call resumed on plain steps whose drafted opening beat them: the prompt is one the drafter
        knows, so the call drafts on, judged afresh on its own steps (its first FIRST_DRAFTED measured ones draft),
        instead of resuming plain steps. The remembered drafted steps were the last calls' (a VLM answer's tail past
        its end, which the drafter cannot guess); at one row on the VLM suite, resuming plain steps after openings of
        9-29 tokens left 5% of always drafting's speedup unused."""
        run.open_drafted, run.drafting, run.since_switch, run.probing = False, True, 0, False
        run.drafted.prior = _prior(run.drafted.samples)
        run.drafted.samples, run.probe_every = [], self.probe_every

    def _judge_opening(self, run: _AdaptiveRun) -> None:
        """Whether the call's first drafted step beat plain steps (the ones remembered, or, in a first call, the first
        measured), by the margin a switch from plain steps to drafting needs: an opening that only breaks even, as a
        large batch's slowest row makes it, is not worth its drafter prefill's risk."""
        if run.plain.samples:
            run.opening_won = run.opening_rate >= self.margin * run.plain.rate * (1 + HYSTERESIS)
            run.opening_rate = None

    def _read_shadow(self, context: DraftContext, run: _AdaptiveRun) -> None:
        """Read the unverified draft against the continuation so far; once it settles whether a drafted step at that
        point would have beaten plain steps (at the drafted steps' measured cost), keep what it would have emitted
        as a drafted sample and leave the verdict for the next choice. A draft overtaken by drafted steps (the
        policy switched) is dropped: they measure what it would have."""
        if run.drafting or run.drafted.seconds is None:
            run.shadow = None
            return
        low, high, known = run.shadow.bounds(context.state)
        cost = run.drafted.seconds
        need = self.margin * run.plain.rate  # a screen: the probe it lets through is judged with the band
        if run.drafted.like(1, [(cost, low)]).rate >= need:
            run.verdict = True
        elif known or run.drafted.like(1, [(cost, high)]).rate < need:
            run.verdict = False
        else:
            return
        run.drafted.add(cost, RowTokens(low, run.call))
        run.shadow = None


def _prior(samples: list) -> tuple | None:
    """(tokens a step, PRIOR_STEPS) of the recent calls' drafted ``samples`` at one row: what a call judging drafting
    afresh pools its own steps with (:attr:`_Rate.prior`); None without samples."""
    return (_Rate(DRAFTED_WINDOW, samples).tokens, PRIOR_STEPS) if samples else None


def _recent_calls(rows: int) -> int:
    """How many of the last calls at ``rows`` rows say whether drafting pays there: those that ran ``RECENT_PROMPTS``
    prompts. One call's prompt says little about the next's (at one row, one code prompt the drafter could not guess
    had set every later call on plain steps); a batch's rows average over several."""
    return max(1, -(-RECENT_PROMPTS // rows))


def _last(values: tuple, n: int) -> tuple:
    """The last ``n`` of ``values`` (none for n = 0)."""
    return tuple(values[len(values) - n:]) if n > 0 else ()


def _won_lately(known: dict) -> bool:
    """Whether drafting won in any of the recent calls at a batch size (its memory ``known``: the last call's ``won``
    and ``won_before``, the ones before it that :func:`_recent_calls` counts)."""
    return known["won"] or any(known["won_before"])


def _plain_and_lost(known: dict) -> bool:
    """Whether a batch size's memory says the last call there ended on plain steps, drafting won in none of the
    recent calls (:func:`_won_lately`), nor did the last call's opening."""
    return not (known["drafting"] or _won_lately(known) or known["opening_won"])


def _hopeless(known: dict) -> bool:
    """Whether a batch size's memory says drafting is hopeless there: plain and lost (:func:`_plain_and_lost`), and
    its probes were at the longest interval."""
    return _plain_and_lost(known) and known["probe_every"] >= MAX_PROBE_EVERY


def _draft_due_within(known: dict, steps: int) -> bool:
    """Whether a call resuming a batch size's memory on plain steps would propose its unverified draft within
    ``steps`` steps: one is due once ``probe_every`` plain steps (times the draft's cost in plain steps, which a call
    learns from its first draft: 1 until then) have passed since the last."""
    return known["since_shadow"] + steps >= known["probe_every"]


def _dear(drafted: _Rate, plain: _Rate) -> bool:
    """Whether a drafted step costs ``CUT_DEARER`` plain steps or more (the two windows' medians; False while either
    is empty)."""
    return drafted.seconds is not None and plain.seconds is not None and \
        drafted.seconds >= CUT_DEARER * plain.seconds


def unwrap(drafter):
    """The drafter an :class:`AdaptiveDrafter` runs (any other drafter, or None, as it is)."""
    return drafter.inner if isinstance(drafter, AdaptiveDrafter) else drafter


__all__ = ["AdaptiveDrafter", "RowTokens", "narrowed_tokens", "unwrap"]
