"""DFlash block drafting: greedy exactness (chain, confidence cut, DDTree; ragged batches), the drafter's context
cache against the training pattern, the DDTree rule, checkpoint layouts (z-lab, speculators) and refusals."""

import json

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters.dflash import ALONE_MATCH, DFlashDrafter
from mmspec.drafters.prompt_lookup import lookup_match
from mmspec.drafters.dflash_io import load_dflash, read_config, save_dflash
from mmspec.drafters.dflash_model import DFlashDraftModel, default_layer_ids, make_config, teacher_forced_logits
from mmspec.kernels.int8_linear import int8_available
from mmspec.tiny import tiny_model
from tests.tiny_models import VOCAB, sharpen

MASK = 2


@pytest.fixture(scope="module")
def target():
    return sharpen(tiny_model("llama", seed=0, vocab_size=VOCAB, num_layers=4), seed=0)


def make_net(target, seed=3, block=6, layers=2, ids=None):
    torch.manual_seed(seed)
    net = DFlashDraftModel(make_config(target.config, num_layers=layers, block_size=block, mask_token_id=MASK,
                                       target_layer_ids=ids))
    return sharpen(net, seed=seed)


class Recording(DFlashDrafter):
    """Keeps the last call's run (its context cache) for inspection."""

    def begin(self, context):
        self.last_run = super().begin(context)
        return self.last_run


def test_default_layer_ids_follow_the_paper():
    assert default_layer_ids(36) == [1, 9, 17, 25, 33]  # Qwen3-8B's DFlash drafter reads these
    assert default_layer_ids(15) == [1, 4, 6, 9, 12]
    assert default_layer_ids(4) == [0, 1, 2, 3] and default_layer_ids(2) == [0, 1]


@pytest.mark.parametrize("kw", [dict(num_tokens=5), dict(num_tokens=3, confidence=0.05), dict(tree_nodes=7, top_k=3),
                                dict(block=3), dict(block=4, tree_nodes=7, top_k=3),
                                dict(tree_nodes=7, top_k=3, tree_cut=0.2),
                                dict(tree_nodes=5, top_k=2, lookup=4, tree_cut=0.5)])
def test_dflash_is_exact_under_greedy_on_a_ragged_batch(target, ragged_batch, greedy_reference, kw):
    ids, mask = ragged_batch(3, 9, seed=4)
    ref = greedy_reference(target, ids, 20, attention_mask=mask)
    out = SpeculativeGenerator(target, DFlashDrafter(make_net(target), target, **kw)).generate(
        ids, attention_mask=mask, max_new_tokens=20, eos_token_id=[])
    assert torch.equal(out.sequences, ref)


def _full_features(target, net, row):
    out = target(row[None], output_hidden_states=True)
    return net.select_features(out.hidden_states)


def _check_cache_against_training_pattern(target, net, drafter, ids, mask, seqs, lag=None):
    """Every row's committed context K/V equals the layers' projections of the target's features over the final
    sequence (computed afresh, teacher-forced): entry t holds position t, for every verified position up to the last
    step's root (with ``lag``, up to that many positions before the end: steps that ran no drafter forward)."""
    run = drafter.last_run
    for b in range(ids.shape[0]):
        row = seqs[b, int((mask[b] == 0).sum()):]
        feats = _full_features(target, net, row)
        n = int(run.cache.lengths[b] - run.cache.starts[b])  # features of positions 0 .. n-1 are committed
        # every position before the last step's root (the loop observes no step after the last)
        assert row.numel() - (lag or net.block_size) <= n <= row.numel() - 1
        ctx = net.fuse(feats[:, :n])
        cos, sin = net.rope(ctx, torch.arange(n)[None])
        for i in range(len(net.layers)):
            k, v = net.context_kv(i, ctx, cos, sin)
            ck, cv = run.cache.committed_kv(i, b)
            assert torch.allclose(ck, k[0], atol=1e-4) and torch.allclose(cv, v[0], atol=1e-4)


def test_context_cache_holds_the_verified_features_when_blocks_are_rejected(target, ragged_batch):
    ids, mask = ragged_batch(2, 8, seed=5)
    net = make_net(target)
    drafter = Recording(net, target, num_tokens=5)
    with torch.no_grad():
        seqs = SpeculativeGenerator(target, drafter).generate(ids, attention_mask=mask, max_new_tokens=12,
                                                              eos_token_id=[]).sequences
        _check_cache_against_training_pattern(target, net, drafter, ids, mask, seqs)


