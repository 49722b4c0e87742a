"""The one decoding loop: prefill -> repeat {propose -> verify -> commit -> observe} -> finish.

``SpeculativeGenerator(target, drafter).generate(...)`` returns the same sequences as
``target.generate(...)`` under greedy decoding (bit-exact) and the same distribution under sampling,
with left padding, per-row acceptance and EOS handling laid out like HF ``generate``.

One call, as :meth:`SpeculativeGenerator.generate` reads:

* **prefill** — the whole prompt through the target; its next token is each row's first tree root. The
  drafter gets a :class:`~mmspec.state.DraftContext` and starts its own per-call state (``begin``);
* **step**, while any row is generating — the drafter *proposes* a DraftTree, the target *verifies* it in one
  forward, the emitted tokens are *committed* to the token buffer and the target's cache (cut at EOS and at the
  budget), and the drafter *observes* the result;
* **finish** — the sequences, padded like HF's, and the call's stats.

Everything one call changes lives in a :class:`_Call`; the generator and the drafter keep none of it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from .cache import SpecKVCache
from .compat import check_supported
from .drafters.base import Drafter
from .families import bidirectional_blocks, prompt_positions
from .kernels.dispatch import backend_for_device
from .hf_args import last_logits_kwargs
from .request import Request, cache_length, check_prefill_inputs, make_request, prefill_names
from .state import DecodeState, DraftContext
from .timing import timed
from .tree import DraftTree, check_tree_size
from .verifiers.acceptance import AcceptResult
from .verifiers.coupling import GumbelNoise, check_coupling
from .verifiers.tree_forward import prefill_parents, text_config, tree_forward
from .verifiers.tree_verifier import TreeVerifier
from .vision import capture_image_embeds, image_token_id


@dataclass
class GenerationStats:
    new_tokens: int = 0  # generated tokens summed over rows
    target_forwards: int = 0  # target forward calls, prefill included
    row_forwards: int = 0  # (row, forward) pairs while the row was still generating
    accept_lengths: list[list[int]] = field(default_factory=list)  # [row][step]: tokens emitted per step
    draft_time: float = 0.0
    verify_time: float = 0.0  # target forwards, prefill included
    prefill_time: float = 0.0  # the prefill forward alone (its share of verify_time)
    drafter_prefill_time: float = 0.0  # the drafter's begin + the first step's propose and observe (its share of
    # draft_time): where drafters feed themselves the prompt, in begin or lazily on the first step
    total_time: float = 0.0
    # relaxed acceptance (LANTERN / LANTERN++) only:
    moved_mass: list[float] = field(default_factory=list)  # per step, the largest S_m moved onto one candidate
    # over the rows: TV(p, p̃) for that candidate alone, not a bound on the output when drafts share neighbours
    output_tv: list[float] = field(default_factory=list)  # with measure_output_tv: per step and generating row,
    # the exact TV between the step's first emitted token's distribution and the target's
    output_tv_skipped: int = 0  # (row, step) pairs whose first-token distribution has no closed form here
    output_tv_time: float = 0.0  # seconds spent computing output_tv, not counted in total_time
    kernel_backend: str = "torch"  # "triton" or "torch": which kernels ran (mmspec.kernels.dispatch)

    def record_forward(self, rows: int) -> None:
        """One target forward over ``rows`` generating rows."""
        self.target_forwards += 1
        self.row_forwards += rows

    def record_relaxation(self, result: AcceptResult, active: torch.BoolTensor) -> None:
        """A relaxed verification's measures over the generating rows (nothing for a lossless one)."""
        if result.moved_mass is not None:
            self.moved_mass.append(float(result.moved_mass[active].max()))
        if result.output_tv is not None:  # it may cover the first rows only (measure_output_tv=n)
            tv = result.output_tv[active[: result.output_tv.shape[0]]]
            self.output_tv += [float(v) for v in tv[~tv.isnan()]]
            self.output_tv_skipped += int(tv.isnan().sum())

    def output_tv_summary(self) -> dict:
        """Max and mean of the measured output TVs and how many (row, step) pairs they cover (None: not measured)."""
        tv = self.output_tv
        return {"max_output_tv": max(tv) if tv else None, "mean_output_tv": sum(tv) / len(tv) if tv else None,
                "output_tv_measured": len(tv), "output_tv_skipped": self.output_tv_skipped}

    @property
    def mean_accepted_tokens(self) -> float:
        """tau: new tokens per target forward per row (plain decoding = 1.0; bonus token included)."""
        return self.new_tokens / max(self.row_forwards, 1)

    def as_dict(self) -> dict:
        return {
            "new_tokens": self.new_tokens,
            "target_forwards": self.target_forwards,
            "mean_accepted_tokens": self.mean_accepted_tokens,
            "draft_time": self.draft_time,
            "verify_time": self.verify_time,
            "prefill_time": self.prefill_time,
            "drafter_prefill_time": self.drafter_prefill_time,
            "total_time": self.total_time,
            "max_moved_mass": max(self.moved_mass) if self.moved_mass else None,
            **self.output_tv_summary(),
            "kernel_backend": self.kernel_backend,
        }


