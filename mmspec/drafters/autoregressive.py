"""A small causal LM as drafter: a chain of k tokens, a static tree, or an EAGLE-2 dynamic tree.

Each call keeps its own ``SpecKVCache`` (in its :class:`AutoregressiveRun`): each step the drafter first catches
up on the tokens it has not seen (the verifier's bonus token, plus accepted leaves it never fed), then expands
the tree level by level, feeding only the nodes that get children. After verification it commits the accepted
nodes it already holds K/V for and forgets the rest (rollback is just dropping pending nodes).

Tree modes:
* chain (``tree=None``): up to ``num_tokens`` drafts, greedy argmax, or a draw from the drafter's
  warped distribution when sampling (rule: min(1, p/q)). With ``adaptive=True`` the length follows
  HF's heuristic schedule (+2 after a fully accepted chain, -1 otherwise);
* static (``tree=TreeTemplate``): children are the drafter's top-ranked tokens; when sampling they
  are drawn *without replacement* (Gumbel top-k) so the verifier's multi-draft rule stays lossless;
* dynamic (``tree="dynamic"``, EAGLE-2, Li et al. 2024 Sec. 4): expand the ``top_k`` best frontier nodes
  by cumulative log-probability, ``top_k`` children each, then keep the ``num_nodes`` best nodes overall.
  Children are deterministic (point-mass proposals) under sampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cache import SpecKVCache
from ..compat import check_supported
from ..state import DraftContext
from ..tree import DraftTree, TreeTemplate, select_best_nodes, subtree
from ..verifiers.acceptance import AcceptResult
from ..verifiers.tree_forward import chain_parents, prefill_cache, text_config
from .base import Drafter, check_confidence, coupled_view, trusted_slots
from .lean_layer import drafter_logits


@dataclass
class AutoregressiveRun:
    """One call's drafting state: the drafter's cache (the tokens it has fed, committed, plus the current tree's
    fed nodes, pending), the chain length for the next step, and which pending entry each node of the last
    proposed tree was fed as (-1: never fed)."""

    cache: SpecKVCache | None
    draft_length: int
    node_to_pending: torch.LongTensor | None = None


class AutoregressiveDrafter(Drafter):
    """Drafts chains and trees from a model that maps fed tokens to next-token logits.

    Extension hooks: a drafter that expands the same trees from another network (e.g. the feature drafters) overrides

    * ``begin(context) -> AutoregressiveRun`` (or a subclass holding more per-call state);
    * ``feed_unseen(context, run) -> [B, V]``: feed the tokens the drafter has not seen (at least the root, see
      :meth:`~mmspec.state.DecodeState.unseen`), commit them to ``run.cache``, return the root's next-token logits;
    * ``feed_nodes(run, tokens, parents) -> [B, F, V]``: feed draft nodes as pending entries of ``run.cache``
      (``parents`` index earlier pending entries, -1 = the root), return their next-token logits;
    * ``observe``: keep what the verifier accepted in ``run.cache``, drop the rest.
    """

    catches_up_from_tokens = True  # it feeds itself what it has not seen (state.unseen) when it drafts
    drops_rows = True  # select_rows narrows the drafter's cache

    def __init__(self, model, num_tokens: int = 4, tree: TreeTemplate | str | None = None, top_k: int = 4,
                 num_nodes: int | None = None, adaptive: bool = True, confidence: float | None = None):
        """``confidence``: a chain stops early once the drafter's probability of its last draft is below it in every
        active row (HF's ``assistant_confidence_threshold``): ``num_tokens`` is then the longest chain, and the
        drafter decides per step how far it can see instead of following the accept-history schedule."""
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
        check_confidence(confidence)
        if confidence is not None and tree is not None:
            raise ValueError("confidence stops a chain early; trees are sized by num_nodes instead")
        if isinstance(tree, str) and tree != "dynamic":
            raise ValueError(f"tree must be None, a TreeTemplate or 'dynamic', got {tree!r}")
        check_supported(model, "drafter")  # run through the same cache and tree masks as the target
        self.model = model.eval()
        self.num_tokens = num_tokens
        self.tree = tree
        self.top_k = top_k
        self.num_nodes = num_nodes if num_nodes is not None else min(num_tokens * top_k, 60)
        self.confidence = confidence
        self.adaptive = adaptive and tree is None and confidence is None
        self.vocab_size = text_config(model).vocab_size

    @property
    def depth(self) -> int:
        return self.tree.depth if isinstance(self.tree, TreeTemplate) else self.num_tokens

    @property
    def max_nodes(self) -> int:
        if isinstance(self.tree, TreeTemplate):
            return self.tree.num_nodes
        if self.tree == "dynamic":
            return self.num_nodes + 1
        return self.num_tokens + 1

    # ------------------------------------------------------------------ protocol
    def begin(self, context: DraftContext) -> AutoregressiveRun:
        cache = prefill_cache(self.model, context.state, context.max_length + 2 * self.max_nodes + 2)
        return AutoregressiveRun(cache, self.num_tokens)

    @torch.no_grad()
    def propose(self, context: DraftContext, run: AutoregressiveRun) -> DraftTree:
        root_logits = self.feed_unseen(context, run)
        roots = context.state.roots.to(self.model.device)
        sampling = coupled_view(context.state, self.depth if self.tree is not None else run.draft_length,
                                roots.device)
        if self.tree is None:
            return self._chain(run, roots, root_logits, sampling, context.generator,
                               context.state.active.to(roots.device))
        return self._tree(run, roots, root_logits, sampling, context.generator)

    def observe(self, context: DraftContext, run: AutoregressiveRun, tree: DraftTree, result: AcceptResult,
                hidden: torch.Tensor | None = None) -> None:
        """Commit the accepted nodes the drafter already fed; the rest is re-fed next step."""
        dev = self.model.device
        active = context.state.active
        path = result.paths[:, 1:].to(dev)
        n_acc = result.num_accepted.to(dev)
        pending = run.node_to_pending.gather(1, path) if path.shape[1] else path
        j = torch.arange(path.shape[1], device=dev)[None, :]
        fed = (pending >= 0) & (j < n_acc[:, None])
        count = fed.long().cumprod(1).sum(1) if path.shape[1] else n_acc * 0
        count = count * active.to(dev)
        run.cache.commit(pending.clamp(min=0), count)
        if self.adaptive:
            # HF's "heuristic" schedule: lengthen after a fully accepted chain, shorten otherwise,
            # so a drafter that the target disagrees with stops wasting forwards.
            full = bool((n_acc[active.to(dev)] >= run.draft_length).any()) if active.any() else False
            run.draft_length = min(run.draft_length + 2, self.num_tokens) if full else max(run.draft_length - 1, 1)

    def select_rows(self, run: AutoregressiveRun, keep: torch.LongTensor) -> AutoregressiveRun:
        if run.cache is not None:
            run.cache.select_rows(keep)
        run.node_to_pending = None  # a step's own: the next proposal sets it
        return run

    # ------------------------------------------------------------------ extension hooks
    def feed_unseen(self, context: DraftContext, run: AutoregressiveRun) -> torch.Tensor:
        """Feed the tokens the drafter has not seen (at least the root); returns the root's next-token
        logits [B, V]."""
        unseen = context.state.unseen(run.cache.lengths)
        # the LM head runs from the earliest row's last token on (a finished row may have nothing unseen: its
        # index -1 reads a position it ignores, as before)
        first = max(int(unseen.counts.min()) - 1, 0)
        logits = drafter_logits(self.model, run.cache, unseen.tokens, chain_parents(unseen.valid), unseen.valid,
                                first=first)
        run.cache.commit_first(unseen.counts)
        rows = torch.arange(unseen.counts.shape[0], device=logits.device)
        return logits[rows, unseen.counts - 1 - first].float()

    def feed_nodes(self, run: AutoregressiveRun, tokens: torch.LongTensor,
                   pending_parents: torch.LongTensor) -> torch.Tensor:
        """Feed draft nodes ``tokens`` [B, F] hanging off pending entries ``pending_parents`` (-1 = the root);
        returns their next-token logits [B, F, V] (float32)."""
        valid = torch.ones_like(tokens, dtype=torch.bool)
        return drafter_logits(self.model, run.cache, tokens, pending_parents, valid).float()

    # ------------------------------------------------------------------ drafting
    def _chain(self, run: AutoregressiveRun, roots, logits, sampling, generator, active) -> DraftTree:
        B, dev = roots.shape[0], roots.device
        drafts, qs = [], []
        k = run.draft_length
        for d in range(k):
            if sampling.gumbel:  # the depth's noise: the token the target's own draw would be if q were p
                q, tok = None, sampling.perturbed(logits, d).argmax(-1)
            elif sampling.do_sample:
                q = sampling.probs(logits)
                tok = torch.multinomial(q, 1, generator=generator).squeeze(1)
                qs.append(q)
            else:
                q, tok = None, logits.argmax(-1)
            drafts.append(tok)
            if self.confidence is not None and d + 1 < k:
                p = (q if q is not None else logits.softmax(-1)).gather(1, tok[:, None])[:, 0]
                if not bool(trusted_slots(p[:, None], active, self.confidence)[0]):
                    k = d + 1  # no active row trusts its last draft: the next ones would be wasted forwards
                    break
            if d + 1 < k:
                parent = torch.full((B, 1), d - 1 if d > 0 else -1, dtype=torch.long, device=dev)
                logits = self.feed_nodes(run, tok[:, None], parent)[:, 0]
        run.node_to_pending = torch.cat(
            [torch.full((B, 1), -1, device=dev, dtype=torch.long),
             torch.arange(k, device=dev).expand(B, k).clone()], dim=1)
        run.node_to_pending[:, k] = -1  # the last draft was never fed
        q = torch.stack(qs, 1) if qs else None
        return DraftTree.chain(roots, torch.stack(drafts, 1), q=q)

    def _tree(self, run: AutoregressiveRun, roots, root_logits, sampling, generator) -> DraftTree:
        if self.tree == "dynamic":
            return self._dynamic_tree(run, roots, root_logits, sampling)
        return self._static_tree(run, roots, root_logits, sampling, generator)

    def _static_tree(self, run: AutoregressiveRun, roots, root_logits, sampling, generator) -> DraftTree:
        """A static template, level by level: each node's children are its top-ranked tokens (drawn without
        replacement, Gumbel top-k, when sampling); only the nodes that get children are fed."""
        B, dev = roots.shape[0], roots.device
        layout = self.tree.layout(dev)
        stochastic = sampling.do_sample and not sampling.gumbel
        tokens = torch.empty(B, self.tree.num_nodes, dtype=torch.long, device=dev)
        tokens[:, 0] = roots
        qs = [torch.zeros(B, 1, root_logits.shape[-1], device=dev)] if stochastic else None
        node_to_pending = torch.full((B, self.tree.num_nodes), -1, dtype=torch.long, device=dev)
        frontier_logits = root_logits[:, None]  # [B, F, V]: next-token logits of the level's frontier
        n_pending = 0
        for depth, level in enumerate(layout.levels):
            if sampling.gumbel:  # children: the best under this depth's noise (deterministic drafts)
                ranked = sampling.perturbed(frontier_logits, depth).topk(level.need_k, dim=-1).indices
            elif stochastic:
                q = sampling.probs(frontier_logits)  # [B, F, V]
                u = torch.rand(q.shape, generator=generator, device=dev).clamp_(1e-20, 1.0)
                ranked = (torch.log(q) - torch.log(-torch.log(u))).topk(level.need_k, dim=-1).indices
                qs.append(q[:, level.local])
            else:
                ranked = frontier_logits.topk(level.need_k, dim=-1).indices
            tokens[:, level.nodes] = ranked[:, level.local, level.ranks]
            if level.expand is None:
                break
            fed = level.expand
            feed_par = node_to_pending[:, layout.parents[fed]]  # -1 when the parent is the root
            frontier_logits = self.feed_nodes(run, tokens[:, fed], feed_par)
            node_to_pending[:, fed] = n_pending + torch.arange(fed.shape[0], device=dev)
            n_pending += fed.shape[0]
        run.node_to_pending = node_to_pending
        if stochastic:
            return layout.tree(tokens, torch.cat(qs, 1), "without_replacement")
        return layout.tree(tokens)

    def _dynamic_tree(self, run: AutoregressiveRun, roots, root_logits, sampling) -> DraftTree:
        """EAGLE-2: expand the ``top_k`` best frontier nodes by cumulative log-probability, ``top_k`` children
        each, then keep the ``num_nodes`` best nodes overall (deterministic children; under the Gumbel coupling
        scored by the log-softmax of log q + the depth's noise)."""
        B, dev = roots.shape[0], roots.device
        tokens = [roots[:, None]]
        parents = [torch.full((B, 1), -1, dtype=torch.long, device=dev)]
        scores = [torch.zeros(B, 1, device=dev)]
        node_to_pending = [torch.full((B, 1), -1, dtype=torch.long, device=dev)]
        # frontier: global node ids [B, F] whose next-token logits are [B, F, V]
        frontier = torch.zeros(B, 1, dtype=torch.long, device=dev)
        frontier_logits = root_logits[:, None]
        n_nodes, n_pending = 1, 0
        for d in range(1, self.depth + 1):
            scored = sampling.perturbed(frontier_logits, d - 1) if sampling.gumbel else frontier_logits
            logp = torch.log_softmax(scored, -1)
            F = frontier.shape[1]
            top_lp, top_tok = logp.topk(self.top_k, dim=-1)  # [B, F, k]
            par_scores = torch.cat(scores, 1).gather(1, frontier)
            child_tok = top_tok.reshape(B, -1)
            child_par = frontier[:, :, None].expand(B, F, self.top_k).reshape(B, -1)
            child_score = (par_scores[:, :, None] + top_lp).reshape(B, -1)
            n_new = child_tok.shape[1]
            new_ids = n_nodes + torch.arange(n_new, device=dev)
            tokens.append(child_tok)
            parents.append(child_par)
            scores.append(child_score)
            node_to_pending.append(torch.full((B, n_new), -1, dtype=torch.long, device=dev))
            n_nodes += n_new
            if d == self.depth:
                break
            # choose the nodes to expand next and feed them to the drafter
            pick = child_score.topk(min(self.top_k, n_new), dim=-1).indices  # [B, F']
            frontier = new_ids[pick]
            all_par = torch.cat(parents, 1)
            all_n2p = torch.cat(node_to_pending, 1)
            feed_tok = torch.cat(tokens, 1).gather(1, frontier)
            feed_par = all_n2p.gather(1, all_par.gather(1, frontier))  # -1 when the parent is the root
            frontier_logits = self.feed_nodes(run, feed_tok, feed_par)
            F2 = frontier.shape[1]
            all_n2p.scatter_(1, frontier, n_pending + torch.arange(F2, device=dev).expand(B, F2))
            node_to_pending = [all_n2p]
            n_pending += F2

        tok = torch.cat(tokens, 1)
        par = torch.cat(parents, 1)
        n2p = torch.cat(node_to_pending, 1)
        depth = torch.cat([torch.full_like(t, i) for i, t in enumerate(tokens)], 1)
        keep = select_best_nodes(torch.cat(scores, 1), par, depth, torch.ones_like(par, dtype=torch.bool),
                                 self.num_nodes + 1)
        tok, par, _, _ = subtree(tok, par, keep)
        run.node_to_pending = n2p.gather(1, keep)
        return DraftTree(tok, par)