def test_context_cache_and_blocks_when_every_draft_is_accepted(ragged_batch, greedy_reference):
    """A target whose logits are all zero always emits token 0; a drafter with its final norm zeroed drafts 0 in
    every slot, so every block is accepted whole: multi-token commits and feature appends are exercised, and the
    slot hidden states of decoding equal the training pattern's."""
    tgt = sharpen(tiny_model("llama", seed=1, vocab_size=VOCAB, num_layers=4), seed=1)
    with torch.no_grad():
        tgt.model.norm.weight.zero_()
    net = make_net(tgt, block=5)
    with torch.no_grad():
        net.norm.weight.zero_()
    ids, mask = ragged_batch(2, 7, seed=6)
    drafter = Recording(net, tgt, num_tokens=4)
    with torch.no_grad():
        out = SpeculativeGenerator(tgt, drafter).generate(ids, attention_mask=mask, max_new_tokens=14,
                                                          eos_token_id=[])
    assert torch.equal(out.sequences, greedy_reference(tgt, ids, 14, attention_mask=mask))
    assert out.stats.accept_lengths[0][1:3] == [5, 5]  # root + 4 accepted drafts, bonus included
    with torch.no_grad():
        _check_cache_against_training_pattern(tgt, net, drafter, ids, mask, out.sequences)


def test_graft_merges_a_chain_into_the_tree_as_a_trie():
    from mmspec.tree import DraftTree

    # row 0: root 9 -> 5 -> 6, root -> 7; row 1: root 9 -> 4 (and one padding node)
    tree = DraftTree(torch.tensor([[9, 5, 6, 7], [9, 4, 9, 9]]), torch.tensor([[-1, 0, 1, 0], [-1, 0, 0, 0]]),
                     torch.tensor([[True, True, True, True], [True, True, False, False]]))
    out = tree.grafted([[5, 6, 8], []])
    # as wide as its longest row: no padding column for the verify forward to run over
    assert out.tokens[0].tolist() == [9, 5, 6, 7, 8] and out.parents[0, 4] == 2  # 5, 6 shared: one new node
    assert out.valid[0].tolist() == [True] * 5
    assert out.valid[1].tolist() == [True, True] + [False] * 3 and out.tokens[1].tolist() == [9, 4, 9, 9, 9]
    out = tree.grafted([[], [3, 3]])
    assert out.tokens[1, :4].tolist() == [9, 4, 3, 3] and out.parents[1, :4].tolist() == [-1, 0, 0, 2]
    for tokens, parents in (([[9, 5]], [[-1, 1]]), ([[9, 5]], [[0, 0]]), ([[9, 5]], [[-1]])):
        with pytest.raises(ValueError, match="DraftTree rows"):
            DraftTree.from_rows(tokens, parents)


@pytest.mark.parametrize("kw", [dict(tree_nodes=5, top_k=3, lookup=4), dict(tree_nodes=3, top_k=2, lookup=6, block=4)])
def test_lookup_branch_stays_exact_and_is_drafted(target, ragged_batch, greedy_reference, kw):
    """lookup: a prompt-lookup continuation grafted onto the DDTree; prompts that repeat themselves get it drafted
    (more tokens per step than the tree alone) and the output stays the target's."""
    net = make_net(target)
    base = torch.randint(3, VOCAB, (2, 6), generator=torch.Generator().manual_seed(8))
    ids = torch.cat([base, base, base[:, :3]], 1)  # a repeating prompt: the lookup branch has something to offer
    ref = greedy_reference(target, ids, 16)
    plain = {k: v for k, v in kw.items() if k != "lookup"}
    got = {}
    for name, opts in (("with", kw), ("without", plain)):
        drafter = DFlashDrafter(net, target, **opts)
        out = SpeculativeGenerator(target, drafter).generate(ids, max_new_tokens=16, eos_token_id=[])
        assert torch.equal(out.sequences, ref)
        got[name] = out.stats.mean_accepted_tokens
    assert DFlashDrafter(net, target, **kw).max_nodes == kw["tree_nodes"] + 1 + kw["lookup"]
    assert got["with"] > got["without"]  # (1.10 vs 1.03 and 1.07 vs 1.00 tokens per step)
    with pytest.raises(ValueError, match="lookup grafts a prompt-lookup continuation onto a DDTree"):
        DFlashDrafter(net, target, lookup=4)


