"""A generate call's KV caches are freed when it returns, without waiting for the garbage collector.

A reference cycle (cache -> layer -> cache) kept every cache alive until the collector next ran: few Python
objects are made per decoding step, so that was rarely, and a zoo build sampling 512 pictures per call grew by the
cache's 5 GB per call until it ran out of memory."""

import gc
import weakref

import pytest
import torch

from mmspec import SpecKVCache, SpeculativeGenerator
from mmspec.drafters import AutoregressiveDrafter
from mmspec.hf_args import cache_kwargs
from mmspec.image_codes import TokenLayout, generate_codes
from mmspec.tiny import tiny_model


@pytest.fixture
def made_caches(monkeypatch):
    """Weak references to every SpecKVCache made while the test runs, with the collector off."""
    made = []
    original = SpecKVCache.__init__

    def recording_init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(weakref.ref(self))

    monkeypatch.setattr(SpecKVCache, "__init__", recording_init)
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield made
    finally:
        if was_enabled:
            gc.enable()


def test_a_cache_dies_with_its_last_reference(made_caches):
    model = tiny_model("llama", seed=0, vocab_size=64)
    cache = SpecKVCache.for_model(model, 2, 16)
    with torch.no_grad():
        model(input_ids=torch.ones(2, 3, dtype=torch.long), use_cache=True, **cache_kwargs(model, cache))
    assert cache.layers[0].keys is not None
    del cache
    assert [r() for r in made_caches] == [None]


def test_speculative_generate_frees_its_caches(made_caches):
    target = tiny_model("llama", seed=0, vocab_size=64)
    drafter = tiny_model("llama", seed=1, vocab_size=64, num_hidden_layers=1)
    gen = SpeculativeGenerator(target, AutoregressiveDrafter(drafter, num_tokens=3))
    gen.generate(torch.tensor([[5, 6, 7, 8]]), max_new_tokens=6, eos_token_id=[], pad_token_id=0)
    assert len(made_caches) >= 2  # the target's and the drafter's
    assert [r() for r in made_caches] == [None] * len(made_caches)


def test_image_sampling_frees_its_cache(made_caches):
    target = tiny_model("llama", seed=0, vocab_size=16 + 3)
    layout = TokenLayout(num_classes=2, codebook_size=16, grid=2)
    generate_codes(target, [0, 1], 2.0, 1.0, 0, torch.Generator().manual_seed(0), layout)
    assert len(made_caches) == 1 and made_caches[0]() is None
