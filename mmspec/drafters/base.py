"""The drafter plug-in interface (the candidate-generator pattern of HF ``generate``, for trees).

The decoding loop drives every drafter the same way, whatever it reads:

* ``run = begin(context)`` once per ``generate`` call, after the target's prefill. ``context`` is a
  :class:`~mmspec.state.DraftContext` (token buffer, prompt, sampling settings, generator, and, for a drafter
  whose ``needs_target_hidden`` is set, the target's prefill features). ``run`` is the drafter's own state for
  this call (its caches, its adaptive draft length, ...), or None: the loop holds it and hands it back below;
* each step ``propose(context, run)`` returns a :class:`~mmspec.tree.DraftTree` rooted at each row's last
  token; the target verifies it and the loop appends what it emitted to ``context.state``;
* then, while rows are still generating, ``observe(context, run, tree, result, hidden)`` with the verifier's
  :class:`~mmspec.verifiers.acceptance.AcceptResult` and, for ``needs_target_hidden`` drafters, the target's
  features at the tree's nodes (its ``target_features`` of the verifier's hidden states: by default the last
  layer's; None for drafters that read none).

A drafter object keeps only its model and settings, so one drafter may serve several generators and
concurrent calls. A drafter never changes what is generated, only how fast.
"""

from __future__ import annotations

from typing import Any

import torch

from ..state import DraftContext
from ..tree import DraftTree
from ..verifiers.acceptance import AcceptResult
from ..verifiers.coupling import CoupledDraws


def check_confidence(confidence: float | None) -> None:
    """A drafter's confidence stop (HF's ``assistant_confidence_threshold``) is a probability in (0, 1)."""
    if confidence is not None and not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be a probability in (0, 1), got {confidence}")


def confident_length(p: torch.Tensor, active: torch.Tensor, confidence: float | None) -> int:
    """How many slots of a block to keep: up to and including the first slot that no active row drafts with
    probability >= ``confidence`` (all of them without a threshold). ``p`` [B, k]: the drafter's probability of
    each row's draft. The cut depends on the drafter's distributions only, so sampling stays lossless."""
    k = p.shape[1]
    if confidence is None or k == 1:
        return k
    doubtful = (~trusted_slots(p[:, : k - 1], active, confidence)).nonzero()
    return int(doubtful[0]) + 1 if doubtful.numel() else k


def trusted_slots(p: torch.Tensor, active: torch.Tensor, confidence: float) -> torch.Tensor:
    """``[k]`` bool: whether some active row drafts each slot with probability >= ``confidence`` (``p`` ``[B, k]``:
    the drafter's probability of each row's draft, ``active`` ``[B]``). A chain stops after its first untrusted
    slot."""
    return ((p >= confidence) & active[:, None]).any(0)


def coupled_view(state, depth: int, device):
    """The sampling a drafter drafts with: the call's own, or under the Gumbel coupling a
    :class:`~mmspec.verifiers.coupling.CoupledDraws` holding the noise of the ``depth`` positions after each root."""
    if not state.sampling.gumbel:
        return state.sampling
    depth = max(depth, 1)
    depths = torch.arange(depth, device=state.lengths.device).expand(state.batch_size, depth)
    return CoupledDraws(state.sampling, state.noise_after_root(depths).to(device))


def feature_buffer(context: DraftContext, width: int, dtype: torch.dtype, device) -> torch.Tensor:
    """``[B, max_length + 2, width]``: the target's features at each token position of a call, the prompt's filled
    in from ``context.hidden`` (the last slot is scratch for rows that store nothing)."""
    state = context.state
    B, P = state.batch_size, state.prompt_length
    features = torch.zeros(B, context.max_length + 2, width, dtype=dtype, device=device)
    features[:, :P] = context.hidden.to(features)
    return features


def store_path_features(features: torch.Tensor, context: DraftContext, result: AcceptResult,
                        hidden: torch.Tensor) -> None:
    """Write the verifier's features along each row's accepted path (``hidden`` [B, nodes, width]) into
    ``features`` (:func:`feature_buffer`) at the path's token positions. The path starts at the step's root, at
    (length after the commit − tokens it emitted − 1): read off the state, so a step the drafter did not draft (the
    adaptive policy's plain steps) is stored the same way; rows that emitted fewer (cut at EOS or the budget) are
    finished and never draft again."""
    dev = features.device
    paths = result.paths.to(dev)
    B, L = paths.shape
    j = torch.arange(L, device=dev)[None, :]
    real = j < result.path_lengths.to(dev)[:, None]
    scratch = features.shape[1] - 1
    root = (context.state.lengths.to(dev) - result.path_lengths.to(dev) - 1).clamp(min=0)
    where = torch.where(real, root[:, None] + j, scratch).clamp(max=scratch)
    H = features.shape[-1]
    got = hidden.to(features).gather(1, paths[..., None].expand(B, L, H))
    features.scatter_(1, where[..., None].expand(B, L, H), got)