@pytest.mark.parametrize("rows", [1, 2])
def test_lookup_alone_skips_the_block_drafter_where_every_row_has_a_long_continuation(target, greedy_reference, rows,
                                                                                      monkeypatch):
    """lookup_alone: a greedy step where every row still generating has a lookup continuation of at least that many
    tokens verifies it alone (no drafter forward); other steps draft the DDTree with the branch, and the tokens the
    lone steps accept reach the drafter's context at its next forward. The output stays the target's; a row without
    such a continuation makes its batch's step draft the tree; sampling calls never take the lone branch. (One-token
    matches count here: a random target rarely repeats two tokens of its prompt; the gate has its own test.)"""
    monkeypatch.setattr("mmspec.drafters.dflash.ALONE_MATCH", 1)
    net = make_net(target)
    base = torch.randint(3, VOCAB, (2, 6), generator=torch.Generator().manual_seed(8))
    ids = torch.cat([base, base, base[:, :3]], 1)[:rows]  # repeating prompts: lookup has something to offer
    ref = greedy_reference(target, ids, 16)
    forwards, trees = [], []

    class Counting(Recording):
        def slot_hidden(self, context, run):
            forwards.append(1)
            return super().slot_hidden(context, run)

        def propose(self, context, run):
            before = len(forwards)
            tree = super().propose(context, run)
            trees.append(len(forwards) > before)  # whether this step ran the block drafter
            return tree

    drafter = Counting(net, target, tree_nodes=5, top_k=3, lookup=6, lookup_alone=2)
    out = SpeculativeGenerator(target, drafter).generate(ids, max_new_tokens=16, eos_token_id=[])
    assert torch.equal(out.sequences, ref)
    lone = [i for i, ran in enumerate(trees) if not ran]
    assert lone and len(forwards) == len(trees) - len(lone) >= 1
    assert min(lone) < max(i for i, ran in enumerate(trees) if ran)  # a forward came after a lone step
    # the drafter's context cache, after its last forward, holds every verified position before that step's root,
    # the lone steps' accepted tokens included: what the training pattern gives
    _check_cache_against_training_pattern(target, net, drafter, ids, torch.ones_like(ids), out.sequences,
                                          lag=16)
    forwards.clear(), trees.clear()  # a sampling call draws its tree from q every step: never the lone branch
    SpeculativeGenerator(target, drafter).generate(ids, max_new_tokens=16, eos_token_id=[], do_sample=True,
                                                   generator=torch.Generator().manual_seed(0))
    assert trees and all(trees)
    with pytest.raises(ValueError, match="lookup_alone is the shortest lookup continuation"):
        DFlashDrafter(net, target, tree_nodes=5, lookup_alone=2)
    with pytest.raises(ValueError, match="1 <= lookup_alone <= lookup"):
        DFlashDrafter(net, target, tree_nodes=5, lookup=3, lookup_alone=4)


def test_lookup_alone_waits_for_every_row(target):
    """A batch whose rows do not all have a long enough continuation drafts the tree; once the row without one has
    finished, the others' continuations decide."""
    net = make_net(target)
    drafter = DFlashDrafter(net, target, tree_nodes=5, top_k=3, lookup=6, lookup_alone=3)
    base = torch.randint(3, VOCAB, (6,), generator=torch.Generator().manual_seed(8))
    lone = torch.arange(3, 18)  # no token twice: nothing to look up
    state = type("S", (), {})()
    state.batch_size, state.active = 2, torch.tensor([True, True])
    state.roots = torch.tensor([5, 6])
    rows = {0: torch.cat([base, base, base[:3]]), 1: lone}
    state.row = lambda b: rows[b]
    assert drafter._lookup_alone(state) is None  # row 1 has no repeat
    state.active = torch.tensor([True, False])
    tree = drafter._lookup_alone(state)  # row 1 finished: row 0's continuation decides
    assert tree is not None and tree.tokens[0].tolist() == [5, *base[3:6].tolist(), *base[:3].tolist()]


def test_lookup_alone_needs_a_match_of_two_tokens(target):
    """A continuation after a one-token match joins the DDTree but is never verified alone (ALONE_MATCH): the same
    continuation after a two-token match is. lookup_match reports the match length that decides it."""
    net = make_net(target)
    drafter = DFlashDrafter(net, target, tree_nodes=5, top_k=3, lookup=6, lookup_alone=3)
    cont = [20, 21, 22, 23, 24]
    state = type("S", (), {})()
    state.batch_size, state.active, state.roots = 1, torch.tensor([True]), torch.tensor([5])
    rows = {0: torch.tensor([9, 7, 8, *cont, 30, 31, 8])}  # "8" matched alone: (7, 8) is not "31, 8"
    state.row = lambda b: rows[b]
    assert lookup_match(rows[0], 6, 3, 1)[1] == 1
    assert drafter._branches(state, 6) == ([cont + [30]], [1])
    assert drafter._lookup_alone(state) is None
    rows[0] = torch.tensor([9, 7, 8, *cont, 30, 7, 8])  # now "7, 8" matches: the same continuation, verified alone
    assert lookup_match(rows[0], 6, 3, 1)[1] == 2
    tree = drafter._lookup_alone(state)
    assert tree is not None and tree.tokens[0].tolist() == [5, *cont, 30]
    assert ALONE_MATCH == 2


