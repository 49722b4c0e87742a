"""DFlash drafting in the decoding loop (Chen et al., 2026, "DFlash: Block Diffusion for Flash Speculative Decoding",
arXiv 2602.06036): one forward of a block ``[root, MASK × (B−1)]`` through a small drafter conditioned on the target's
features gives B−1 slot distributions; the network is :mod:`mmspec.drafters.dflash_model`.

Bookkeeping. The drafter's own :class:`~mmspec.cache.SpecKVCache` holds, per draft layer, the keys / values of the
fused target features of **verified** tokens only. Each verification stores the features of the accepted path
(root + accepted drafts, which the verify forward has just computed: the loop hands the drafter its
:meth:`target_features` of the verifier's hidden states) in a per-call buffer, and each draft first appends the
positions the cache does not hold yet (the prompt at the first draft), so a step the adaptive policy runs plain costs
the drafter a copy. Entry t is the feature of buffer position t, and the root — the bonus token, not yet seen by the
target — is the block's first token. The block's own keys / values are pending entries dropped after the forward.

What the block becomes (all three verified by the shared tree verifier):

* **chain** — the slots' argmax (greedy) or one draw per slot from its own q (sampling: the slots are independent
  given the context, so q_j is a valid proposal for slot j whatever was drawn before it, and p/q rejection stays
  lossless — the reference drafts greedily only), cut after the first slot below ``confidence`` (as DEER's chain);
* **tree** (DDTree, arXiv 2604.12989) — a best-first tree from the per-slot top-k under a node budget: a path
  scores the sum of its slots' log-probabilities; popping a node pushes its next sibling (same slot, next rank)
  and its first child (next slot, rank 0), so the ``tree_nodes`` best-scoring prefixes are verified in one target
  pass; with ``tree_cut`` the search also stops at the first prefix whose probability falls below it (a tree as
  large as the drafter's confidence, as EAGLE-2's dynamic trees are: on a CPU the verify forward's cost grows with
  its nodes, and most of a full budget is wasted where the drafter is unsure). Under sampling the same shape (a
  function of q alone) is filled by drawing each node's children from their slot's q without replacement, which the
  verifier's multi-draft rule keeps lossless.

With ``compress_to`` (a drafter with visual queries, on a VLM target) each picture in the prompt enters the context
as ``compress_to`` entries instead of one per placeholder (FLASH's latent compression; see
:meth:`~mmspec.drafters.dflash_model.DFlashDraftModel.compress_context`): the context cache then runs ``shift``
entries behind the token buffer, the same for every row.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import torch

from ..cache import SpecKVCache
from ..state import DraftContext
from ..tree import DraftTree, graft_rows
from ..verifiers.acceptance import AcceptResult
from ..verifiers.logits import SamplingConfig
from ..verifiers.tree_forward import text_config
from .base import Drafter, check_confidence, coupled_view, feature_buffer, store_path_features, trusted_slots
from .dflash_model import DFlashDraftModel, check_block, checked_vocab, emitted
from .lean_layer import Int8Drafter
from .prompt_lookup import lookup_match


LAZY_SLOTS = 4  # slots the confident chain sends through the LM head first (the rest follow in one call)
_IMPOSSIBLE = -60.0  # log-probability below which a slot's token is one its (warped) q gives no mass
_GREEDY = SamplingConfig(False)  # the drafts of the greedy block (``sampled_drafts=False``)
LOOKUP_NGRAM = (1, 3)  # the n-gram lengths ``lookup`` matches (min, max), as PromptLookupDrafter's defaults
# the shortest match a lone lookup step needs (a continuation after a one-token match only joins the DDTree): along
# the zoo's code target's greedy answers a lone continuation after a one-token match emitted 2.0 tokens a step and
# nothing past its root 70-75% of the time, after longer matches 3.5-9 (HumanEval and the suite's prompts)
ALONE_MATCH = 2


@dataclass
class DFlashRun:
    """One call's drafting state: the target's features at every verified position, and the drafter's context
    cache over them (entries = verified positions, prompt padding kept), built at the call's first draft and
    caught up from the features at each later one."""

    features: torch.Tensor  # [B, max_length + 2, K·H] the named layers' features at each token position
    cache: SpecKVCache | None = None
    shift: int = 0  # token-buffer positions the context does not hold one entry each for (compressed pictures)
    # the last drafter forward's slot states [B, block - 1, H] and the generated index of each row's first slot
    # [B] (``reuse_block``), and how many more steps may draft from them (0: the next step runs a forward)
    block: tuple[torch.Tensor, torch.LongTensor] | None = None
    block_uses: int = 0


def check_target(net: DFlashDraftModel, target) -> None:
    """Refuse a target this drafter was not built for, by name: its width, depth and vocabulary must be the ones
    the drafter's features and slots assume."""
    cfg = text_config(target)
    width = net.fc.in_features // (len(net.target_layer_ids) * net.feature_branches)
    if width != cfg.hidden_size:
        raise ValueError(f"this DFlash drafter reads {len(net.target_layer_ids)} target layers of width {width}, "
                         f"but the target's hidden size is {cfg.hidden_size}: it was trained for another model")
    if max(net.target_layer_ids) >= cfg.num_hidden_layers:
        raise ValueError(f"this DFlash drafter reads target layers {net.target_layer_ids}, but the target has "
                         f"{cfg.num_hidden_layers} layers: it was trained for another model")
    expected = getattr(net.config, "num_target_layers", None)
    if expected is not None and int(expected) != cfg.num_hidden_layers:
        raise ValueError(f"this DFlash drafter was trained for a {expected}-layer target, the target has "
                         f"{cfg.num_hidden_layers} layers")
    if net.config.vocab_size != cfg.vocab_size:
        raise ValueError(f"drafter vocabulary ({net.config.vocab_size} tokens) does not match the target's "
                         f"({cfg.vocab_size} tokens)")
    if not 0 <= net.mask_token_id < cfg.vocab_size:
        raise ValueError(f"the drafter's mask token id {net.mask_token_id} is outside the target's vocabulary")


