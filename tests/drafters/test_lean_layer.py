"""The drafters' lean forwards (a feature drafter's layer, a whole Llama drafter LM) compute what the stock
Llama modules compute."""

import pytest
import torch

from mmspec.cache import SpecKVCache
from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
from mmspec.drafters.lean_layer import drafter_logits, lean_lm_supported, lean_supported
from mmspec.tiny import tiny_model
from mmspec.verifiers.tree_forward import chain_parents, tree_forward
from tests.tiny_models import VOCAB, sharpen


def sharp_net(kv_heads: int, seed: int = 0) -> FeatureDraftModel:
    """A random drafter with std-0.2 weights (at the default init outputs are nearly flat) and non-unit norms."""
    torch.manual_seed(seed)
    net = FeatureDraftModel(FeatureDrafterConfig(hidden_size=32, vocab_size=50, num_attention_heads=4,
                                                 num_key_value_heads=kv_heads, intermediate_size=48,
                                                 max_position_embeddings=64)).eval()
    with torch.no_grad():
        for name, p in net.named_parameters():
            p.normal_(0.0, 0.2) if p.dim() > 1 else p.uniform_(0.5, 1.5)
    return net


def run(net: FeatureDraftModel, lean: bool):
    """A left-padded prompt, then a chain of two unseen tokens, then a tree level hanging off pending nodes:
    the features of every call and the cache's K/V of the committed prompt and the pending nodes."""
    net.lean = lean
    g = torch.Generator().manual_seed(1)
    B, P = 2, 7
    cache = SpecKVCache.for_model(net.body, B, 40)
    valid = torch.ones(B, P, dtype=torch.bool)
    valid[1, :3] = False  # row 1 is left padded
    x = torch.randn(B, P, 32, generator=g)
    parents = chain_parents(valid)
    parents[1, :4] = -1
    outs = [net.append(cache, x, parents, valid)[valid]]
    cache.commit_first(torch.full((B,), P))
    cache.starts = torch.tensor([0, 3])
    ragged = torch.tensor([[True, True], [True, False]])
    outs.append(net.append(cache, torch.randn(B, 2, 32, generator=g), chain_parents(ragged), ragged)[ragged])
    cache.commit_first(ragged.sum(1))
    outs.append(net.append(cache, torch.randn(B, 1, 32, generator=g), torch.full((B, 1), -1),
                           torch.ones(B, 1, dtype=torch.bool)))  # a single query that sees every key: no mask
    level = torch.tensor([[0, 0, -1], [0, -1, -1]])  # two children of the pending node, one more of the root
    outs.append(net.append(cache, torch.randn(B, 3, 32, generator=g), level, torch.ones(B, 3, dtype=torch.bool)))
    layer = cache.layers[0]
    return outs, layer.keys.clone(), layer.values.clone()


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_lean_append_matches_the_stock_modules(kv_heads):
    net = sharp_net(kv_heads)
    assert lean_supported(net.body.config)
    with torch.no_grad():
        lean, k_lean, v_lean = run(net, True)
        stock, k_stock, v_stock = run(net, False)
    for a, b in zip(lean, stock):
        assert a.abs().max() > 0.5  # sharpened: a wrong position or mask would show
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(k_lean, k_stock, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(v_lean, v_stock, rtol=1e-4, atol=1e-4)


def test_lean_refuses_what_it_does_not_compute():
    net = sharp_net(4)
    cfg = net.body.config
    cfg.attention_bias = True
    assert not lean_supported(cfg)
    cfg.attention_bias = False
    cfg.hidden_act = "gelu"
    assert not lean_supported(cfg)
    cfg.hidden_act = "silu"
    cfg.rope_parameters = {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}
    assert not lean_supported(cfg)


def _lm_calls(model, logits_fn):
    """A left-padded prompt, then a diffusion-style block (clean tokens causal, mask slots seeing every clean token
    and each other, positions by depth) with the LM head on the slots only: the logits of both calls and the
    cache's K/V of the second."""
    B, P, m, k = 2, 6, 2, 3
    cache = SpecKVCache.for_model(model, B, 32)
    valid = torch.ones(B, P, dtype=torch.bool)
    valid[1, :2] = False
    parents = chain_parents(valid)
    parents[1, :3] = -1
    ids = torch.randint(0, VOCAB, (B, P), generator=torch.Generator().manual_seed(2))
    outs = [logits_fn(model, cache, ids, parents, valid)[valid]]
    cache.commit_first(torch.full((B,), P))
    cache.starts = torch.tensor([0, 2])
    T = m + k
    block = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(3))
    col = torch.arange(T)
    vis = (col[None, :, None] >= col[None, None, :]).expand(B, T, T).clone()
    vis[:, m:, :] = True
    depth = col.expand(B, T).contiguous()
    outs.append(logits_fn(model, cache, block, (col - 1).expand(B, T).contiguous(), torch.ones(B, T, dtype=torch.bool),
                          vis, depth, m))
    return outs, cache.layers[0].keys.clone()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_drafter_logits_match_the_stock_model(arch):
    """Llama drafters run lean; what they compute (slot logits under a non-causal block, the cache written) is the
    stock model's to float rounding. Qwen2 (q/k/v biases) is not lean and runs its stock modules."""
    model = sharpen(tiny_model(arch, seed=0, vocab_size=VOCAB))
    assert lean_lm_supported(model) == (arch == "llama")

    def stock(model, cache, ids, parents, valid, ancestors=None, depth=None, first=0):
        out = tree_forward(model, cache, ids, parents, valid, ancestors=ancestors, depth=depth)
        return out.logits[:, first:]

    with torch.no_grad():
        got, k_got = _lm_calls(model, drafter_logits)
        want, k_want = _lm_calls(model, stock)
    assert got[1].shape == (2, 3, VOCAB)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(k_got, k_want, rtol=1e-4, atol=1e-4)


def test_drafter_logits_of_a_wrapper_that_returns_every_position():
    """A drafter whose forward ignores ``logits_to_keep`` (CFGModel's guided pass, some remote code) still gets the
    logits of positions ``first`` onward, not the first positions of its full output."""
    inner = sharpen(tiny_model("llama", seed=0, vocab_size=VOCAB))

    class EveryPosition(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner, self.config = inner, inner.config

        device, dtype = inner.device, inner.dtype

        def forward(self, logits_to_keep=None, **kwargs):
            return self.inner(**kwargs)

    with torch.no_grad():
        got, _ = _lm_calls(EveryPosition(), drafter_logits)
        want, _ = _lm_calls(inner, drafter_logits)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