def test_draft_vocab_drafts_only_its_ids_and_stays_exact(target, ragged_batch, greedy_reference):
    """draft_vocab: the slots' logits are the full head's on those ids and −inf elsewhere, so drafts and q stay over
    the whole vocabulary (the verifier is unchanged); decoding stays exact with ids the target emits left out."""
    net = make_net(target)
    ids = list(range(1, VOCAB, 3))
    full, sub = DFlashDrafter(net, target), DFlashDrafter(net, target, draft_vocab=ids)
    h = torch.randn(2, 3, target.config.hidden_size)
    a, b = full.head(h), sub.head(h)
    keep = torch.zeros(VOCAB, dtype=torch.bool)
    keep[ids] = True
    assert torch.allclose(a[..., keep], b[..., keep], atol=1e-5) and torch.isneginf(b[..., ~keep]).all()
    inp, mask = ragged_batch(3, 9, seed=4)
    ref = greedy_reference(target, inp, 16, attention_mask=mask)
    for kw in (dict(num_tokens=5), dict(tree_nodes=7, top_k=3)):
        drafter = DFlashDrafter(net, target, draft_vocab=ids, **kw)
        out = SpeculativeGenerator(target, drafter).generate(inp, attention_mask=mask, max_new_tokens=16,
                                                             eos_token_id=[])
        assert torch.equal(out.sequences, ref)
    for bad in ([], [0, 0], [VOCAB]):
        with pytest.raises(ValueError, match="draft_vocab must hold distinct token ids"):
            DFlashDrafter(net, target, draft_vocab=bad)


def test_greedy_drafts_over_the_draft_vocab_alone_are_the_full_rows_drafts(target):
    """Greedy drafting reads the logits of the drafted ids alone (``greedy_logits``): the same DDTree and the same
    confident chain as from the whole vocabulary's row with the other ids at −inf (what ``head`` gives), ids the
    target never emits left out of both; a sampled tree refuses such logits (its q must cover the vocabulary)."""
    from mmspec.drafters.dflash import _GREEDY
    from types import SimpleNamespace
    net = make_net(target)
    ids = list(range(1, VOCAB, 3))
    drafter = DFlashDrafter(net, target, draft_vocab=ids, tree_nodes=9, top_k=3, num_tokens=5)
    never = torch.zeros(VOCAB, dtype=torch.bool)
    never[ids[:4]] = True
    h = torch.randn(2, 5, target.config.hidden_size) * 3
    roots = torch.tensor([4, 7])
    for mask in (None, never):
        drafter.never = mask
        drafter.draft_never = None if mask is None else mask[drafter.draft_vocab]
        sub, col = drafter.greedy_logits(h)
        assert sub.shape[-1] == len(ids) and torch.equal(col, drafter.draft_vocab)
        full = drafter._ddtree(roots, drafter.head(h), _GREEDY, None, 9)
        fast = drafter._ddtree(roots, sub, _GREEDY, None, 9, col)
        assert torch.equal(full.tokens, fast.tokens) and torch.equal(full.parents, fast.parents)
        assert not any(t in ids[:4] for t in fast.tokens[:, 1:].flatten().tolist()) or mask is None
        state = SimpleNamespace(active=torch.tensor([True, True]), sampling=_GREEDY)
        chain = drafter._chain(roots, h, state)
        expect = drafter.head(h).argmax(-1)
        assert torch.equal(chain.tokens[:, 1:], expect[:, :chain.tokens.shape[1] - 1])
    with pytest.raises(ValueError, match="whole vocabulary"):
        drafter._ddtree(roots, sub, SimpleNamespace(do_sample=True), None, 9, col)


def test_a_drafters_own_draft_vocab_is_its_default(target, tmp_path):
    """A drafter built with ``draft_vocab`` drafts from those ids unless told otherwise (``range(V)``: the whole
    vocabulary, no gathered head), and both layouts keep them."""
    ids = list(range(2, VOCAB, 5))
    net = make_net(target)
    net.config.dflash_config["draft_vocab"] = make_config(target.config, num_layers=1, block_size=4,
                                                          mask_token_id=MASK, draft_vocab=ids[::-1]).dflash_config[
        "draft_vocab"]
    assert net.draft_vocab == ids  # sorted, distinct
    assert DFlashDrafter(net, target).draft_vocab.tolist() == ids
    assert DFlashDrafter(net, target, draft_vocab=[1, 4]).draft_vocab.tolist() == [1, 4]
    assert DFlashDrafter(net, target, draft_vocab=range(VOCAB)).draft_vocab is None
    assert DFlashDrafter(make_net(target), target).draft_vocab is None
    for layout in ("zlab", "speculators"):
        save_dflash(net, tmp_path / layout, layout=layout)
        assert load_dflash(tmp_path / layout).draft_vocab == ids, layout
    with pytest.raises(ValueError, match="draft_vocab must hold distinct token ids"):
        make_config(target.config, mask_token_id=MASK, draft_vocab=[VOCAB])


