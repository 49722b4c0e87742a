"""Models mixing sliding-window and full-attention layers (Gemma2, Gemma3 text, Qwen3 / Qwen2 with layer_types)
are greedy-exact: the sliding layers get a mask cut to the window, the full ones the whole prefix.

Tiny random models with sharpened weights (std 0.2), windows of 5 positions, prompts longer than the window,
a left-padded batch, chains and trees; compared with the model's own ``generate``.
"""

import pytest
import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from mmspec import SpeculativeGenerator, SpecKVCache, TreeTemplate
from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.dflash_model import DFlashDraftModel, make_config
from mmspec.layer_masks import FULL, SLIDING, AttentionLayout, attention_layout
from tests.tiny_models import sharpen

V, WINDOW = 96, 5
COMMON = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# three rows of 13, 9 and 4 real tokens (left padding): two prompts longer than the window, one shorter
BATCH = dict(batch=3, length=13, seed=0, vocab=V, pads=(0, 4, 9))


def build(family, layers=4, seed=0):
    torch.manual_seed(seed)
    if family == "gemma2":  # sliding/full alternating, attention and final logit soft-capping, scaled embeddings
        model = Gemma2ForCausalLM(Gemma2Config(num_hidden_layers=layers, sliding_window=WINDOW, head_dim=8, **COMMON))
    elif family == "gemma3":  # sliding layers with their own rotary base
        model = Gemma3ForCausalLM(Gemma3TextConfig(num_hidden_layers=layers, sliding_window=WINDOW, head_dim=8,
                                                   sliding_window_pattern=2, **COMMON))
    elif family == "qwen3":  # the last layers slide (max_window_layers)
        model = Qwen3ForCausalLM(Qwen3Config(num_hidden_layers=layers, sliding_window=WINDOW, use_sliding_window=True,
                                             max_window_layers=layers // 2, head_dim=8, **COMMON))
    else:  # qwen2: also one of the decoder classes drafters run layer by layer (direct_logits)
        model = Qwen2ForCausalLM(Qwen2Config(num_hidden_layers=layers, sliding_window=WINDOW, use_sliding_window=True,
                                             max_window_layers=layers // 2, **COMMON))
    assert {FULL, SLIDING} <= set(model.config.layer_types)
    return sharpen(model, seed)


def dflash_net(target, seed=5):
    torch.manual_seed(seed)
    return sharpen(DFlashDraftModel(make_config(target.config, num_layers=1, block_size=5, mask_token_id=3)), seed)


@pytest.mark.parametrize("family", ["gemma2", "gemma3", "qwen3", "qwen2"])
def test_hybrid_models_are_greedy_exact(family, ragged_batch, greedy_reference):
    target, weak = build(family), build(family, layers=2, seed=1)
    ids, mask = ragged_batch(**BATCH)
    ref = greedy_reference(target, ids, 20, attention_mask=mask)
    drafters = {
        "chain-self": AutoregressiveDrafter(target, num_tokens=4),  # long accepted runs across the window
        "tree-weak": AutoregressiveDrafter(weak, tree=TreeTemplate.full((2, 2, 1))),
        "dynamic-self": AutoregressiveDrafter(target, num_tokens=4, tree="dynamic", top_k=3, num_nodes=10),
        "prompt-lookup": PromptLookupDrafter(num_tokens=5, max_ngram=2),
        # the block drafter reads the hybrid target's features (verify forward's hidden states) and keeps its own
        # full-attention context cache
        "dflash-chain": DFlashDrafter(dflash_net(target), target, num_tokens=4),
        "dflash-ddtree": DFlashDrafter(dflash_net(target), target, tree_nodes=6, top_k=2),
    }
    for name, drafter in drafters.items():
        out = SpeculativeGenerator(target, drafter).generate(ids, attention_mask=mask, max_new_tokens=20,
                                                             eos_token_id=[], pad_token_id=0)
        assert torch.equal(out.sequences, ref), name
        if name == "chain-self":
            assert out.stats.mean_accepted_tokens > 2  # drafts really went through the tree verifier


@pytest.mark.parametrize("wrong", ["no window", "window everywhere"])
def test_the_per_layer_masks_matter(monkeypatch, ragged_batch, greedy_reference, wrong):
    """Control: with one mask for every layer (the window left out, or applied to the full layers too) the same
    run diverges from generate, so the exactness above is owed to the per-layer masks."""
    target = build("qwen3")
    ids, mask = ragged_batch(**BATCH)
    ref = greedy_reference(target, ids, 20, attention_mask=mask)
    uniform = AttentionLayout(None) if wrong == "no window" else AttentionLayout(WINDOW)
    monkeypatch.setattr("mmspec.cache.attention_layout", lambda cfg: uniform)
    out = SpeculativeGenerator(target, PromptLookupDrafter(num_tokens=3)).generate(
        ids, attention_mask=mask, max_new_tokens=20, eos_token_id=[], pad_token_id=0)
    assert not torch.equal(out.sequences, ref)


def test_cache_builds_one_mask_per_layer_type():
    """A mixed cache returns {layer type: mask}: the full mask sees the whole committed prefix and the ancestors,
    the sliding one only keys within WINDOW positions of each node; a uniform sliding model gets one cut mask."""
    cache = SpecKVCache(4, 1, 32, sliding_window=WINDOW, layer_types=[SLIDING, FULL, SLIDING, FULL])
    cache.prepare_append(torch.tensor([[-1] + list(range(9))]), torch.ones(1, 10, dtype=torch.bool))
    cache.commit(torch.arange(10)[None], torch.tensor([10]))
    positions, masks = cache.prepare_append(torch.tensor([[-1, 0, 0]]), torch.ones(1, 3, dtype=torch.bool))
    assert set(masks) == {FULL, SLIDING}
    full, sliding = masks[FULL][0, 0], masks[SLIDING][0, 0]
    assert positions.tolist() == [[10, 11, 11]]
    assert full[:, :10].all() and full[:, 10:].tolist() == [[True, False, False], [True, True, False],
                                                            [True, False, True]]
    # node at position 10 sees positions 6..10; its children at 11 see 7..11 (two siblings never see each other)
    assert sliding[0].nonzero().flatten().tolist() == [6, 7, 8, 9, 10]
    assert sliding[1].nonzero().flatten().tolist() == [7, 8, 9, 10, 11]
    assert sliding[2].nonzero().flatten().tolist() == [7, 8, 9, 10, 12]
    uniform = SpecKVCache(2, 1, 32, sliding_window=WINDOW)
    _, mask = uniform.prepare_append(torch.tensor([[-1] + list(range(7))]), torch.ones(1, 8, dtype=torch.bool))
    assert isinstance(mask, torch.Tensor) and mask[0, 0, 7].nonzero().flatten().tolist() == [3, 4, 5, 6, 7]


def test_layout_read_from_configs():
    """Mixed layer types give a per-layer layout; all sliding a single window; use_sliding_window=False none."""
    assert attention_layout(build("gemma2").config).layer_types == ("sliding_attention", "full_attention") * 2
    cfg = Qwen2Config(num_hidden_layers=2, sliding_window=WINDOW, use_sliding_window=True, max_window_layers=0)
    assert attention_layout(cfg).window == WINDOW and attention_layout(cfg).layer_types is None
    cfg.use_sliding_window = False
    assert attention_layout(cfg).window is None
    with pytest.raises(ValueError, match="layer_types names 3 layers"):
        SpecKVCache(2, 1, 8, sliding_window=WINDOW, layer_types=[SLIDING, FULL, FULL])
