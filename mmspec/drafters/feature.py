"""Feature drafters in the decoding loop: plain EAGLE-style, MSD (decoupled visual inputs) and FLASH
(compressed visual tokens + semi-autoregressive head), on chains, static trees and EAGLE-2 dynamic trees;
FLASH also on static *lattice* trees over its independent slots.

Bookkeeping. ``features[b, t]`` holds the target's last-layer feature at token position t, known for every
token in the target's cache (the prefill, then each accepted path from the verifier's tree forward). The
drafter's own cache holds one entry per token position p it has fed (x_p with f_{p-1}); after every
verification it re-feeds the accepted tokens with the target's true features (as EAGLE does), so its
cache never keeps entries built from its own guesses. Inside a draft tree a node is fed with its parent's
*predicted* feature. Tree expansion is the autoregressive drafter's (chain / static / dynamic); only how
a node is fed differs: this drafter overrides its ``feed_unseen`` / ``feed_nodes`` hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..cache import SpecKVCache
from ..state import DraftContext
from ..tree import DraftTree, TreeTemplate
from ..verifiers.acceptance import AcceptResult
from ..verifiers.tree_forward import chain_parents, prefill_parents
from ..vision import image_token_id
from .autoregressive import AutoregressiveDrafter, AutoregressiveRun
from .base import coupled_view, feature_buffer, store_path_features
from .lean_layer import Int8Drafter
from .feature_model import (FeatureDraftModel, drafter_sequence, scatter_image_embeds, sequence_length,
                            signature_mismatch)


@dataclass
class FeatureRun(AutoregressiveRun):
    """One call's feature-drafting state, besides the drafter's cache (see the module docstring)."""

    features: torch.Tensor | None = None  # [B, max_length + 2, H] the target's feature at each token position
    fed: torch.LongTensor | None = None  # [B] token positions below this are in the drafter's cache
    prompt_entries: int = 0  # cache entries the prompt became (fewer than its tokens under FLASH compression)
    root_feature: torch.Tensor | None = None  # [B, H] the drafter's predicted feature after the root
    slot_logits: torch.Tensor | None = None  # [B, sar_tokens, V] next-token logits of each slot after the root
    tree_features: list[torch.Tensor] = field(default_factory=list)  # predicted features of this step's fed nodes


class FeatureDrafter(AutoregressiveDrafter):
    """An EAGLE / MSD / FLASH network drafting from the target's features (``needs_target_hidden``). ``weights``:
    ``"float"``, ``"int8"`` (its layer, ``fc`` and the LM head it drafts through as int8 weight-only products,
    quantised once here, :mod:`mmspec.kernels.int8_linear`; a lean drafter on a CPU) or ``"auto"`` (int8 where that
    runs and the matrices hold ``int8_linear.AUTO_INT8_BYTES`` or more, else float)."""

    needs_target_hidden = True

    def __init__(self, net: FeatureDraftModel, target, num_tokens: int | None = None,
                 tree: TreeTemplate | str | None = None, top_k: int = 4, num_nodes: int | None = None,
                 compress_to: int | None = None, weights: str = "float"):
        problem = signature_mismatch(net.config.target, target)
        if problem:
            raise ValueError(f"this feature drafter was trained against another target: {problem}")
        sar = net.config.sar_tokens
        if sar > 1 and tree is not None and not (isinstance(tree, TreeTemplate) and tree.depth <= sar):
            raise ValueError(f"a semi-autoregressive (FLASH) drafter emits {sar} slots per forward: it drafts a "
                             f"chain or a static lattice tree (TreeTemplate of depth <= {sar}), not {tree!r}")
        if num_tokens is None:
            num_tokens = sar if sar > 1 else 4
        if sar > 1 and num_tokens != sar:
            raise ValueError(f"this FLASH drafter emits {sar} tokens per forward; num_tokens must be {sar}")
        if compress_to is not None and not net.config.compress_tokens:
            raise ValueError("compress_to given but this drafter has no compression queries")
        if compress_to is not None and (isinstance(compress_to, bool) or not isinstance(compress_to, int)
                                        or not 1 <= compress_to <= net.config.compress_tokens):
            raise ValueError(f"compress_to must be an int in 1..{net.config.compress_tokens} (the drafter's "
                             f"compression queries), got {compress_to!r}")
        super().__init__(net.body, num_tokens=num_tokens, tree=tree, top_k=top_k, num_nodes=num_nodes,
                         adaptive=False)
        self.net = net.eval()
        self.embed = target.get_input_embeddings()
        self.lm_head = target.get_output_embeddings()
        # a target that restricts its vocabulary (CFGModel: image codes only) restricts the drafts the same way
        allowed = getattr(target, "allowed", None)
        self.blocked = None if allowed is None else ~allowed.to(self.net.fc.weight.device)
        self.vocab_size = net.config.vocab_size
        self.compress_to = compress_to
        self.method = net.config.method
        self.image_token_id = image_token_id(target)
        if sar > 1 and isinstance(tree, TreeTemplate):
            self._lattice_layout(tree)
        head = self.lm_head
        self.int8 = Int8Drafter.build(weights, net.body.layers, net.fc, head.weight, getattr(head, "bias", None),
                                      net.fc.weight.device, "this feature drafter", lean=net.lean)

    @property
    def weights(self) -> str:
        """What the products compute with: "int8" or "float"."""
        return "float" if self.int8 is None else "int8"

    def _lattice_layout(self, t: TreeTemplate) -> None:
        """A lattice template's fixed index tensors, built once: each non-root node's slot (its depth - 1)
        and sibling rank, and per parent its children in draw order with their slot (parents and ancestor mask:
        the template's own layout)."""
        dev = self.net.fc.weight.device
        self._slot = torch.tensor([len(p) - 1 for p in t.rank_paths], device=dev)
        self._rank = torch.tensor([p[-1] for p in t.rank_paths], device=dev)
        kids: dict[int, list[int]] = {}
        for node, par in enumerate(t.parents[1:], start=1):
            kids.setdefault(par, []).append(node)
        self._sibling_groups = [(len(t.rank_paths[k[0] - 1]) - 1, torch.tensor(k, device=dev)) for k in kids.values()]

    def prompt_entries(self, prompt_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None) -> int:
        """How many entries these (left-padded) prompts take in the drafter's cache: fewer than their tokens
        under FLASH compression."""
        valid = torch.ones_like(prompt_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        image_mask = None if self.image_token_id is None else prompt_ids == self.image_token_id
        return sequence_length(self.net, valid, image_mask, self.compress_to)

    # ------------------------------------------------------------------ protocol
    def check_inputs(self, prefill_inputs: dict) -> None:
        if prefill_inputs.get("pixel_values_videos") is not None:
            raise ValueError("feature drafters read image embeddings only: videos (pixel_values_videos) are not "
                             "supported with them; use a text drafter or prompt lookup")

    @torch.no_grad()
    def begin(self, context: DraftContext) -> FeatureRun:
        """The call's feature buffer, holding the prompt's features. The drafter's own pass over the prompt waits
        for its first draft (:meth:`_prefill`): under the adaptive policy a call of plain steps only (a large
        batch) never pays for it, and the verifier's features of those steps are stored meanwhile (observe)."""
        if context.hidden is None:
            raise ValueError("a feature drafter needs the target's prefill features (run it through "
                             "SpeculativeGenerator)")
        state = context.state
        dev = self.net.fc.weight.device
        B, P = state.batch_size, state.prompt_length
        features = feature_buffer(context, self.net.config.hidden_size, self.net.fc.weight.dtype, dev)
        return FeatureRun(None, self.num_tokens, features=features,
                          fed=torch.full((B,), P, dtype=torch.long, device=dev))

    def _prefill(self, context: DraftContext, run: FeatureRun) -> None:
        """The drafter's cache over the prompt (each token with the target's feature before it; FLASH compresses
        the pictures' entries). Later tokens are fed from the stored features when it drafts (feed_unseen)."""
        state, max_length = context.state, context.max_length
        dev = self.net.fc.weight.device
        B, P = state.batch_size, state.prompt_length
        tokens = context.prompt_ids.to(dev)
        valid = torch.arange(P, device=dev)[None, :] >= state.starts.to(dev)[:, None]
        image_mask = context.image_mask
        image_mask = image_mask.to(dev) if image_mask is not None else None
        images = scatter_image_embeds(image_mask, context.image_embeds) if self.net.config.decoupled else None
        x, ok, _ = drafter_sequence(self.net, self.embed, tokens, valid, run.features[:, :P], image_mask,
                                    images, self.compress_to, align="left")
        S = x.shape[1]
        cache = SpecKVCache.for_model(self.net.body, B, S + (max_length - P) + 2 * self.max_nodes + 4)
        if ok.any():  # (one-token prompts leave nothing to pair: the cache starts empty)
            self.net.append(cache, x, prefill_parents(ok.long()), ok, self.int8)
            cache.commit_first(torch.full((B,), S, device=dev))
            cache.starts = S - ok.sum(1)
        run.cache, run.prompt_entries = cache, S

    @torch.no_grad()
    def propose(self, context: DraftContext, run: FeatureRun) -> DraftTree:
        if run.cache is None:
            self._prefill(context, run)
        if self.net.config.sar_tokens == 1:
            return super().propose(context, run)
        # FLASH: every slot's logits come from the one forward that feeds the unseen tokens
        self.feed_unseen(context, run)
        roots = context.state.roots.to(self.net.fc.weight.device)
        sampling = coupled_view(context.state, run.slot_logits.shape[1], roots.device)
        if self.tree is None:
            return self._flash_chain(run, roots, sampling, context.generator)
        return self._lattice(run, roots, sampling, context.generator)

    drops_rows = True  # select_rows narrows the feature buffer and the drafter's cache

    def select_rows(self, run: FeatureRun, keep: torch.LongTensor) -> FeatureRun:
        super().select_rows(run, keep)
        rows = keep.to(run.features.device)
        run.features, run.fed = run.features.index_select(0, rows), run.fed.index_select(0, rows)
        run.root_feature = run.slot_logits = None  # a step's own: the next proposal's feed sets them
        run.tree_features = []
        return run

    def observe(self, context: DraftContext, run: FeatureRun, tree: DraftTree, result: AcceptResult,
                hidden: torch.Tensor | None = None) -> None:
        """Store the target's features along the accepted path; drop the draft-tree entries."""
        if hidden is None:
            raise ValueError("a feature drafter needs the verifier's hidden states")
        store_path_features(run.features, context, result, hidden)
        if run.cache is not None:  # (None: nothing drafted yet, :meth:`_prefill`)
            run.cache.discard_pending()
        run.tree_features = []

    # ------------------------------------------------------------------ extension hooks
    def feed_unseen(self, context: DraftContext, run: FeatureRun) -> torch.Tensor:
        """Feed the unseen tokens, each with the target's feature at the position before it (EAGLE); keeps the
        predicted feature and slot logits after the root; returns the root's next-token logits [B, V]."""
        unseen = context.state.unseen(run.fed)
        B, m = unseen.tokens.shape
        feat = run.features.gather(1, (unseen.positions - 1).clamp(min=0)[..., None].expand(
            B, m, run.features.shape[-1]))
        x = self.net.fuse(self.embed(unseen.tokens).to(feat.dtype), feat, self.int8)
        out = self.net.append(run.cache, x, chain_parents(unseen.valid), unseen.valid, self.int8)
        run.cache.commit_first(unseen.counts)
        run.fed = run.fed + unseen.counts
        h = out[torch.arange(B, device=out.device), unseen.counts - 1]
        run.root_feature = h
        run.tree_features = []
        run.slot_logits = self._logits(self.net.heads(h))  # heads: [B, k, H]
        return run.slot_logits[:, 0]

    def feed_nodes(self, run: FeatureRun, tokens: torch.LongTensor, pending_parents: torch.LongTensor) -> torch.Tensor:
        """Feed draft nodes, each with its parent's *predicted* feature; returns their next-token logits."""
        B, F = tokens.shape
        root = run.root_feature
        H = root.shape[-1]
        if run.tree_features:
            done = torch.cat(run.tree_features, dim=1)
            from_pending = done.gather(1, pending_parents.clamp(min=0)[..., None].expand(B, F, H))
        else:
            from_pending = root[:, None].expand(B, F, H)
        parent_feature = torch.where((pending_parents < 0)[..., None], root[:, None], from_pending)
        x = self.net.fuse(self.embed(tokens).to(parent_feature.dtype), parent_feature, self.int8)
        valid = torch.ones_like(tokens, dtype=torch.bool)
        h = self.net.append(run.cache, x, pending_parents, valid, self.int8)
        run.tree_features.append(h)
        return self._logits(h)

    def _logits(self, features: torch.Tensor) -> torch.Tensor:
        logits = (self.lm_head(features) if self.int8 is None else self.int8.head(features)).float()
        return logits if self.blocked is None else logits.masked_fill(self.blocked, float("-inf"))

    def _flash_chain(self, run: FeatureRun, roots, sampling, generator) -> DraftTree:
        """FLASH: all k drafts from the one forward's slots."""
        if sampling.gumbel:  # each slot's best under its position's noise (deterministic drafts)
            return DraftTree.chain(roots, sampling.perturbed_slots(run.slot_logits).argmax(-1))
        if sampling.do_sample:
            q = sampling.probs(run.slot_logits)
            B, k, V = q.shape
            drafts = torch.multinomial(q.reshape(B * k, V), 1, generator=generator).view(B, k)
            return DraftTree.chain(roots, drafts, q=q)
        return DraftTree.chain(roots, run.slot_logits.argmax(-1))

    def _lattice(self, run: FeatureRun, roots, sampling, generator) -> DraftTree:
        """FLASH lattice (beyond the paper): the slots are independent given the context, so a static tree
        whose depth-d nodes take slot d's tokens covers several combinations in one target pass."""
        layout = self.tree.layout(roots.device)
        if sampling.gumbel:  # slot d's ranked tokens under its position's noise
            ranked = sampling.perturbed_slots(run.slot_logits[:, : self.tree.depth])
            ranked = ranked.topk(int(self._rank.max()) + 1, dim=-1).indices
            return layout.tree(torch.cat([roots[:, None], ranked[:, self._slot, self._rank]], dim=1))
        if sampling.do_sample:
            return self._sampled_lattice(run, roots, layout, sampling, generator)
        # greedy: slot d's ranked tokens; deterministic drafts (point-mass proposals) are lossless anyway
        ranked = run.slot_logits[:, : self.tree.depth].topk(int(self._rank.max()) + 1, dim=-1).indices
        return layout.tree(torch.cat([roots[:, None], ranked[:, self._slot, self._rank]], dim=1))

    def _sampled_lattice(self, run: FeatureRun, roots, layout, sampling, generator) -> DraftTree:
        """Under sampling, each node's children are drawn from its depth's slot distribution q_d without
        replacement (SpecInfer-style multi-draft): point-mass drafts of a high-entropy target (image codes) are
        rarely accepted, while drawn ones are accepted with probability ~ 1 - TV(p, q). The slots do not
        condition on the parent's token, so every child of a depth-d node is drawn from the same q_d; that q
        is what the verifier is given, which keeps it lossless."""
        B = roots.shape[0]
        q = sampling.probs(run.slot_logits[:, : self.tree.depth])  # [B, D, V]
        tokens = torch.empty(B, self.tree.num_nodes, dtype=torch.long, device=roots.device)
        tokens[:, 0] = roots
        for slot, kids in self._sibling_groups:  # siblings in draw order = the order the verifier tries them
            tokens[:, kids] = torch.multinomial(q[:, slot], len(kids), replacement=False, generator=generator)
        node_q = torch.cat([q[:, :1], q[:, self._slot]], dim=1)  # the root's entry is never read
        return layout.tree(tokens, node_q, "without_replacement")


__all__ = ["FeatureDrafter"]
