"""The KV manager: after commit (and rollback) the cache equals plain sequential decoding's cache."""

import pytest
import torch
from transformers import DynamicCache

from mmspec import DraftTree, SpecKVCache
from mmspec.hf_args import cache_kwargs
from mmspec.verifiers.tree_forward import hides_nothing, prefill_parents, tree_forward
from mmspec.tiny import tiny_model

from ..tiny_models import sharpen


def sequential_kv(model, tokens: torch.LongTensor):
    """K/V per layer for one row, built by feeding tokens one at a time through HF's DynamicCache."""
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        for t in tokens.tolist():
            model(input_ids=torch.tensor([[t]]), use_cache=True, **cache_kwargs(model, cache))
    return [(layer.keys[0], layer.values[0]) for layer in cache.layers]


@pytest.mark.parametrize("arch,own_buffers", [("llama", False), ("qwen2", False), ("mistral", False),
                                               ("llama", True)])
def test_commit_matches_sequential(arch, own_buffers):
    """``own_buffers``: layer 0's K/V replaced by copies after the prefill (as ``Cache.reorder_cache`` would do),
    so commits can no longer move every layer through the one shared buffer and must take the per-layer path."""
    model = tiny_model(arch, seed=0, vocab_size=64, dtype=torch.float64)
    B, P = 3, 6
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 64, (B, P), generator=g)
    mask = torch.ones_like(prompt)
    mask[1, :2] = 0
    mask[2, :4] = 0
    cache = SpecKVCache.for_model(model, B, 40)
    with torch.no_grad():
        tree_forward(model, cache, prompt, prefill_parents(mask), mask.bool())
    cache.commit(torch.arange(P).expand(B, P), torch.full((B,), P))
    cache.starts = (P - mask.sum(1))
    assert cache._all_layers_in_store()  # every layer's K/V in the one buffer: commits take the one-move path
    if own_buffers:
        first = cache.layers[0]
        first.keys, first.values = first.keys.clone(), first.values.clone()
        assert not cache._all_layers_in_store()

    # a tree: root -> {a, b}; a -> {c}; c -> {d}; b -> {e}
    tokens = torch.randint(3, 64, (B, 6), generator=g)
    parents = torch.tensor([[-1, 0, 0, 1, 3, 2]]).expand(B, 6)
    tree = DraftTree(tokens, parents)
    with torch.no_grad():
        tree_forward(model, cache, tree.tokens, tree.parents, tree.valid)
    # ragged acceptance: row0 keeps root,a,c,d ; row1 keeps root,b,e ; row2 keeps only the root
    paths = torch.tensor([[0, 1, 3, 4], [0, 2, 5, 0], [0, 0, 0, 0]])
    lengths = torch.tensor([4, 3, 1])
    cache.commit(paths, lengths)
    assert cache.lengths.tolist() == [P + 4, P + 3, P + 1]

    for b in range(B):
        kept = tokens[b, paths[b, : lengths[b]]]
        seq = torch.cat([prompt[b, mask[b].bool()], kept])
        ref = sequential_kv(model, seq)
        for layer, (k_ref, v_ref) in enumerate(ref):
            k, v = cache.committed_kv(layer, b)
            assert k.shape == k_ref.shape
            torch.testing.assert_close(k, k_ref, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(v, v_ref, rtol=1e-10, atol=1e-10)

    # a second step on top of the ragged state still matches
    step2 = torch.randint(3, 64, (B, 3), generator=g)
    with torch.no_grad():
        tree_forward(model, cache, step2, torch.tensor([[-1, 0, 1]]).expand(B, 3), torch.ones(B, 3, dtype=torch.bool))
    cache.commit(torch.tensor([[0, 1, 2]]).expand(B, 3), torch.tensor([3, 1, 2]))
    for b, n in enumerate([3, 1, 2]):
        kept = tokens[b, paths[b, : lengths[b]]]
        seq = torch.cat([prompt[b, mask[b].bool()], kept, step2[b, :n]])
        ref = sequential_kv(model, seq)
        k, v = cache.committed_kv(0, b)
        torch.testing.assert_close(k, ref[0][0], rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(v, ref[0][1], rtol=1e-10, atol=1e-10)


def test_rollback_then_decode_matches():
    model = tiny_model("llama", seed=1, vocab_size=64, dtype=torch.float64)
    seq = torch.randint(3, 64, (1, 10), generator=torch.Generator().manual_seed(1))
    cache = SpecKVCache.for_model(model, 1, 32)
    ones = torch.ones(1, 10, dtype=torch.long)
    with torch.no_grad():
        tree_forward(model, cache, seq, prefill_parents(ones), ones.bool())
    cache.commit(torch.arange(10)[None], torch.tensor([10]))
    cache.rollback(torch.tensor([6]))
    assert cache.lengths.tolist() == [6]
    new = torch.tensor([[7, 8]])
    with torch.no_grad():
        out = tree_forward(model, cache, new, torch.tensor([[-1, 0]]), torch.ones(1, 2, dtype=torch.bool))
    cache.commit(torch.tensor([[0, 1]]), torch.tensor([2]))
    full = torch.cat([seq[:, :6], new], 1)
    with torch.no_grad():
        ref_logits = model(full).logits[:, -2:]
    torch.testing.assert_close(out.logits, ref_logits, rtol=1e-9, atol=1e-9)
    ref = sequential_kv(model, full[0])
    k, _ = cache.committed_kv(1, 0)
    torch.testing.assert_close(k, ref[1][0], rtol=1e-10, atol=1e-10)


def test_tree_logits_equal_sequential_logits():
    """Every node of a tree gets the logits sequential decoding would give its root-to-node path."""
    model = tiny_model("qwen2", seed=2, vocab_size=64, dtype=torch.float64)
    prompt = torch.tensor([[4, 9, 13, 21]])
    cache = SpecKVCache.for_model(model, 1, 32)
    ones = torch.ones_like(prompt)
    with torch.no_grad():
        tree_forward(model, cache, prompt[:, :-1], prefill_parents(ones[:, :-1]), ones[:, :-1].bool())
    cache.commit(torch.arange(3)[None], torch.tensor([3]))
    tree = DraftTree(torch.tensor([[21, 30, 31, 40, 41, 50]]), torch.tensor([[-1, 0, 0, 1, 1, 3]]))
    with torch.no_grad():
        out = tree_forward(model, cache, tree.tokens, tree.parents, tree.valid)
    for node in range(6):
        path = tree.ancestor_mask[0, node].nonzero().flatten()
        seq = torch.cat([prompt[0, :-1], tree.tokens[0, path]])[None]
        with torch.no_grad():
            ref = model(seq).logits[0, -1]
        torch.testing.assert_close(out.logits[0, node], ref, rtol=1e-9, atol=1e-9)


def test_cache_overflow_is_a_value_error(tiny_pair):
    model, _ = tiny_pair
    cache = SpecKVCache.for_model(model, 1, 4)
    ones = torch.ones(1, 6, dtype=torch.long)
    with pytest.raises(ValueError, match="longer than the cache"):
        tree_forward(model, cache, torch.randint(3, 64, (1, 6)), prefill_parents(ones), ones.bool())


def test_hides_nothing_only_for_one_query_that_sees_every_key():
    """The mask is dropped (SDPA's unmasked path) only where None means the same thing: one query per row that
    sees every key. Several queries keep it (None would make SDPA causal), as do padding, stale slots, a
    {layer type: mask} dict and additive float masks."""
    full = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    assert hides_nothing(full)
    padded = full.clone()
    padded[1, 0, 0, :2] = False
    assert not hides_nothing(padded)
    assert not hides_nothing(torch.ones(1, 1, 3, 7, dtype=torch.bool))
    assert not hides_nothing({"full_attention": full})
    assert not hides_nothing(torch.zeros(1, 1, 1, 7))
    assert not hides_nothing(None)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_decode_steps_without_mask_equal_sequential(arch, monkeypatch):
    """Single-token steps through the unmasked path (one row, nothing hidden) and through the masked one (a
    left-padded row beside it) give the logits of plain sequential decoding; the fast path is really taken."""
    model = sharpen(tiny_model(arch, seed=3, vocab_size=64, num_key_value_heads=1, dtype=torch.float64), seed=3)
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kw):
        seen.append(attn_mask is None)
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    seq = torch.randint(3, 64, (1, 9), generator=torch.Generator().manual_seed(3))
    for B in (1, 2):
        prompt = seq[:, :5].expand(B, 5).clone()
        mask = torch.ones_like(prompt)
        mask[1:, :2] = 0  # the second row is left-padded: its steps keep the mask
        cache = SpecKVCache.for_model(model, B, 32)
        with torch.no_grad():
            tree_forward(model, cache, prompt, prefill_parents(mask), mask.bool())
        cache.commit(torch.arange(5).expand(B, 5), torch.full((B,), 5))
        cache.starts = 5 - mask.sum(1)
        for t in range(5, 9):
            seen.clear()
            with torch.no_grad():
                out = tree_forward(model, cache, seq[:, t:t + 1].expand(B, 1), torch.full((B, 1), -1),
                                   torch.ones(B, 1, dtype=torch.bool))
            cache.commit(torch.zeros(B, 1, dtype=torch.long), torch.ones(B, dtype=torch.long))
            assert seen and all(s == (B == 1) for s in seen)
            with torch.no_grad():
                ref = model(seq[:, : t + 1]).logits[0, -1]
                ref_padded = model(seq[:, 2: t + 1]).logits[0, -1]
            torch.testing.assert_close(out.logits[0, -1], ref, rtol=1e-9, atol=1e-9)
            if B == 2:
                torch.testing.assert_close(out.logits[1, -1], ref_padded, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("inference_mode", [False, True])
def test_prefix_mask_follows_in_place_changes(inference_mode):
    """The committed-prefix mask is reused between appends; an in-place change of ``starts`` or ``lengths``
    (not only a new tensor) must show in the next mask, also for inference tensors (no version counter)."""
    with torch.inference_mode(inference_mode):
        _check_prefix_mask_follows_in_place_changes()


def _check_prefix_mask_follows_in_place_changes():
    model = tiny_model("llama", seed=0, vocab_size=64)
    cache = SpecKVCache.for_model(model, 2, 16)
    ones = torch.ones(2, 5, dtype=torch.bool)
    with torch.no_grad():
        tree_forward(model, cache, torch.randint(3, 64, (2, 5)), prefill_parents(ones.long()), ones)
    cache.commit_first(torch.tensor([5, 5]))
    one = torch.full((2, 1), -1)
    valid = torch.ones(2, 1, dtype=torch.bool)
    _, mask = cache.prepare_append(one, valid)
    assert mask[:, 0, 0, :5].all()
    cache.discard_pending()
    cache.starts[1] = 2  # in place: two slots of row 1 become left padding
    _, mask = cache.prepare_append(one, valid)
    assert mask[0, 0, 0, :5].all() and mask[1, 0, 0, :5].tolist() == [False, False, True, True, True]
    cache.discard_pending()
    cache.lengths -= torch.tensor([0, 1])  # in place: row 1 forgets its last token
    _, mask = cache.prepare_append(one, valid)
    assert mask[1, 0, 0, :5].tolist() == [False, False, True, True, False]


@pytest.mark.parametrize("layout", ["left", "right"])
def test_prepare_chain_is_prepare_append_of_a_chain_without_the_mask(layout):
    """A drafter's context entries (a left-padded prompt, or each row's accepted tokens, right padded) get the
    positions and pending state prepare_append gives the same chain, and commit the same way."""
    from mmspec.verifiers.tree_forward import chain_parents

    valid = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]], dtype=torch.bool)
    if layout == "right":
        valid = valid.flip(1)
    parents = prefill_parents(valid.long()) if layout == "left" else chain_parents(valid)
    caches = []
    for chain in (False, True):
        cache = SpecKVCache(1, 3, 16)
        cache.lengths = torch.tensor([3, 5, 4])
        cache.starts = torch.tensor([1, 0, 2])
        pos = cache.prepare_chain(valid) if chain else cache.prepare_append(parents, valid)[0]
        caches.append((cache, pos))
    (a, pa), (b, pb) = caches
    assert torch.equal(pa, pb)
    assert torch.equal(a._pending_pos, b._pending_pos) and a._write_offset == b._write_offset
    # the valid nodes' parents and ancestors (padding nodes are never kept, whatever they hang off)
    assert torch.equal(a._pending_parents[valid], b._pending_parents[valid])
    assert torch.equal(a._pending_anc[valid] & valid[:, None, :].expand_as(a._pending_anc)[valid],
                       b._pending_anc[valid] & valid[:, None, :].expand_as(b._pending_anc)[valid])
    for cache in (a, b):
        cache.layers[0].update(torch.randn(3, 1, 5, 2, generator=torch.Generator().manual_seed(0)),
                               torch.randn(3, 1, 5, 2, generator=torch.Generator().manual_seed(1)))
        cache.commit_first(valid.sum(1))
    assert torch.equal(a.lengths, b.lengths)
    assert all(torch.equal(a.committed_kv(0, r)[0], b.committed_kv(0, r)[0]) for r in range(3))
    with pytest.raises(ValueError, match="sequence longer than the cache"):
        SpecKVCache(1, 3, 4).prepare_chain(valid)