class DFlashDrafter(Drafter):
    """A :class:`DFlashDraftModel` drafting blocks for its target: a chain of ``num_tokens`` slots (default: the
    whole block), or with ``tree_nodes`` a DDTree of that many draft nodes over the slots' ``top_k`` tokens.
    ``block``: run blocks of that many positions instead of the drafter's whole block (a forward over 8 positions
    costs a CPU far less than over 16; a drafter trained with ``block_choices`` drafts them as well as its own).
    ``draft_vocab``: the only token ids it drafts (e.g. the most frequent in the target's answers), so the LM head
    runs over those rows alone (:meth:`head`; None: the drafter's own, ``dflash_config["draft_vocab"]``, if it has one;
    ``range(vocab_size)`` drafts from the whole vocabulary whatever it has). ``lookup``: graft up to that many prompt-lookup tokens (the
    continuation after an earlier match of the context's last 1-3 tokens) onto the DDTree as one more branch
    (:meth:`~mmspec.tree.DraftTree.grafted`), so text that repeats the prompt is drafted whatever the block drafter
    thinks of it; in greedy calls and under ``sampled_drafts=False`` (a deterministic tree either way), not onto a
    tree sampled from q. ``lookup_alone``: a greedy step where every row still generating has a lookup
    continuation of at least that many tokens verifies that continuation alone, without the drafter's forward
    (prompt lookup's step: on the zoo's CPU the forward, the head and the search are a fifth of a drafted step); the
    features of the tokens it accepts join the drafter's context at its next forward. ``weights``: ``"float"`` (the
    model's own weights), ``"int8"`` (its layers, ``fc`` and draft head as int8 weight-only products, quantised once
    here: on a CPU the drafter's step waits on reading its weights, see :mod:`mmspec.kernels.int8_linear`; the
    verifier keeps the output exact) or ``"auto"`` (int8 where the device has the kernel, the widths fit and the
    matrices hold ``int8_linear.AUTO_INT8_BYTES`` or more, else float). ``reuse_block``: a step right after a drafter
    forward drafts, without a forward, from that forward's slots past its new root when at least this many are
    left (a slot is a proposal for its position, whichever step verifies it; on the zoo's image target a slot's
    overlap with the target hardly depends on how far ahead it drafts, so the slots after the accepted ones are
    still good drafts, and those steps save the drafter's forward); ``reuse_steps`` such steps in a row at most."""

    needs_target_hidden = True
    drops_rows = True  # select_rows narrows the feature buffer and the context cache
    shadow_drafts = True  # a draft's block keys / values are dropped after its forward; the cache holds verified ones

    def __init__(self, net: DFlashDraftModel, target, num_tokens: int | None = None, confidence: float | None = None,
                 tree_nodes: int | None = None, top_k: int = 4, sampled_drafts: bool = True,
                 compress_to: int | None = None, block: int | None = None, draft_vocab=None,
                 lookup: int | None = None, lookup_alone: int | None = None, tree_cut: float | None = None,
                 weights: str = "float", reuse_block: int | None = None, reuse_steps: int = 1):
        check_target(net, target)
        if net.feature_branches != getattr(target, "feature_branches", 1):
            raise ValueError(f"this DFlash drafter reads {net.feature_branches} feature(s) per target layer but the "
                             f"target returns {getattr(target, 'feature_branches', 1)}: a drafter of both CFG branches "
                             "needs CFGModel(..., feature_branches=2), one of guided features the default")
        if compress_to is not None:
            net.check_compress(compress_to)
        check_confidence(confidence)
        self.block = check_block(net, block)
        slots = self.block - 1
        num_tokens = slots if num_tokens is None else int(num_tokens)
        if not 1 <= num_tokens <= slots:
            raise ValueError(f"num_tokens must be in 1..{slots} (a block of {self.block} drafts {slots} slots), "
                             f"got {num_tokens}")
        if tree_nodes is not None and (int(tree_nodes) < 1 or top_k < 1):
            raise ValueError(f"tree_nodes and top_k must be >= 1, got {tree_nodes} and {top_k}")
        if tree_nodes is not None and confidence is not None:
            raise ValueError("confidence cuts a chain; a DDTree is bounded by tree_nodes instead")
        if lookup is not None and (tree_nodes is None or int(lookup) < 1):
            raise ValueError(f"lookup grafts a prompt-lookup continuation onto a DDTree: it needs tree_nodes and "
                             f"lookup >= 1, got tree_nodes={tree_nodes}, lookup={lookup}")
        self.lookup = None if lookup is None else int(lookup)
        if lookup_alone is not None and (self.lookup is None or not 1 <= int(lookup_alone) <= self.lookup):
            raise ValueError(f"lookup_alone is the shortest lookup continuation drafted without the block drafter: it "
                             f"needs lookup and 1 <= lookup_alone <= lookup, got lookup={lookup}, "
                             f"lookup_alone={lookup_alone}")
        self.lookup_alone = None if lookup_alone is None else int(lookup_alone)
        if tree_cut is not None and (tree_nodes is None or isinstance(tree_cut, bool) or
                                     not isinstance(tree_cut, (int, float)) or not 0.0 < tree_cut < 1.0):
            raise ValueError(f"tree_cut is the path probability below which a DDTree stops growing: it needs "
                             f"tree_nodes and 0 < tree_cut < 1, got tree_nodes={tree_nodes}, tree_cut={tree_cut!r}")
        self.tree_cut = None if tree_cut is None else float(tree_cut)
        if reuse_block is not None and (isinstance(reuse_block, bool) or not isinstance(reuse_block, int)
                                        or not 1 <= reuse_block <= slots):
            raise ValueError(f"reuse_block is the fewest slots left of the last block that a step drafts from without "
                             f"a drafter forward: 1..{slots}, got {reuse_block!r}")
        if reuse_block is not None and (isinstance(reuse_steps, bool) or not isinstance(reuse_steps, int)
                                        or reuse_steps < 1):
            raise ValueError(f"reuse_steps is how many steps in a row draft from one forward's slots: >= 1, got "
                             f"{reuse_steps!r}")
        self.reuse_block, self.reuse_steps = reuse_block, reuse_steps
        self._cut = -math.inf if tree_cut is None else math.log(tree_cut)
        self.net = net.eval()
        self.embed = target.get_input_embeddings()
        self.lm_head = target.get_output_embeddings()
        self.never = getattr(target, "disallowed", None)  # ids the target never emits: no draft mass
        self.draft_vocab = self.draft_head = self.draft_bias = None
        V = self.lm_head.weight.shape[0]
        ids = net.draft_vocab if draft_vocab is None else draft_vocab  # (a drafter's own, read from its config)
        ids = None if ids is None else checked_vocab(ids, V)
        if ids is not None and len(ids) < V:  # (the whole vocabulary needs no gathered head)
            # the head's rows of those ids, gathered once (a slot's logits then cost |draft_vocab| rows, not V)
            self.draft_vocab = torch.tensor(ids, dtype=torch.long, device=self.lm_head.weight.device)
            self.draft_head = self.lm_head.weight.detach()[self.draft_vocab].clone()
            bias = getattr(self.lm_head, "bias", None)
            self.draft_bias = None if bias is None else bias.detach()[self.draft_vocab].clone()
        # the ids the target never emits, among the drafted ones (their logits alone: see `greedy_logits`)
        self.draft_never = None if self.never is None or self.draft_vocab is None else \
            self.never.to(self.draft_vocab.device)[self.draft_vocab]
        self.num_tokens = num_tokens
        self.confidence = confidence
        self.tree_nodes = None if tree_nodes is None else int(tree_nodes)
        self.top_k = int(top_k)
        self.vocab_size = int(net.config.vocab_size)
        self.sampled_drafts = bool(sampled_drafts)
        self.compress_to = None if compress_to is None else int(compress_to)
        head = self.draft_head if self.draft_head is not None else self.lm_head.weight
        bias = self.draft_bias if self.draft_head is not None else getattr(self.lm_head, "bias", None)
        self.int8 = Int8Drafter.build(weights, net.layers, net.fc, head, bias, net.device, "this DFlash drafter")
        self._budgets = self._halved_budgets()  # (tree_budgets: fixed by tree_nodes and lookup, read every step)

    @property
    def weights(self) -> str:
        """What the products compute with: "int8" or "float"."""
        return "float" if self.int8 is None else "int8"

    @property
    def max_nodes(self) -> int:
        return (self.tree_nodes if self.tree_nodes is not None else self.num_tokens) + 1 + (self.lookup or 0)

    @property
    def tree_budgets(self) -> tuple:
        """The DDTree's sizes, its own first: (nodes, lookup tokens) halved down to two nodes, each tree the first
        nodes of the larger one's best-first order with the first tokens of its lookup branch, so it lies inside
        every larger one (:mod:`mmspec.drafters.budgets`). A chain offers its own size only."""
        return self._budgets

    def _halved_budgets(self) -> tuple:
        if self.tree_nodes is None:
            return ()
        sizes, n = [], self.tree_nodes
        while True:
            sizes.append((n, 0 if self.lookup is None else max(1, -(-self.lookup * n // self.tree_nodes))))
            if n <= 2:
                return tuple(sizes)
            n //= 2

    def target_features(self, hidden_states: tuple) -> torch.Tensor:
        return self.net.select_features(hidden_states)

    def check_inputs(self, prefill_inputs: dict) -> None:
        if prefill_inputs.get("pixel_values_videos") is not None:
            raise ValueError("the DFlash drafter reads text targets' features: videos are not supported with it")

    # ------------------------------------------------------------------ the context cache
    def _append(self, cache: SpecKVCache, ctx: torch.Tensor, valid: torch.BoolTensor) -> None:
        """Append fused context ``ctx`` [B, n, H] as pending entries, a chain per row through its ``valid`` ones
        (committed by the caller): keys and values only, so no attention mask is built."""
        positions = cache.prepare_chain(valid)
        net = self.net
        cos, sin = net.rope(ctx, positions)
        for i in range(len(net.layers)):
            k, v = net.context_kv(i, ctx, cos, sin, self.int8)
            cache.layers[i].update(k, v)

    @torch.no_grad()
    def begin(self, context: DraftContext) -> DFlashRun:
        """The call's feature buffer, holding the prompt's features. The context cache waits for the first draft
        (:meth:`_catch_up`), and each verification only stores its accepted path's features (:meth:`observe`): a
        step the adaptive policy runs plain (a large batch) then costs the drafter a copy, not a fused append."""
        if context.hidden is None:
            raise ValueError("a DFlash drafter needs the target's prefill features (run it through "
                             "SpeculativeGenerator)")
        return DFlashRun(feature_buffer(context, context.hidden.shape[-1], self.net.dtype, self.net.device))

    def _prefill(self, context: DraftContext, run: DFlashRun) -> None:
        """The context cache over the prompt's fused features (each picture in ``compress_to`` entries)."""
        state = context.state
        net = self.net
        dev = net.device
        B, P = state.batch_size, state.prompt_length
        valid = torch.arange(P, device=dev)[None, :] >= state.starts.to(dev)[:, None]
        ctx = net.fuse(run.features[:, :P], self.int8)
        image = context.image_mask
        if self.compress_to is not None and image is not None and bool(image.any()):
            ctx, valid, _ = net.compress_context(ctx, image.to(dev), valid, self.compress_to, align="left")
        S = ctx.shape[1]
        cache = SpecKVCache.for_model(net, B, context.max_length - (P - S) + net.block_size + 2)
        self._append(cache, ctx, valid)
        cache.commit_first(torch.full((B,), S, device=dev))
        cache.starts = (S - valid.sum(1)).to(dev)
        run.cache, run.shift = cache, P - S

    def _catch_up(self, context: DraftContext, run: DFlashRun) -> None:
        """The context cache over the prompt, at the call's first draft. The verified positions that join it later
        (the accepted paths of the steps since the last draft) are appended by the next block forward itself
        (:meth:`slot_hidden`), so that the cache holds every position before the root while the block attends."""
        if run.cache is None:
            self._prefill(context, run)

    def _new_entries(self, context: DraftContext, run: DFlashRun) -> tuple[torch.Tensor, torch.LongTensor] | None:
        """(fused features [B, n, H], counts [B]) of the verified positions the context cache does not hold yet, the
        root left out (the target has not computed its feature yet); None when there are none."""
        cache, state = run.cache, context.state
        if state.batch_size == 1:  # (one row: a slice of the feature buffer, no index tensors)
            start = int(cache.lengths[0]) + run.shift
            width = int(state.lengths[0]) - start - 1
            if width <= 0:
                return None
            new = torch.full((1,), width, dtype=torch.long, device=cache.lengths.device)
            return self.net.fuse(run.features[:, start: start + width], self.int8), new
        unseen = state.unseen(cache.lengths + run.shift)  # token positions from the first one not held
        new = (unseen.counts - 1).clamp(min=0)
        width = int(new.max())
        if width == 0:
            return None
        at = unseen.positions[:, :width]
        feats = run.features.gather(1, at[..., None].expand(-1, -1, run.features.shape[-1]))
        return self.net.fuse(feats, self.int8), new

    def select_rows(self, run: DFlashRun, keep: torch.LongTensor) -> DFlashRun:
        rows = keep.to(run.features.device)
        if run.cache is not None:
            run.cache.select_rows(rows)
        run.features = run.features.index_select(0, rows)
        run.block, run.block_uses = None, 0
        return run

    def observe(self, context: DraftContext, run: DFlashRun, tree: DraftTree, result: AcceptResult,
                hidden: torch.Tensor | None = None) -> None:
        """Store the features of each row's emitted path (root + accepted drafts, cut where the loop cut it); the
        next draft appends them to the context cache."""
        if hidden is None:
            raise ValueError("a DFlash drafter needs the verifier's hidden states")
        store_path_features(run.features, context, result, hidden)

    # ------------------------------------------------------------------ drafting
    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Float logits of slot states through the target's LM head (ids the target never emits at −inf). With a
        ``draft_vocab`` only those ids get logits and every other id −inf (FR-Spec's frequency-ranked draft
        vocabulary, arXiv 2502.14856): the drafts and each slot's q stay over the whole vocabulary, so the verifier
        is unchanged and sampling stays lossless (q gives the other ids no mass; the residual keeps them)."""
        if self.draft_vocab is None:
            return emitted((self.lm_head(h) if self.int8 is None else self.int8.head(h)).float(), self.never)
        sub, ids = self.greedy_logits(h)  # (the ids it never emits already −inf)
        full = sub.new_full((*sub.shape[:-1], self.lm_head.weight.shape[0]), float("-inf"))
        full[..., ids] = sub
        return full

    def greedy_logits(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(float logits [..., n], ids [n] or None) of slot states for greedy drafting, which reads only the best ids
        and their log-probabilities: with a ``draft_vocab``, the logits over those ids alone (``ids`` maps a column
        to its token id), which ranks them as :meth:`head`'s full row does and gives them the same log-softmax (the
        others are −inf there), without building and scattering into a row of the whole vocabulary (0.1 ms of
        index_put a step on the zoo's code drafter, and a log-softmax and top-k half as wide); else :meth:`head`'s
        logits and None."""
        if self.draft_vocab is None:
            return self.head(h), None
        sub = torch.nn.functional.linear(h, self.draft_head, self.draft_bias) if self.int8 is None else \
            self.int8.head(h)
        sub = sub.float()
        return emitted(sub, self.draft_never), self.draft_vocab

    @torch.no_grad()
    def slot_hidden(self, context: DraftContext, run: DFlashRun) -> torch.Tensor:
        """[B, num_tokens, H] the block's final-normed states at its first ``num_tokens`` slots (one drafter forward;
        the LM head is applied by the caller, to the slots it needs). The forward also computes the keys / values
        of the verified positions the context cache does not hold yet (:meth:`_new_entries`), in the same products
        as the block's own, and commits them to the cache after it (:meth:`SpecKVCache.extend_committed`); the block
        attends to the committed entries, those, and itself, whose keys / values are not kept. A lone unpadded row's
        block sees every entry, so it runs without a mask (SDPA's unmasked path)."""
        self._catch_up(context, run)
        net, cache = self.net, run.cache
        dev = net.device
        state = context.state
        B, T = state.batch_size, self.block
        tokens = torch.full((B, T), net.mask_token_id, dtype=torch.long, device=dev)
        tokens[:, 0] = state.roots.to(dev)
        x = self.embed(tokens).to(net.dtype)
        entries = self._new_entries(context, run)
        positions, mask, keys, values = cache.block_view(T)
        ctx = None
        if entries is not None:
            ctx, new = entries
            n = ctx.shape[1]
            valid = torch.arange(n, device=dev)[None, :] < new[:, None]
            seen = cache.seen_tokens[:, None]
            positions = torch.cat([torch.where(valid, seen + torch.arange(n, device=dev), 0), positions + new[:, None]], 1)
            if mask is not None:
                L = keys[0].shape[2]
                mask = torch.cat([mask[..., :L], valid[:, None, None, :].expand(B, 1, T, n), mask[..., L:]], -1)
        cos, sin = net.rope(x, positions)
        added = []

        def keys_values(i, k, v):
            if ctx is not None:
                added.append((k[:, :, :n], v[:, :, :n]))
            return torch.cat([keys[i], k], dim=2), torch.cat([values[i], v], dim=2)

        h = net.block(x, cos, sin, keys_values, mask, context=ctx, int8=self.int8)
        if ctx is not None:
            cache.extend_committed(added, new)
        if self.reuse_block is not None:
            run.block, run.block_uses = (h[:, 1:], (state.lengths - state.prompt_length).to(dev)), self.reuse_steps
        return h[:, 1: 1 + self.num_tokens]

    def _slots(self, context: DraftContext, run: DFlashRun) -> torch.Tensor:
        """[B, n, H] the slot states a step drafts from: the last forward's slots past each row's new root when
        ``reuse_block`` allows (within ``reuse_steps`` steps of that forward, at least ``reuse_block`` left), else a
        forward's (:meth:`slot_hidden`)."""
        if self.reuse_block is None or run.block_uses <= 0:
            return self.slot_hidden(context, run)
        h, first = run.block
        run.block_uses -= 1
        state = context.state
        ahead = (state.lengths - state.prompt_length).to(first.device) - first  # slots the rows moved past
        left = h.shape[1] - int(ahead.max())
        if left < self.reuse_block:
            return self.slot_hidden(context, run)
        n = min(left, self.num_tokens)
        at = (ahead[:, None] + torch.arange(n, device=h.device)).clamp(max=h.shape[1] - 1)
        return h.gather(1, at[..., None].expand(*at.shape, h.shape[-1]))

    @torch.no_grad()
    def propose(self, context: DraftContext, run: DFlashRun) -> DraftTree:
        state = context.state
        sampling = state.sampling
        if sampling.gumbel:
            return self._coupled(state, self._slots(context, run))
        if sampling.do_sample and not self.sampled_drafts:
            # the greedy block under sampling: deterministic drafts (no q), each verified as a point mass — accepted
            # with the target's probability of it, the residual p without it: lossless all the same
            sampling = _GREEDY
        if self.tree_nodes is not None and not sampling.do_sample:
            # the full branch (the largest size's): the lone step's, else grafted onto the tree, looked up once
            branches = self._branches(state, self.lookup) if self.lookup is not None else None
            alone = self._lookup_alone(state, branches) if self.lookup_alone is not None else None
            if alone is not None:
                run.block_uses = 0  # (the next step's slots would be older than a step drafted from them)
            conts = None if branches is None else branches[0]
            return alone if alone is not None else self.propose_sized(context, run, [0], conts)[0]
        roots = state.roots.to(self.net.device)
        if self.tree_nodes is not None:  # (sampling here: a greedy tree returned above)
            return self._ddtree(roots, self.head(self._slots(context, run)), sampling, state.generator,
                                self.tree_nodes)
        return self._chain(roots, self._slots(context, run), state, sampling)

    @staticmethod
    def _branches(state, length: int) -> tuple[list[list[int]], list[int]]:
        """Each row's prompt-lookup continuation of up to ``length`` tokens, and the length of the match it follows
        (none, 0, for a row not generating)."""
        found = [lookup_match(state.row(b), length, LOOKUP_NGRAM[1], LOOKUP_NGRAM[0]) if active else (None, 0)
                 for b, active in enumerate(state.active.tolist())]
        return [[] if c is None else c.tolist() for c, _ in found], [n for _, n in found]

    def _lookup_alone(self, state, branches: tuple | None = None) -> DraftTree | None:
        """The root with each row's lookup continuation (``branches``, from :meth:`_branches`, looked up here if not
        given), when every row still generating has one of at least ``lookup_alone`` tokens after a match of at least
        ``ALONE_MATCH`` tokens; else None (the step drafts the DDTree)."""
        conts, matched = self._branches(state, self.lookup) if branches is None else branches
        rows = state.active.tolist()
        if not any(rows) or any(a and (len(c) < self.lookup_alone or n < ALONE_MATCH)
                                for a, c, n in zip(rows, conts, matched)):
            return None
        return DraftTree.root_only(state.roots.to(self.net.device)).grafted(conts)

    @torch.no_grad()
    def propose_sized(self, context: DraftContext, run: DFlashRun, which: list[int],
                      branches: list[list[int]] | None = None) -> list[DraftTree]:
        """Deterministic trees (the slots' top tokens) of the sizes ``tree_budgets[i]`` for i in ``which``
        (ascending: largest first), from one draft forward and one best-first search: each size keeps the first
        nodes of the largest one's search and the first tokens of its prompt-lookup branch (``branches``: the rows'
        branches at the longest size's length, when the caller has looked them up already)."""
        if self.tree_nodes is None:
            raise ValueError("only a DDTree drafter proposes trees of several sizes (set tree_nodes)")
        state = context.state
        sizes = [self._budgets[i] for i in which]
        nodes = max(n for n, _ in sizes)
        logits, ids = self.greedy_logits(self._slots(context, run))
        tokens, parents = self._greedy_rows(state.roots.tolist(), logits, nodes, ids)
        longest = max(L for _, L in sizes)
        if longest and branches is None:
            branches = self._branches(state, longest)[0]
        trees = []
        for n, L in sizes:
            tok, par = [t[:n + 1] for t in tokens], [p[:n + 1] for p in parents]
            if L:
                graft_rows(tok, par, [c[:L] for c in branches])
            trees.append(DraftTree.from_rows(tok, par, self.net.device))
        return trees

    def _chain(self, roots: torch.LongTensor, h: torch.Tensor, state, sampling=None) -> DraftTree:
        """The confident chain. The LM head (slots × vocabulary: on a CPU as costly as the block itself) runs on the
        first ``LAZY_SLOTS`` slots, and on all the others in one more call only if every active row trusts those,
        since the chain is cut at the first slot no active row trusts anyway
        (:func:`~mmspec.drafters.base.confident_length`): the same chain, fewer slots or fewer calls through the head
        (chunks of 4 all the way cost the VLM suite's long chains 1.5% and a single call cost HumanEval's short ones
        2%, side by side on this CPU)."""
        active = state.active.to(h.device)
        sampling = sampling or state.sampling  # (propose passes the greedy one for sampled_drafts=False)
        sample = sampling.do_sample
        k = h.shape[1]
        # the first LAZY_SLOTS slots, then (every one trusted) all the rest in one call
        cuts = [0, LAZY_SLOTS, k] if self.confidence is not None and k > LAZY_SLOTS else [0, k]
        drafts, qs = [], []
        for s, end in zip(cuts, cuts[1:]):
            if sample:
                logits = self.head(h[:, s: end])
                q = sampling.probs(logits)  # the target's warpers applied to each slot
                B, n, V = q.shape
                d = torch.multinomial(q.reshape(B * n, V), 1, generator=state.generator).view(B, n)
                qs.append(q)
                p = q.gather(2, d[..., None])[..., 0]
            else:
                logits, ids = self.greedy_logits(h[:, s: end])
                d = logits.argmax(-1)
                p = torch.softmax(logits, -1).gather(2, d[..., None])[..., 0]
                d = d if ids is None else ids[d]
            drafts.append(d)
            if self.confidence is None:
                break
            if end >= k:  # the block's last slot is kept whatever its confidence, as confident_length keeps it
                p = p[:, :-1]
            doubtful = (~trusted_slots(p, active, self.confidence)).nonzero()
            if doubtful.numel():  # the chain ends at this chunk's first untrusted slot
                cut = int(doubtful[0]) + 1
                drafts[-1] = d[:, :cut]
                if sample:
                    qs[-1] = qs[-1][:, :cut]
                break
        drafts = torch.cat(drafts, 1)
        if not sample:
            return DraftTree.chain(roots, drafts)
        return DraftTree.chain(roots, drafts, q=torch.cat(qs, 1))

    def _coupled(self, state, h: torch.Tensor) -> DraftTree:
        """Drafts under the Gumbel coupling (:mod:`mmspec.verifiers.coupling`): slot j scores each token by
        log q_j + g_j, g_j the noise of its position. The chain takes each slot's best; the DDTree searches the
        slots' scores best-first as its greedy tree does (under the log-softmax of the perturbed scores): siblings
        are the next best under this position's noise. Deterministic drafts, no q: the verifier keeps a draft iff
        it is the target's Gumbel-max token."""
        roots = state.roots.to(self.net.device)
        scores = coupled_view(state, h.shape[1], h.device).perturbed_slots(self.head(h))
        if self.tree_nodes is None:
            return DraftTree.chain(roots, scores.argmax(-1))
        return DraftTree.from_rows(*self._greedy_rows(roots.tolist(), scores, self.tree_nodes), roots.device)

    def _search(self, scores: list, nodes: int) -> list[tuple[list[int], list[int], list[int]]]:
        """DDTree's best-first search per row from ``scores[b][slot]``, the slot's top-K log-probabilities, best first:
        each row's (parents, slots, ranks) of its nodes, the root first (parent −1), at most ``nodes`` drafts, and
        with ``tree_cut`` none whose path probability falls below it (one kept whatever). On Python lists: a tensor
        write per node costs more than the heap itself."""
        out = []
        for s in scores:
            k, K = len(s), len(s[0])
            heap = [(-s[0][0], 0, 0, 0)]  # (-path score, slot, rank, parent node)
            par, slo, ran = [-1], [0], [0]
            n = 1
            while heap and n <= nodes and (n == 1 or -heap[0][0] >= self._cut):  # (tree_cut: a floor, one node kept)
                neg, slot, rank, parent = heapq.heappop(heap)
                par.append(parent), slo.append(slot), ran.append(rank)
                if rank + 1 < K and s[slot][rank + 1] > _IMPOSSIBLE:  # never a token q cannot draw
                    heapq.heappush(heap, (neg + s[slot][rank] - s[slot][rank + 1], slot, rank + 1, parent))
                if slot + 1 < k:
                    heapq.heappush(heap, (neg - s[slot + 1][0], slot + 1, 0, n))
                n += 1
            out.append((par, slo, ran))
        return out

    def _greedy_rows(self, roots: list[int], logits: torch.Tensor, nodes: int,
                     ids: torch.LongTensor | None = None) -> tuple[list[list[int]], list[list[int]]]:
        """The greedy DDTree of :meth:`_ddtree` as each row's (tokens, parents) lists, root first: what
        :meth:`propose_sized` cuts to its sizes and grafts its lookup branches onto before building one tensor tree
        per size (0.45 -> 0.23 ms for the search and the graft of a step, against tensors built and taken apart again,
        on the zoo's code drafter)."""
        top_v, top_i = torch.log_softmax(logits, -1).topk(min(self.top_k, logits.shape[-1]), dim=-1)
        if ids is not None:
            top_i = ids[top_i]
        best = top_i.tolist()
        tokens, parents = [], []
        for root, (par, slo, ran), b in zip(roots, self._search(top_v.tolist(), nodes), best):
            tokens.append([root] + [b[t][r] for t, r in zip(slo[1:], ran[1:])])
            parents.append(par)
        return tokens, parents

    def _ddtree(self, roots: torch.LongTensor, logits: torch.Tensor, sampling, generator, nodes: int,
                ids: torch.LongTensor | None = None) -> DraftTree:
        """DDTree's best-first tree under the node budget, per row (see the module docstring), from the slots' float
        logits [B, k, V] (greedy: or over the ids ``ids`` maps their columns to, :meth:`greedy_logits`).
        (:meth:`propose` sends every slot through the LM head in one call: on a CPU that costs
        less than the calls of a few slots each that a search reaching the slots level by level makes, 0.75
        against 1.1 ms a step on the zoo's code drafter.)"""
        if not sampling.do_sample:
            return DraftTree.from_rows(*self._greedy_rows(roots.tolist(), logits, nodes, ids), roots.device)
        if ids is not None:
            raise ValueError("a sampled DDTree needs each slot's q over the whole vocabulary (head), not greedy_logits")
        B = logits.shape[0]
        q = sampling.probs(logits)
        top_v = torch.log(q.clamp_min(1e-30)).topk(min(self.top_k, logits.shape[-1]), dim=-1).values  # [B, k, K]
        parents_l, slots_l, _ = zip(*self._search(top_v.cpu().tolist(), nodes))
        sizes = [len(row) for row in parents_l]
        N = max(sizes)  # (below the budget where tree_cut stopped every row's search early)
        for lists in (parents_l, slots_l):
            for row in lists:
                row.extend([0] * (N - len(row)))
        dev = roots.device
        parents, slots = (torch.tensor(x, dtype=torch.long, device=dev) for x in (parents_l, slots_l))
        valid = torch.arange(N, device=dev)[None, :] < torch.tensor(sizes, device=dev)[:, None]
        # sampling: the shape above (a function of q only); each node's children drawn from their slot's q without
        # replacement, in the order the verifier tries them
        tokens = roots[:, None].repeat(1, N)
        for b in range(B):
            kids: dict[int, list[int]] = {}
            for node in range(1, int(valid[b].sum())):
                kids.setdefault(int(parents[b, node]), []).append(node)
            for group in kids.values():
                slot = int(slots[b, group[0]])
                tokens[b, group] = torch.multinomial(q[b, slot], len(group), replacement=False, generator=generator)
        node_q = q.gather(1, slots[..., None].expand(B, N, q.shape[-1]))  # the root's entry is never read
        return DraftTree(tokens, parents.clamp(min=0).masked_fill(torch.arange(N, device=dev) == 0, -1), valid,
                         node_q, "without_replacement")


__all__ = ["DFlashDrafter", "DFlashRun", "check_target"]