@pytest.mark.parametrize("block", [None, 4])
def test_decoding_blocks_equal_the_training_pattern(target, block):
    """The engine's slot logits for a block (from the drafter's cache) equal teacher_forced_logits at that anchor:
    the drafter decodes exactly what it was trained on, a shorter block (``block``) included."""
    net = make_net(target)
    slots = (block or net.block_size) - 1
    drafter = DFlashDrafter(net, target, block=block)
    ids = torch.randint(3, VOCAB, (1, 9), generator=torch.Generator().manual_seed(2))
    seen = []
    orig = drafter.slot_hidden

    def spy(context, run):
        h = orig(context, run)
        seen.append((context.state.row(0).clone(), drafter.lm_head(h[0]).float()))
        return h

    drafter.slot_hidden = spy
    with torch.no_grad():
        seq = SpeculativeGenerator(target, drafter).generate(ids, max_new_tokens=10, eos_token_id=[]).sequences[0]
        feats = _full_features(target, net, seq)
        embed, head = target.get_input_embeddings(), target.get_output_embeddings()
        for row, logits in seen:
            anchor = row.numel() - 1  # the root's position
            tf = teacher_forced_logits(net, embed, head, seq[None], feats, torch.tensor([[anchor]]), block=block)[0, 0]
            assert logits.shape[0] == tf.shape[0] == slots
            assert torch.allclose(logits, tf.float(), atol=1e-4), anchor
            if block is not None:  # a shorter block is not the whole block cut short: its slots see fewer masks
                whole = teacher_forced_logits(net, embed, head, seq[None], feats, torch.tensor([[anchor]]))[0, 0]
                assert not torch.allclose(logits, whole[:slots].float(), atol=1e-4)
    assert len(seen) >= 2


def test_ddtree_is_best_first_over_slot_top_k(target):
    """DDTree's rule on known slot log-probs: the budget's best-scoring prefixes, siblings in rank order."""
    drafter = DFlashDrafter(make_net(target), target, tree_nodes=4, top_k=2)
    # slot 1: tokens 10 (0.6), 11 (0.4); slot 2: 20 (0.9), 21 (0.1); slot 3: 30 (0.5), 31 (0.5)
    logits = torch.full((1, 3, VOCAB), -1e4)
    for slot, pairs in enumerate([(10, 0.6, 11, 0.4), (20, 0.9, 21, 0.1), (30, 0.5, 31, 0.5)]):
        logits[0, slot, pairs[0]], logits[0, slot, pairs[2]] = torch.tensor([pairs[1], pairs[3]]).log()
    from mmspec.verifiers.logits import SamplingConfig

    tree = drafter._ddtree(torch.tensor([5]), logits, SamplingConfig(False), None, drafter.tree_nodes)
    # scores: 10 (.6), 10-20 (.54), 11 (.4), 11-20 (.36), 10-20-30 (.27) ... -> the first four
    assert tree.tokens[0].tolist() == [5, 10, 20, 11, 20]
    assert tree.parents[0].tolist() == [-1, 0, 1, 0, 3]


def test_tree_cut_stops_the_search_at_a_path_probability_floor(target):
    """With ``tree_cut`` the best-first search stops at the first prefix less probable than the floor (one node
    kept whatever its probability), and the tree is no wider than its nodes; exact under greedy, sampling too."""
    from mmspec.verifiers.logits import SamplingConfig

    logits = torch.full((2, 3, VOCAB), -1e4)
    for slot, pairs in enumerate([(10, 0.6, 11, 0.4), (20, 0.9, 21, 0.1), (30, 0.5, 31, 0.5)]):
        logits[0, slot, pairs[0]], logits[0, slot, pairs[2]] = torch.tensor([pairs[1], pairs[3]]).log()
    logits[1, :, 40] = 0.0  # row 1: every slot spread over 16 tokens (1/16 each)
    logits[1, :, 41:56] = 0.0
    drafter = DFlashDrafter(make_net(target), target, tree_nodes=6, top_k=2, tree_cut=0.38)
    tree = drafter._ddtree(torch.tensor([5, 6]), logits, SamplingConfig(False), None, drafter.tree_nodes)
    # row 0 scores: 10 (.6), 10-20 (.54), 11 (.4), 11-20 (.36) < .38: three nodes; row 1: its one kept node
    assert tree.tokens.shape == (2, 4) and tree.valid.sum(1).tolist() == [4, 2]
    assert tree.tokens[0].tolist() == [5, 10, 20, 11] and tree.parents[0].tolist() == [-1, 0, 1, 0]
    assert tree.tokens[1, 1].item() in range(40, 56)
    full = DFlashDrafter(make_net(target), target, tree_nodes=6, top_k=2)._ddtree(
        torch.tensor([5, 6]), logits, SamplingConfig(False), None, 6)
    assert full.tokens.shape == (2, 7)