@dataclass
class GenerationOutput:
    sequences: torch.LongTensor  # [B, prompt_len + new], left padding kept, finished rows padded
    stats: GenerationStats


@dataclass
class _Call:
    """Everything one ``generate`` call changes."""

    request: Request
    cache: SpecKVCache  # the target's
    verifier: TreeVerifier
    stats: GenerationStats
    state: DecodeState | None = None  # the token buffer, from the prefill on
    generated: torch.LongTensor | None = None  # [B] new tokens per row
    context: DraftContext | None = None  # what the drafter is offered
    run: Any = None  # the drafter's own state for this call (what its begin returned)
    streamer: Any = None  # HF streamer protocol (put / end): each step's committed tokens, batch 1 only
    rows: torch.LongTensor | None = None  # the call's row of each row still in the batch, once rows were dropped
    done: Any = None  # (tokens, lengths, generated) of every row of the call, for those dropped (_narrow)
    features: bool = False  # the drafter reads the target's features in this call (Drafter.reads_features)


def check_streamer(streamer, input_ids: torch.Tensor) -> None:
    """A streamer follows HF's protocol (``put`` / ``end``) and streams one row: tokens of rows that accept
    different numbers of drafts per step do not form one tensor."""
    if streamer is None:
        return
    if not (callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end", None))):
        raise ValueError(f"streamer must have HF's streamer methods put(token_ids) and end(), got "
                         f"{type(streamer).__name__}")
    rows = input_ids.shape[0] if input_ids.dim() == 2 else 1
    if rows != 1:
        raise ValueError(f"streamer= streams one sequence: batch size must be 1, got {rows} (as HF's streamers "
                         "require); generate the rows one call each to stream them")


class SpeculativeGenerator:
    """Speculative decoding with any drafter on a stock HF causal LM target.

    Threads: ``generate`` may be called from several threads at once, on one generator or on generators
    sharing a drafter: each call keeps its state in its own objects (the drafter's in what its ``begin``
    returns), so calls share only the models' weights."""

    def __init__(self, target_model, drafter: Drafter, max_cache_len: int | None = None, relaxation=None,
                 measure_output_tv: bool | int = False):
        """``relaxation``: None (lossless) or a :class:`~mmspec.verifiers.relaxed.Relaxation` (LANTERN /
        LANTERN++: lossy by design; the mass moved per candidate is reported in ``stats.moved_mass``).
        ``measure_output_tv`` (relaxed only): also compute the exact distortion of each step's first emitted token
        (``stats.output_tv``; costs O(V·k) per row and step, O(V²·k) for two sampled siblings; its time is kept
        out of ``total_time``): True for every row, an int n for the first n rows of the batch.
        Models the loop cannot drive exactly (recurrent layers, ALiBi, ...) are refused here (``mmspec.compat``)."""
        check_supported(target_model, "target")
        check_tree_size(drafter.max_nodes, f"a step of {type(drafter).__name__}")
        self.target = target_model.eval()
        self.drafter = drafter
        self.max_cache_len = max_cache_len
        self.relaxation = relaxation
        if not isinstance(measure_output_tv, (bool, int)):
            raise ValueError(f"measure_output_tv must be a bool or a row count >= 0, got {measure_output_tv!r}")
        if isinstance(measure_output_tv, int) and measure_output_tv < 0:
            raise ValueError(f"measure_output_tv must be a bool or a row count >= 0, got {measure_output_tv}")
        self.measure_output_tv = measure_output_tv if isinstance(measure_output_tv, int) else bool(measure_output_tv)
        # finished rows leave a call's batch (_narrow) when the drafter can follow; relaxed acceptance and the output
        # TV measurement report per row of the call, so they keep every row
        self._drops_rows = drafter.drops_rows and relaxation is None and not self.measure_output_tv
        self.vocab_size = text_config(target_model).vocab_size
        self._prefill_names = prefill_names(target_model)  # the forward's signature does not change: read it once
        if drafter.vocab_size is not None and drafter.vocab_size != self.vocab_size:
            raise ValueError(
                f"drafter vocabulary ({drafter.vocab_size} tokens) does not match the target's "
                f"({self.vocab_size} tokens): the drafter must share the target's tokenizer"
            )

    @torch.no_grad()
    def generate(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None,
                 max_new_tokens: int = 64, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, eos_token_id=None,
                 generator: torch.Generator | None = None, pad_token_id: int | None = None,
                 streamer=None, coupling: str = "rejection", **prefill_inputs) -> GenerationOutput:
        """Speculative generation; same arguments and output layout as HF ``generate``.

        ``prefill_inputs`` (e.g. ``pixel_values`` for LLaVA-class targets) go to the prefill forward
        only; the prompt's image placeholder tokens stay in ``input_ids`` as HF lays them out. Any other
        keyword is an error.

        ``streamer``: an object with HF's streamer protocol (``TextStreamer``, ``TextIteratorStreamer``, or any
        ``put`` / ``end``), fed as HF feeds it: the prompt ids ``[1, P]`` first, then each step's committed tokens
        ``[1, n]`` (cut at EOS and the budget) as soon as they are verified, then ``end()`` (also when the call
        fails, so a consumer thread never waits forever). One row only, as HF's streamers take.

        ``coupling`` (sampling only): ``"rejection"`` (p/q rejection, the default) or ``"gumbel"``: every sampled
        token is the Gumbel-max draw argmax(warped logits + noise fixed per position from ``generator``), drafts
        are kept iff they equal it, and the output is the same as plain decoding's with the same coupling and
        generator, token for token, whatever the drafter (:mod:`mmspec.verifiers.coupling`).
        """
        if not isinstance(input_ids, torch.Tensor) or input_ids.is_floating_point() or input_ids.dtype == torch.bool:
            what = type(input_ids).__name__ if not isinstance(input_ids, torch.Tensor) else f"a {input_ids.dtype} tensor"
            raise ValueError(f"input_ids must be a LongTensor of shape [batch, prompt_len], got {what}")
        check_streamer(streamer, input_ids)
        if self.relaxation is not None:
            check_coupling(coupling, do_sample, relaxed=True)
        check_prefill_inputs(self._prefill_names, prefill_inputs)
        t_start = time.perf_counter()
        try:
            call = self._start(make_request(self.target, input_ids, attention_mask, max_new_tokens, do_sample,
                                            temperature, top_k, top_p, eos_token_id, generator, pad_token_id,
                                            prefill_inputs, coupling))
            if streamer is not None:
                call.streamer = streamer
                streamer.put(call.request.input_ids.cpu())
            return self._run(call, t_start)
        finally:
            if streamer is not None:
                streamer.end()

    def _run(self, call: _Call, t_start: float) -> GenerationOutput:
        self._prefill(call)
        stats = call.stats
        if call.state.active.any():
            before = stats.draft_time
            with timed(stats, "draft_time"):
                call.run = self.drafter.begin(call.context)
            self._step(call)  # the first step: its drafting counts as the drafter's prefill too
            stats.drafter_prefill_time = stats.draft_time - before
        while live := int(call.state.active.sum()):
            if call.context.rows_leave and 2 * live <= call.state.batch_size:
                self._narrow(call)
            self._step(call)
        return self._finish(call, t_start)

    def _narrow(self, call: _Call) -> None:
        """Drop the rows that finished, once they are half the batch: their tokens are kept aside, and the target's
        cache, the token buffer, the drafter's state and every later forward hold only the rows still generating
        (HF's loop computes finished rows to the end, as padding). At most log2(batch) times a call; each row's
        tokens are the same either way (greedy), or drawn from the same distributions (sampling)."""
        state, ctx = call.state, call.context
        keep = torch.nonzero(state.active).flatten()
        if call.rows is None:
            call.rows = torch.arange(state.batch_size, device=keep.device)
            call.done = (state.tokens.clone(), state.lengths.clone(), call.generated.clone())
        gone = torch.nonzero(~state.active).flatten()
        tokens, lengths, generated = call.done
        at = call.rows[gone]
        tokens[at], lengths[at], generated[at] = state.tokens[gone], state.lengths[gone], call.generated[gone]
        call.rows = call.rows[keep]
        call.cache.select_rows(keep)
        state.select_rows(keep)
        ctx.select_rows(keep)
        call.generated = call.generated[keep]
        call.run = self.drafter.select_rows(call.run, keep)

    # ------------------------------------------------------------------ the loop, step by step
    def _start(self, request: Request) -> _Call:
        """The call's target cache (sized for the prompt, the budget and one draft tree), verifier and stats."""
        B, P = request.input_ids.shape
        cache_len = cache_length(self.target, P, request.max_new_tokens, self.drafter.max_nodes, self.max_cache_len)
        self.drafter.check_inputs(request.prefill_inputs)
        return _Call(request, SpecKVCache.for_model(self.target, B, cache_len),
                     TreeVerifier(request.sampling, self.relaxation, self.measure_output_tv),
                     GenerationStats(accept_lengths=[[] for _ in range(B)],
                                     kernel_backend=backend_for_device(request.input_ids.device)),
                     features=self.drafter.reads_features(B, request.sampling.do_sample, request.max_new_tokens))

    def _prefill(self, call: _Call) -> None:
        """The whole prompt through the target, then the first token (which becomes the first tree root); the
        token buffer and the drafter's context."""
        req, cache, stats = call.request, call.cache, call.stats
        ids, mask = req.input_ids, req.attention_mask
        (B, P), dev = ids.shape, ids.device
        wants_features = call.features
        with timed(stats, "prefill_time", "verify_time"):
            # what the model would derive itself from the processor's outputs: M-RoPE positions, prefix blocks
            positions, cache.position_shift = prompt_positions(self.target, ids, mask, req.prefill_inputs)
            blocks = bidirectional_blocks(self.target, req.prefill_inputs, mask.bool())
            with capture_image_embeds(self.target, enabled=wants_features) as images:
                out = tree_forward(self.target, cache, ids, prefill_parents(mask), mask.bool(),
                                   output_hidden_states=wants_features, position_ids=positions, prefix_blocks=blocks,
                                   **last_logits_kwargs(self.target), **req.prefill_inputs)
            cache.commit_first(torch.full((B,), P, device=dev))
            cache.starts = (P - mask.sum(1)).to(dev)
            noise = GumbelNoise.for_call(B, out.logits.shape[-1], req.generator, dev) if req.sampling.gumbel else None
            first = req.sampling.pick(out.logits[:, -1].float(), req.generator,
                                      None if noise is None else noise.at(torch.zeros(B, 1, dtype=torch.long,
                                                                                      device=dev))[:, 0])
        stats.record_forward(B)

        capacity = P + req.max_new_tokens + self.drafter.max_nodes + 2
        tokens = torch.full((B, capacity), req.pad_token_id, dtype=torch.long, device=dev)
        tokens[:, :P] = ids
        tokens[:, P] = first
        call.state = DecodeState(tokens, torch.full((B,), P + 1, device=dev), cache.starts.clone(), P,
                                 torch.ones(B, dtype=torch.bool, device=dev), req.sampling, req.generator, noise)
        call.generated = torch.ones(B, dtype=torch.long, device=dev)
        for b in range(B):
            stats.accept_lengths[b].append(1)
        if call.streamer is not None:
            call.streamer.put(first[:, None].cpu())
        self._retire(call, self._is_eos(call, first))
        call.context = DraftContext(call.state, ids, mask, capacity, image_token_id(self.target),
                                    hidden=self.drafter.target_features(out.hidden_states) if wants_features else None,
                                    image_embeds=images.embeds, rows_leave=self._drops_rows)

    def _step(self, call: _Call) -> None:
        """propose -> verify -> commit -> observe."""
        state, stats = call.state, call.stats
        with timed(stats, "draft_time"):
            tree = self.drafter.propose(call.context, call.run)
        with timed(stats, "verify_time"):
            verified, index = self._emittable(call, tree)
            noise = state.noise_after_root(verified.depth) if state.noise is not None else None
            check = call.verifier.verify(self.target, call.cache, verified, state.generator,
                                         output_hidden_states=call.features, noise=noise)
        stats.record_forward(int(state.active.sum()))
        stats.record_relaxation(check.result, state.active)
        self._commit(call, verified, check.result)
        if noise is not None and state.active.any():  # the noise of positions every generating row has passed
            state.noise.release_before(int((state.lengths - state.prompt_length)[state.active].min()))
        if state.active.any():
            with timed(stats, "draft_time"):
                hidden = None if check.hidden_states is None else self.drafter.target_features(check.hidden_states)
                result = check.result
                if index is not None:  # the drafter sees its own tree's node indices
                    result, hidden = _as_proposed(result, hidden, index, tree.num_nodes)
                self.drafter.observe(call.context, call.run, tree, result, hidden)

    @staticmethod
    def _emittable(call: _Call, tree: DraftTree) -> tuple[DraftTree, torch.LongTensor | None]:
        """The nodes of ``tree`` whose tokens could be emitted, and where they came from (:meth:`DraftTree.kept`):
        a row emits at most its remaining budget and nothing after an EOS, so the nodes deeper than the budget
        allows and those below a drafted EOS are never emitted whatever the target says. The verify forward's
        cost grows with its nodes on a CPU (a chain of 15 drafted past an answer's EOS costs the VLM suite's last
        step the most), and dropping them changes no emitted token (greedy) or its distribution (sampling: each
        emitted token's acceptance reads only its ancestors and their siblings, all kept). Finished rows keep their
        root alone."""
        if tree.is_root_only:
            return tree, None
        state, req = call.state, call.request
        room = torch.where(state.active, req.max_new_tokens - call.generated - 1, 0)  # drafts a row may still emit
        deep = (tree.depth > room[:, None]) & tree.valid
        eos = torch.isin(tree.tokens, req.eos) & tree.valid if req.eos.numel() else None
        if eos is not None:
            eos[:, 0] = False
        if not bool((deep if eos is None else deep | eos).any()):  # (the one device sync of a step that drops none)
            return tree, None
        keep = ~deep
        if eos is not None:  # below a drafted EOS: an EOS among its ancestors other than itself
            keep &= (tree.ancestor_mask & eos[:, None, :]).sum(-1) <= eos.long()
        if bool((keep | ~tree.valid).all()):
            return tree, None
        return tree.kept(keep)

    def _commit(self, call: _Call, tree: DraftTree, result: AcceptResult) -> None:
        """Append each row's emitted tokens (cut at EOS and at the budget) to the buffer, and keep exactly those
        (root + accepted drafts) in the target's cache."""
        state = call.state
        new, counts = result.emitted_tokens(tree)
        counts, finished = self._cut(call, new, counts)
        call.cache.commit(result.paths, torch.minimum(result.path_lengths, counts))
        rows = torch.nonzero(state.active).flatten()
        names = rows if call.rows is None else call.rows[rows]  # the call's rows, once finished ones were dropped
        for b, n in zip(names.tolist(), counts[rows].tolist()):  # one device sync, not one per row
            call.stats.accept_lengths[b].append(n)
            if call.streamer is not None and n:
                call.streamer.put(new[b: b + 1, :n].cpu())
        state.append(new, counts)
        call.generated += counts
        self._retire(call, finished)

    # ------------------------------------------------------------------ EOS and budget bookkeeping
    @staticmethod
    def _cut(call: _Call, new: torch.LongTensor, counts: torch.LongTensor):
        """How many of ``new`` each row emits: none once done, at most its remaining budget, up to and including
        its first EOS. Returns ``(counts, finished)``, finished = the row emitted an EOS."""
        req, state = call.request, call.state
        counts = torch.where(state.active, torch.minimum(counts, req.max_new_tokens - call.generated), 0)
        if not req.eos.numel():
            return counts, torch.zeros_like(state.active)
        j = torch.arange(new.shape[1], device=new.device)[None, :]
        hit = torch.isin(new, req.eos) & (j < counts[:, None])
        first_eos = torch.where(hit, j, new.shape[1]).min(1).values
        finished = hit.any(1)
        return torch.where(finished, first_eos + 1, counts), finished

    @staticmethod
    def _is_eos(call: _Call, tokens: torch.LongTensor) -> torch.BoolTensor:
        eos = call.request.eos
        return torch.isin(tokens, eos) if eos.numel() else torch.zeros_like(call.state.active)

    @staticmethod
    def _retire(call: _Call, finished: torch.BoolTensor) -> None:
        """Rows that emitted an EOS or spent their budget stop generating."""
        call.state.active &= ~finished & (call.generated < call.request.max_new_tokens)

    # ------------------------------------------------------------------ finish
    @staticmethod
    def _finish(call: _Call, t_start: float) -> GenerationOutput:
        """The sequences laid out like HF's (left padding kept, rows that stopped early padded) and the stats,
        with the output-TV measurement's time kept out of the timings."""
        state, stats = call.state, call.stats
        tokens, lengths, generated = state.tokens, state.lengths, call.generated
        if call.rows is not None:  # rows were dropped on the way: the kept ones go back among them
            tokens, lengths, generated = call.done
            tokens[call.rows], lengths[call.rows], generated[call.rows] = state.tokens, state.lengths, call.generated
        stats.new_tokens = int(generated.sum())
        width = state.prompt_length + int(generated.max())
        sequences = tokens[:, :width].clone()
        j = torch.arange(width, device=sequences.device)[None, :]
        sequences[j >= lengths[:, None]] = call.request.pad_token_id
        stats.output_tv_time = call.verifier.output_tv_time
        stats.verify_time -= stats.output_tv_time
        stats.total_time = time.perf_counter() - t_start - stats.output_tv_time
        return GenerationOutput(sequences, stats)


def _as_proposed(result: AcceptResult, hidden: torch.Tensor | None, index: torch.LongTensor,
                 nodes: int) -> tuple[AcceptResult, torch.Tensor | None]:
    """A verification of a kept subtree (:meth:`DraftTree.kept`, ``index`` [B, N']) in the node indices of the tree
    of ``nodes`` nodes it was cut from: its paths mapped back, and the features [B, N', F] at their nodes (zeros at
    the dropped ones, which no path reaches)."""
    paths = index.gather(1, result.paths)
    mapped = AcceptResult(paths, result.path_lengths, result.bonus, result.moved_mass, result.output_tv)
    if hidden is None:
        return mapped, None
    B, _, F = hidden.shape
    at = torch.where(index > 0, index, nodes)  # padding (index 0 past the root) goes to a scratch column
    at[:, 0] = 0
    full = hidden.new_zeros(B, nodes + 1, F).scatter_(1, at[..., None].expand(-1, -1, F), hidden)
    return mapped, full[:, :nodes]