class Drafter:
    #: vocabulary the drafter proposes from (None = whatever the context holds, e.g. prompt lookup)
    vocab_size: int | None = None
    #: capability flag: the drafter reads the target's features, so the loop asks the target for its last-layer
    #: hidden states (``context.hidden`` at the prefill, ``hidden`` at every ``observe``) and captures the
    #: projected image embeddings (``context.image_embeds``)
    needs_target_hidden: bool = False
    #: capability flag: ``begin`` may come after some steps it did not draft (their ``observe`` skipped): the
    #: drafter catches up on the tokens it has not seen when it next proposes, from ``context.state`` alone.
    #: :class:`~mmspec.drafters.adaptive.AdaptiveDrafter` then defers ``begin`` (e.g. a drafter's own prompt
    #: prefill) until it first drafts, so a call it runs on plain steps only pays nothing for the drafter
    catches_up_from_tokens: bool = False
    #: capability flag: :meth:`select_rows` keeps a subset of a call's rows in the drafter's per-call state, so the
    #: loop can drop the rows that finished (their forwards then cost nothing) instead of computing them to the end
    drops_rows: bool = False
    #: capability flag: ``propose`` may run on a step that then verifies the root alone (the drafter keeps nothing
    #: of a draft the target did not verify: it may catch up on verified tokens, and ``observe`` hands it what was
    #: verified). :class:`~mmspec.drafters.adaptive.AdaptiveDrafter` then screens a drafting probe with such a draft
    #: scored against the target's continuation (:mod:`mmspec.drafters.shadow`), at a drafter forward's cost
    shadow_drafts: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # not inherited: a subclass may keep per-row state of its own that its parent's select_rows does not narrow,
        # so only a class that says so itself (or defines select_rows) lets the loop drop rows
        if "drops_rows" not in cls.__dict__ and "select_rows" not in cls.__dict__:
            cls.drops_rows = False

    @property
    def max_nodes(self) -> int:
        """Upper bound on tree nodes per step, root included (sizes the target cache)."""
        raise NotImplementedError

    @property
    def tree_budgets(self) -> tuple:
        """The sizes of deterministic tree :meth:`propose_sized` can propose from one draft, largest (the drafter's
        own) first, each lying inside the larger ones (:mod:`mmspec.drafters.budgets`); () = one size only."""
        return ()

    def propose_sized(self, context: DraftContext, run: Any, which: list[int]) -> list[DraftTree]:
        """The trees of sizes ``tree_budgets[i]`` for i in ``which`` (ascending), from one draft."""
        raise NotImplementedError(f"{type(self).__name__} proposes trees of one size only")

    def target_features(self, hidden_states: tuple) -> torch.Tensor:
        """What this drafter reads of the target's ``hidden_states`` tuple (prefill and verification alike): the
        last layer's by default; a drafter conditioned on several layers (DFlash) concatenates the ones it names."""
        return hidden_states[-1]

    def reads_features(self, rows: int, do_sample: bool = False, max_new_tokens: int | None = None) -> bool:
        """Whether a call of ``rows`` rows (sampling or greedy, generating at most ``max_new_tokens`` a row) hands
        this drafter the target's features (the loop then asks the target for its hidden states at the prefill and
        every step): ``needs_target_hidden`` by default; the adaptive policy declines them for a call it runs on
        plain steps alone."""
        return self.needs_target_hidden

    def check_inputs(self, prefill_inputs: dict) -> None:
        """Refuse, before any forward, target inputs this drafter cannot draft for (raise ValueError)."""

    def begin(self, context: DraftContext) -> Any:
        """Start one ``generate`` call; return this call's drafter state (None when the drafter keeps none)."""
        return None

    def propose(self, context: DraftContext, run: Any) -> DraftTree:
        raise NotImplementedError

    def observe(self, context: DraftContext, run: Any, tree: DraftTree, result: AcceptResult,
                hidden: torch.Tensor | None = None) -> None:
        """Called after the verifier accepted ``result`` and ``context.state`` was extended."""

    def select_rows(self, run: Any, keep: torch.LongTensor) -> Any:
        """This call's state with only rows ``keep`` (ascending) left, between two steps (``drops_rows`` drafters;
        ``context`` has been narrowed already). A drafter with no per-row state returns ``run`` as it is."""
        if not self.drops_rows:
            raise NotImplementedError(f"{type(self).__name__} cannot drop rows from a call")
        return run