def test_lazy_head_gives_the_chain_of_all_slots(target):
    """The confident chain sends slots through the LM head a few at a time and stops at the first untrusted one: the
    same chain as the cut (confident_length) of every slot's logits, wherever the cut falls."""
    from types import SimpleNamespace

    from mmspec.drafters.base import confident_length
    from mmspec.verifiers.logits import SamplingConfig

    g = torch.Generator().manual_seed(0)
    cuts = set()
    for trial in range(60):
        confidence = [0.05, 0.2, 0.5][trial % 3]
        drafter = DFlashDrafter(make_net(target, block=11), target, confidence=confidence)
        B = 1 + trial % 3
        h = torch.randn(B, 10, target.config.hidden_size, generator=g) * (0.5 + trial % 4)
        active = torch.ones(B, dtype=torch.bool)
        active[0] = trial % 5 != 0 or B == 1
        state = SimpleNamespace(active=active, sampling=SamplingConfig(False), generator=None)
        roots = torch.full((B,), 5)
        tree = drafter._chain(roots, h, state)
        logits = drafter.lm_head(h).float()
        drafts = logits.argmax(-1)
        keep = confident_length(torch.softmax(logits, -1).gather(2, drafts[..., None])[..., 0], active, confidence)
        assert torch.equal(tree.tokens, torch.cat([roots[:, None], drafts[:, :keep]], 1))
        cuts.add(keep)
    assert len(cuts) >= 4  # cuts inside the first chunk, the second, and the whole block


def test_greedy_block_under_sampling_drafts_argmax_point_masses(target):
    """sampled_drafts=False: under sampling the block's drafts are its greedy ones, without proposals (the verifier
    takes them as point masses); the default draws each slot from its q and carries it."""
    ids = torch.randint(3, VOCAB, (1, 7), generator=torch.Generator().manual_seed(3))
    for kw in (dict(num_tokens=4), dict(tree_nodes=5, top_k=2)):
        for sampled in (True, False):
            drafter = DFlashDrafter(make_net(target), target, sampled_drafts=sampled, **kw)
            trees = []
            orig = drafter.propose
            drafter.propose = lambda context, run: trees.append(orig(context, run)) or trees[-1]
            SpeculativeGenerator(target, drafter).generate(ids, max_new_tokens=8, do_sample=True, eos_token_id=[],
                                                           generator=torch.Generator().manual_seed(0))
            assert trees and all((t.q is None) != sampled for t in trees), (kw, sampled)


def test_layouts_round_trip_and_draft_the_same(target, tmp_path):
    net = make_net(target)
    ids = torch.randint(3, VOCAB, (2, 8), generator=torch.Generator().manual_seed(9))

    def run(n):
        return SpeculativeGenerator(target, DFlashDrafter(n, target, num_tokens=5)).generate(
            ids, max_new_tokens=10, eos_token_id=[]).stats.accept_lengths

    expected = run(net)
    for layout in ("zlab", "speculators"):
        save_dflash(net, tmp_path / layout, layout=layout, verifier="tiny-llama")
        again = load_dflash(tmp_path / layout)
        assert again.target_layer_ids == net.target_layer_ids and again.block_size == net.block_size
        for k, v in net.state_dict().items():
            assert torch.equal(again.state_dict()[k], v), k
        assert run(again) == expected
    spec = json.loads((tmp_path / "speculators" / "config.json").read_text())
    assert spec["aux_hidden_state_layer_ids"] == [i + 1 for i in net.target_layer_ids]
    assert spec["speculators_config"]["verifier"]["name_or_path"] == "tiny-llama"