def test_block_view_is_prepare_append_of_a_see_all_block_that_leaves_the_cache_as_it_was():
    """A DFlash block read against the committed prefix: block_view's positions and mask are prepare_append's for a
    block whose nodes see each other, its keys / values are the committed slots, and nothing is registered."""
    from mmspec.verifiers.tree_forward import chain_parents

    B, T = 3, 4
    caches = []
    for view in (False, True):
        cache = SpecKVCache(2, B, 16)
        g = torch.Generator().manual_seed(0)
        for layer in cache.layers:
            layer.update(torch.randn(B, 1, 6, 2, generator=g), torch.randn(B, 1, 6, 2, generator=g))
        cache.lengths = torch.tensor([4, 6, 5])
        cache.starts = torch.tensor([1, 0, 2])
        caches.append(cache)
    every = torch.ones(B, T, dtype=torch.bool)
    pos_a, mask_a = caches[0].prepare_append(chain_parents(every), every, torch.ones(B, T, T, dtype=torch.bool),
                                             torch.arange(T).expand(B, T))
    pos_b, mask_b, keys, values = caches[1].block_view(T)
    assert torch.equal(pos_a, pos_b) and torch.equal(mask_a, mask_b)
    assert caches[1].num_pending == 0 and torch.equal(caches[1].lengths, torch.tensor([4, 6, 5]))
    for i, layer in enumerate(caches[1].layers):
        assert torch.equal(keys[i], layer.keys[:, :, :6]) and torch.equal(values[i], layer.values[:, :, :6])
    lone = SpecKVCache(1, 1, 16)
    lone.layers[0].update(torch.randn(1, 1, 3, 2), torch.randn(1, 1, 3, 2))
    lone.lengths = torch.tensor([3])
    assert lone.block_view(T)[1] is None  # a lone unpadded row's block sees every entry: no mask
    with pytest.raises(ValueError, match="sequence longer than the cache"):
        lone.block_view(14)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_the_direct_forward_gives_the_stock_logits_and_hidden_states(arch):
    """The verifier runs a DIRECT class's modules in order, also when a drafter reads the target's features
    (``output_hidden_states``): logits and every hidden state bit for bit the stock forward's, tree mask and all."""
    model = sharpen(tiny_model(arch, seed=0, vocab_size=64), seed=0)
    g = torch.Generator().manual_seed(3)
    B, P = 2, 7
    prompt = torch.randint(3, 64, (B, P), generator=g)
    tree = torch.randint(3, 64, (B, 5), generator=g)
    parents = torch.tensor([[-1, 0, 0, 1, 2]]).expand(B, 5)
    outs = []
    for direct in (False, True):
        cache = SpecKVCache.for_model(model, B, 32)
        ones = torch.ones(B, P, dtype=torch.long)
        with torch.no_grad():
            tree_forward(model, cache, prompt, prefill_parents(ones), ones.bool())
            cache.commit_first(torch.full((B,), P))
            outs.append(tree_forward(model, cache, tree, parents, torch.ones(B, 5, dtype=torch.bool),
                                     output_hidden_states=True, direct=direct))
    stock, direct = outs
    assert torch.equal(stock.logits, direct.logits)
    assert len(stock.hidden_states) == len(direct.hidden_states) == model.config.num_hidden_layers + 1
    assert all(torch.equal(a, b) for a, b in zip(stock.hidden_states, direct.hidden_states))
