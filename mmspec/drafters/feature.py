"""Feature drafters in the decoding loop: plain EAGLE-style, MSD (decoupled visual inputs) and FLASH
(compressed visual tokens + semi-autoregressive head), on chains, static trees and EAGLE-2 dynamic trees;
FLASH also on static *lattice* trees over its independent slots.

Bookkeeping. ``features[b, t]`` holds the target's last-layer feature at token position t, known for every
token in the target's cache (the prefill, then each accepted path from the verifier's tree forward). The
drafter's own cache holds one entry per token position p it has fed (x_p with f_{p-1}); after every
verification it re-feeds the accepted tokens with the target's true features (as EAGLE does), so its
cache never keeps entries built from its own guesses. Inside a draft tree a node is fed with its parent's
*predicted* feature. Tree expansion is the autoregressive drafter's (chain / static / dynamic); only how
a node is fed differs.
"""

from __future__ import annotations

import torch

from ..cache import SpecKVCache
from ..state import DecodeState
from ..tree import DraftTree, TreeTemplate
from ..verifiers.acceptance import AcceptResult
from ..verifiers.tree_forward import chain_parents, prefill_parents
from .autoregressive import AutoregressiveDrafter
from .base import TargetContext
from .feature_model import FeatureDraftModel, drafter_sequence, scatter_image_embeds, signature_mismatch