def test_documented_zlab_directory_drafts_like_the_model_it_describes(target, tmp_path):
    """A directory written from z-lab's documented fields alone (Qwen3 config + block_size + dflash_config, weights
    named layers.* / fc / hidden_norm / norm, no embeddings) loads to the model whose weights it holds."""
    from safetensors.torch import save_file

    net = make_net(target, block=4, ids=[0, 2])
    cfg = net.config
    doc = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": cfg.hidden_size,
           "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_hidden_layers,
           "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
           "head_dim": cfg.head_dim, "rms_norm_eps": cfg.rms_norm_eps, "vocab_size": cfg.vocab_size,
           "rope_theta": 10000.0, "max_position_embeddings": 512, "block_size": 4, "num_target_layers": 4,
           "dflash_config": {"mask_token_id": MASK, "target_layer_ids": [0, 2]}}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    weights = {k: v.clone() for k, v in net.state_dict().items() if "rotary" not in k}
    weights["model.embed_tokens.weight"] = torch.zeros(VOCAB, cfg.hidden_size)  # ignored: the target's are used
    save_file(weights, str(tmp_path / "model.safetensors"))
    loaded = load_dflash(tmp_path)
    assert read_config(tmp_path)[1] == "zlab"
    ids = torch.randint(3, VOCAB, (1, 7), generator=torch.Generator().manual_seed(1))
    a = SpeculativeGenerator(target, DFlashDrafter(net, target)).generate(ids, max_new_tokens=9, eos_token_id=[])
    b = SpeculativeGenerator(target, DFlashDrafter(loaded, target)).generate(ids, max_new_tokens=9, eos_token_id=[])
    assert a.stats.accept_lengths == b.stats.accept_lengths and torch.equal(a.sequences, b.sequences)


def test_refusals(target):
    net = make_net(target)
    other = tiny_model("llama", seed=0, vocab_size=VOCAB, num_layers=2)
    with pytest.raises(ValueError, match="target has 2 layers"):
        DFlashDrafter(net, other)
    wide = tiny_model("llama", seed=0, vocab_size=VOCAB, num_layers=4, hidden_size=32)
    with pytest.raises(ValueError, match="hidden size"):
        DFlashDrafter(net, wide)
    with pytest.raises(ValueError, match="num_tokens"):
        DFlashDrafter(net, target, num_tokens=6)
    with pytest.raises(ValueError, match="num_tokens"):
        DFlashDrafter(net, target, num_tokens=4, block=4)  # a block of 4 drafts 3 slots
    for block in (1, 7):
        with pytest.raises(ValueError, match="block must be in 2..6"):
            DFlashDrafter(net, target, block=block)
    for bad in (0.0, 1.0, True, "0.1"):
        with pytest.raises(ValueError, match="tree_cut"):
            DFlashDrafter(net, target, tree_nodes=4, tree_cut=bad)
    with pytest.raises(ValueError, match="tree_cut"):
        DFlashDrafter(net, target, tree_cut=0.1)  # a chain has no tree to cut
    with pytest.raises(ValueError, match="mask token"):
        make_config(target.config, mask_token_id=None)
    with pytest.raises(ValueError, match="target_layer_ids"):
        make_config(target.config, mask_token_id=MASK, target_layer_ids=[7])


@pytest.mark.skipif(not int8_available("cpu"), reason="no int8 weight-only kernel in this torch")
@pytest.mark.parametrize("kw", [dict(num_tokens=5), dict(tree_nodes=5, top_k=2, lookup=4, lookup_alone=2, tree_cut=0.2),
                                dict(tree_nodes=5, top_k=3, draft_vocab=list(range(0, VOCAB, 2)))])
def test_int8_weights_draft_close_to_float_and_stay_exact(target, ragged_batch, greedy_reference, kw):
    """weights="int8": the layers, fc and draft head as int8 weight-only products; the output is still plain
    decoding's, and the block's slot states and top tokens are close to the float drafter's."""
    ids, mask = ragged_batch(3, 9, seed=4)
    ref = greedy_reference(target, ids, 20, attention_mask=mask)
    net = make_net(target)
    int8 = DFlashDrafter(net, target, weights="int8", **kw)
    assert int8.weights == "int8" and int8.int8 is not None
    out = SpeculativeGenerator(target, int8).generate(ids, attention_mask=mask, max_new_tokens=20, eos_token_id=[])
    assert torch.equal(out.sequences, ref)
    with torch.no_grad():  # the block's slot states themselves
        x = torch.randn(1, 4, net.config.hidden_size)
        ctx = net.fuse(torch.randn(1, 5, net.fc.in_features))
        c, s_ = net.rope(ctx, torch.arange(9)[None])

        def kv(w8):
            cached = [net.context_kv(i, ctx, c[:, :5], s_[:, :5], w8) for i in range(len(net.layers))]
            return lambda i, k, v: (torch.cat([cached[i][0], k], 2), torch.cat([cached[i][1], v], 2))
        ref_h = net.block(x, c[:, 5:], s_[:, 5:], kv(None), None)
        h = net.block(x, c[:, 5:], s_[:, 5:], kv(int8.int8), None, int8=int8.int8)
    assert (h - ref_h).norm() / ref_h.norm() < 0.05
    flat = DFlashDrafter(net, target, **kw)
    same = (flat.greedy_logits(ref_h)[0].argmax(-1) == int8.greedy_logits(h)[0].argmax(-1)).float().mean()
    assert same >= 0.75  # (4 slots: at most one flipped)


@pytest.mark.skipif(not int8_available("cpu"), reason="no int8 weight-only kernel in this torch")
def test_weights_auto_quantises_only_drafters_above_its_size(target, monkeypatch):
    from mmspec.kernels import int8_linear
    net = make_net(target)
    assert DFlashDrafter(net, target, weights="auto").weights == "float"  # (a few KB: stays in the cache)
    monkeypatch.setattr(int8_linear, "AUTO_INT8_BYTES", 1)
    assert DFlashDrafter(net, target, weights="auto").weights == "int8"


def test_weights_auto_falls_back_to_float_where_int8_does_not_fit():
    odd = tiny_model("llama", seed=0, vocab_size=VOCAB, num_layers=2, hidden_size=36, num_heads=2)
    torch.manual_seed(0)
    net = DFlashDraftModel(make_config(odd.config, num_layers=1, block_size=4, mask_token_id=MASK))
    assert DFlashDrafter(net, odd, weights="auto").weights == "float"
    with pytest.raises(ValueError, match="weights='int8'.*multiples of 8"):
        DFlashDrafter(net, odd, weights="int8")
    with pytest.raises(ValueError, match="weights must be one of"):
        DFlashDrafter(net, odd, weights="fp8")


def test_registry_and_pipeline_route_a_block_drafter(target, ragged_batch, greedy_reference):
    """mmspec.pipeline takes a DFlashDraftModel as method dflash (a chain, or a DDTree with tree_nodes), exact; the
    wrong pairings are refused by name."""
    import mmspec
    from mmspec import registry as reg

    net = make_net(target)
    assert reg.drafter_kind(net) == "dflash" and "dflash" in reg.TEXT_METHODS
    assert type(reg.build_drafter("dflash", net, target=target)) is DFlashDrafter
    # the registry's drafters compute with DRAFT_WEIGHTS ("auto": int8 where the kernel runs and the matrices are
    # large enough to fall out of the cache; this one is far below that), the class in float
    assert reg.DRAFT_WEIGHTS == "auto" and reg.build_drafter("dflash", net, target=target).weights == "float"
    if int8_available("cpu"):
        assert reg.build_drafter("dflash", net, target=target, weights="int8").weights == "int8"
        assert mmspec.pipeline(target, drafter=net, weights="int8").drafter.weights == "int8"  # (an option too)
    with pytest.raises(ValueError, match="weights must be one of"):
        mmspec.pipeline(target, drafter=net, weights="fp8")
    with pytest.raises(ValueError, match="weights does not apply to method 'chain'"):
        mmspec.pipeline(target, drafter=target, method="chain", weights="int8")
    assert DFlashDrafter(net, target).weights == "float"
    assert reg.build_drafter("dflash", net, target=target, tree_nodes=5).max_nodes == 6
    ids, mask = ragged_batch(2, 8, seed=3)
    ref = greedy_reference(target, ids, 10, attention_mask=mask)
    for options in ({}, {"tree_nodes": 5}, {"block": 4}, {"draft_vocab": list(range(0, VOCAB, 2))}):
        pipe = mmspec.pipeline(target, drafter=net, **options)
        assert pipe.method == "dflash" and pipe.drafter.block == options.get("block", net.block_size)
        out = pipe.generate(input_ids=ids, attention_mask=mask, max_new_tokens=10, stop_at_eos=False)
        assert torch.equal(out.sequences, ref)
    with pytest.raises(ValueError, match="block"):
        mmspec.pipeline(target, drafter=target, method="chain", block=4)
    with pytest.raises(ValueError, match="needs a small causal LM drafter"):
        mmspec.pipeline(target, drafter=net, method="chain")
    with pytest.raises(ValueError, match="tree_nodes"):
        mmspec.pipeline(target, drafter=target, method="chain", tree_nodes=4)
    with pytest.raises(ValueError, match="block-diffusion drafter"):
        reg.build_drafter("dflash", target, target=target)