class FeatureDrafter(AutoregressiveDrafter):
    needs_target_hidden = True

    def __init__(self, net: FeatureDraftModel, target, num_tokens: int | None = None,
                 tree: TreeTemplate | str | None = None, top_k: int = 4, num_nodes: int | None = None,
                 compress_to: int | None = None):
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
        if sar > 1 and isinstance(tree, TreeTemplate):
            self._lattice_layout(tree)

    def _lattice_layout(self, t: TreeTemplate) -> None:
        """A lattice template's fixed index tensors, built once: each non-root node's slot (its depth - 1)
        and sibling rank, the parents row, and per parent its children in draw order with their slot."""
        dev = self.net.fc.weight.device
        self._slot = torch.tensor([len(p) - 1 for p in t.rank_paths], device=dev)
        self._rank = torch.tensor([p[-1] for p in t.rank_paths], device=dev)
        self._lattice_parents = torch.tensor(t.parents, device=dev)
        kids: dict[int, list[int]] = {}
        for node, par in enumerate(t.parents[1:], start=1):
            kids.setdefault(par, []).append(node)
        self._sibling_groups = [(len(t.rank_paths[k[0] - 1]) - 1, torch.tensor(k, device=dev)) for k in kids.values()]

    # ------------------------------------------------------------------ lifecycle
    @torch.no_grad()
    def begin(self, state: DecodeState, max_length: int, context: TargetContext | None = None) -> None:
        if context is None:
            raise ValueError("a feature drafter needs the target's prefill features (run it through "
                             "SpeculativeGenerator)")
        dev = self.net.fc.weight.device
        B, P = state.batch_size, state.prompt_length
        H = self.net.config.hidden_size
        self.features = torch.zeros(B, max_length + 2, H, dtype=self.net.fc.weight.dtype, device=dev)
        self.features[:, :P] = context.hidden.to(self.features)
        tokens = context.input_ids.to(dev)
        valid = torch.arange(P, device=dev)[None, :] >= state.starts.to(dev)[:, None]
        image_mask = context.image_mask.to(dev) if context.image_mask is not None else None
        images = scatter_image_embeds(image_mask, context.image_embeds) if self.net.config.decoupled else None
        x, ok, _ = drafter_sequence(self.net, self.embed, tokens, valid, self.features[:, :P], image_mask,
                                    images, self.compress_to, align="left")
        S = x.shape[1]
        self.cache = SpecKVCache.for_model(self.net.body, B, S + (max_length - P) + 2 * self.max_nodes + 4)
        if ok.any():  # (one-token prompts leave nothing to pair: the cache starts empty)
            self.net.append(self.cache, x, prefill_parents(ok.long()), ok)
            self.cache.commit(torch.arange(S, device=dev).expand(B, S), torch.full((B,), S, device=dev))
            self.cache.starts = S - ok.sum(1)
        self.fed = torch.full((B,), P, dtype=torch.long, device=dev)  # token positions < fed are in the cache
        self.prompt_entries = S
        self._pending: list[torch.Tensor] = []

    def _catch_up(self, state: DecodeState) -> torch.Tensor:
        dev = self.net.fc.weight.device
        B = state.batch_size
        lengths = state.lengths.to(dev)
        need = lengths - self.fed
        m = int(need.max())
        j = torch.arange(m, device=dev)[None, :]
        valid = j < need[:, None]
        pos = (self.fed[:, None] + j).clamp(max=state.tokens.shape[1] - 1)
        tok = state.tokens.to(dev).gather(1, pos)
        feat = self.features.gather(1, (pos - 1).clamp(min=0)[..., None].expand(B, m, self.features.shape[-1]))
        x = self.net.fuse(self.embed(tok).to(feat.dtype), feat)
        out = self.net.append(self.cache, x, chain_parents(valid), valid)
        self.cache.commit(j.expand(B, m), need)
        self.fed = lengths.clone()
        h = out[torch.arange(B, device=dev), need - 1]
        self._root_feature = h
        self._pending = []
        heads = self.net.heads(h)  # [B, k, H]
        self._slot_logits = self._logits(heads)
        return self._slot_logits[:, 0]

    def _feed(self, tokens: torch.LongTensor, pending_parents: torch.LongTensor) -> torch.Tensor:
        B, F = tokens.shape
        H = self._root_feature.shape[-1]
        if self._pending:
            done = torch.cat(self._pending, dim=1)
            from_pending = done.gather(1, pending_parents.clamp(min=0)[..., None].expand(B, F, H))
        else:
            from_pending = self._root_feature[:, None].expand(B, F, H)
        parent_feature = torch.where((pending_parents < 0)[..., None], self._root_feature[:, None], from_pending)
        x = self.net.fuse(self.embed(tokens).to(parent_feature.dtype), parent_feature)
        valid = torch.ones_like(tokens, dtype=torch.bool)
        h = self.net.append(self.cache, x, pending_parents, valid)
        self._pending.append(h)
        return self._logits(h)

    def _logits(self, features: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(features).float()
        return logits if self.blocked is None else logits.masked_fill(self.blocked, float("-inf"))

    def _chain(self, roots, logits, sampling, generator) -> DraftTree:
        if self.net.config.sar_tokens == 1:
            return super()._chain(roots, logits, sampling, generator)
        slot_logits = self._slot_logits  # FLASH: all k drafts from one forward
        if sampling.do_sample:
            q = sampling.probs(slot_logits)
            B, k, V = q.shape
            drafts = torch.multinomial(q.reshape(B * k, V), 1, generator=generator).view(B, k)
            return DraftTree.chain(roots, drafts, q=q)
        return DraftTree.chain(roots, slot_logits.argmax(-1))

    def _tree(self, roots, root_logits, sampling, generator) -> DraftTree:
        if self.net.config.sar_tokens == 1:
            return super()._tree(roots, root_logits, sampling, generator)
        # FLASH lattice (beyond the paper): the slots are independent given the context, so a static tree
        # whose depth-d nodes take slot d's tokens covers several combinations in one target pass.
        parents = self._lattice_parents.expand(roots.shape[0], -1).contiguous()
        if sampling.do_sample:
            return self._sampled_lattice(roots, parents, sampling, generator)
        # greedy: slot d's ranked tokens; deterministic drafts (point-mass proposals) are lossless anyway
        ranked = self._slot_logits[:, : self.tree.depth].topk(int(self._rank.max()) + 1, dim=-1).indices
        tokens = torch.cat([roots[:, None], ranked[:, self._slot, self._rank]], dim=1)
        return DraftTree(tokens, parents)

    def _sampled_lattice(self, roots, parents, sampling, generator) -> DraftTree:
        """Under sampling, each node's children are drawn from its depth's slot distribution q_d without
        replacement (SpecInfer-style multi-draft): point-mass drafts of a high-entropy target (image codes) are
        rarely accepted, while drawn ones are accepted with probability ~ 1 - TV(p, q). The slots do not
        condition on the parent's token, so every child of a depth-d node is drawn from the same q_d; that q
        is what the verifier is given, which keeps it lossless."""
        B = roots.shape[0]
        q = sampling.probs(self._slot_logits[:, : self.tree.depth])  # [B, D, V]
        tokens = torch.empty(B, parents.shape[1], dtype=torch.long, device=roots.device)
        tokens[:, 0] = roots
        for slot, kids in self._sibling_groups:  # siblings in draw order = the order the verifier tries them
            tokens[:, kids] = torch.multinomial(q[:, slot], len(kids), replacement=False, generator=generator)
        node_q = torch.cat([q[:, :1], q[:, self._slot]], dim=1)  # the root's entry is never read
        return DraftTree(tokens, parents, q=node_q, sibling_rule="without_replacement")

    def observe(self, state: DecodeState, tree: DraftTree, result: AcceptResult,
                hidden: torch.Tensor | None = None) -> None:
        """Store the target's features along the accepted path; drop the draft-tree entries."""
        if hidden is None:
            raise ValueError("a feature drafter needs the verifier's hidden states")
        dev = self.features.device
        paths = result.paths.to(dev)
        B, L = paths.shape
        j = torch.arange(L, device=dev)[None, :]
        real = j < result.path_lengths.to(dev)[:, None]
        scratch = self.features.shape[1] - 1
        where = torch.where(real, self.fed[:, None] - 1 + j, scratch).clamp(max=scratch)
        H = self.features.shape[-1]
        got = hidden.to(self.features).gather(1, paths[..., None].expand(B, L, H))
        self.features.scatter_(1, where[..., None].expand(B, L, H), got)
        self.cache.discard_pending()
        self._pending = []


__all__ = ["FeatureDrafter"]
