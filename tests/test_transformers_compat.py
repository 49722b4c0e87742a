"""mmspec on the installed transformers: its own forwards pass the KV cache under the name that version prefers
(:mod:`mmspec.hf_args`), so no cache-name deprecation is raised or logged, and greedy output still equals HF's
``generate``. Run on the newest and the lowest supported transformers by ``.ci/compat``."""

import logging
import re
import warnings
from contextlib import contextmanager

import pytest
import torch
from torch import nn
from transformers import DynamicCache

from mmspec import SpeculativeGenerator, TreeTemplate
from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter
from mmspec.drafters.feature import FeatureDrafter
from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
from mmspec.guidance import CFGModel
from mmspec.hf_args import (CACHE_ARG, OUTPUT_CACHE_FIELD, cache_arg, cache_kwargs, either_cache, output_cache)
from mmspec.janus import JanusImageGenerator, JanusImageLM
from mmspec.tiny import JANUS_BOI, JANUS_BOS, tiny_janus, tiny_model
from tests.tiny_models import text_pair
from tests.vlm_families import llava_batch, qwen_batch, speculative, tiny_llava, tiny_qwen_vl

# what transformers says when the cache is passed or read under an old name (a FutureWarning from
# @deprecate_kwarg, or a logged line from ModelOutput's backward-compatible fields)
CACHE_NAME = re.compile(r"`(past_key_values|cache_params)`")


@contextmanager
def cache_name_deprecations():
    """Collect every cache-name deprecation raised as a warning or logged by transformers inside the block."""
    found = []

    class Collect(logging.Handler):
        def emit(self, record):
            if CACHE_NAME.search(record.getMessage()):
                found.append(f"logged: {record.getMessage()}")

    logger, handler = logging.getLogger("transformers"), Collect(logging.WARNING)
    once = getattr(logging.Logger.warning_once, "cache_clear", None)  # transformers logs these once per process
    if once is not None:
        once()
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield found
    finally:
        logger.removeHandler(handler)
    found += [f"{w.category.__name__}: {w.message}" for w in caught
              if issubclass(w.category, (FutureWarning, DeprecationWarning)) and CACHE_NAME.search(str(w.message))]


def test_names_match_the_installed_transformers():
    from transformers import LlamaForCausalLM, LlamaModel
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer
    import inspect

    for fn in (LlamaForCausalLM.forward, LlamaModel.forward, LlamaDecoderLayer.forward):
        assert CACHE_ARG in inspect.signature(fn).parameters
    from transformers.modeling_outputs import BaseModelOutputWithPast

    assert OUTPUT_CACHE_FIELD in BaseModelOutputWithPast.__dataclass_fields__
    target = tiny_model("llama", vocab_size=64)
    assert cache_arg(target) == cache_arg(target.model) == cache_arg(target.model.layers[0]) == CACHE_ARG


def test_the_check_sees_the_legacy_name():
    """The detector is not blind: where the installed version renamed the cache, the old name is reported."""
    if CACHE_ARG == "past_key_values":
        pytest.skip("this transformers still calls the cache past_key_values")
    model = tiny_model("llama", vocab_size=64)
    with cache_name_deprecations() as found, torch.no_grad():
        model(input_ids=torch.tensor([[5, 6]]), past_key_values=DynamicCache(config=model.config), use_cache=True)
    assert found


def test_foreign_forwards_get_the_name_they_declare():
    class Legacy(nn.Module):  # remote code written for an older transformers
        def forward(self, input_ids=None, past_key_values=None, **kwargs):
            return past_key_values

    class New(nn.Module):
        def forward(self, input_ids=None, cache=None, **kwargs):
            return cache

    class Open(nn.Module):
        def forward(self, *args, **kwargs):
            return kwargs

    assert cache_arg(Legacy()) == "past_key_values" and cache_arg(New()) == "cache"
    assert cache_arg(Open()) == CACHE_ARG
    assert Legacy()(**cache_kwargs(Legacy(), "c")) == "c" and New()(**cache_kwargs(New(), "c")) == "c"
    assert either_cache(past_key_values="c") == either_cache(cache="c") == "c"
    with pytest.raises(ValueError, match="both"):
        either_cache("a", "b")


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_text_route_is_quiet_and_exact(arch, ragged_batch, greedy_reference):
    target, weak = text_pair(arch)
    ids, mask = ragged_batch(2, 9, seed=4)
    ref = greedy_reference(target, ids, 12, attention_mask=mask)
    torch.manual_seed(0)
    stock = FeatureDraftModel(FeatureDrafterConfig.for_target(target, "eagle"))
    stock.lean = False  # the stock decoder layer, called with the cache by keyword
    drafters = [AutoregressiveDrafter(weak, num_tokens=3), AutoregressiveDrafter(target, num_tokens=3),
                AutoregressiveDrafter(weak, num_tokens=3, tree="dynamic", top_k=2, num_nodes=6),
                AutoregressiveDrafter(weak, tree=TreeTemplate.full((2, 1))), PromptLookupDrafter(num_tokens=3),
                FeatureDrafter(stock, target, num_tokens=3)]
    for drafter in drafters:
        with cache_name_deprecations() as found:
            out = SpeculativeGenerator(target, drafter).generate(ids, attention_mask=mask, max_new_tokens=12,
                                                                 eos_token_id=[])
        assert not found, (type(drafter).__name__, found)
        assert torch.equal(out.sequences, ref)


def test_vlm_routes_are_quiet_and_exact(greedy_reference):
    _, weak = text_pair("llama")
    llava = tiny_llava()
    ids, pixels = llava_batch(2)
    ref = greedy_reference(llava, ids, 10, pixel_values=pixels)
    with cache_name_deprecations() as found:
        out = SpeculativeGenerator(llava, AutoregressiveDrafter(weak, num_tokens=3)).generate(
            ids, max_new_tokens=10, eos_token_id=[], pixel_values=pixels)
    assert not found
    assert torch.equal(out.sequences, ref)

    qwen = tiny_qwen_vl("2")
    ids, mask, inputs = qwen_batch()
    ref = greedy_reference(qwen, ids, 10, attention_mask=mask, **inputs)
    with cache_name_deprecations() as found:
        out = speculative(qwen, PromptLookupDrafter(num_tokens=3), ids, mask, inputs, 10)
    assert not found
    assert torch.equal(out.sequences, ref)


@torch.no_grad()
def _guided_greedy(model: CFGModel, cls: torch.LongTensor, null: int, n: int) -> torch.LongTensor:
    seq = cls[:, None]
    for _ in range(n):
        unc = seq.clone()
        unc[:, 0] = null
        c, u = model.model(seq).logits[:, -1].float(), model.model(unc).logits[:, -1].float()
        logits = (u + model.scale * (c - u)).masked_fill(~model.allowed, float("-inf"))
        seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], 1)
    return seq


def test_cfg_wrapper_is_quiet_exact_and_takes_either_name():
    codes, null = 40, 45
    target = tiny_model("llama", seed=0, vocab_size=48, hidden_size=32)
    draft = tiny_model("llama", seed=3, vocab_size=48, hidden_size=32, num_layers=1)
    t, d = CFGModel(target, 3.0, null, torch.arange(codes)), CFGModel(draft, 3.0, null, torch.arange(codes))
    cls = torch.tensor([codes, codes + 2])
    with cache_name_deprecations() as found:
        out = SpeculativeGenerator(t, AutoregressiveDrafter(d, num_tokens=3)).generate(
            cls[:, None], max_new_tokens=8, eos_token_id=[])
    assert not found
    assert torch.equal(out.sequences, _guided_greedy(t, cls, null, 8))

    # called the way HF's generate of either era calls a model: the cache under either name
    ids = torch.tensor([[codes, 3, 4]])
    logits = []
    for name in ("cache", "past_key_values"):
        cache = DynamicCache(config=target.config)
        with cache_name_deprecations() as found, torch.no_grad():
            res = t(input_ids=ids, use_cache=True, **{name: cache})
        assert not found
        assert output_cache(res) is cache and cache.get_seq_length() == 3
        logits.append(res.logits)
    torch.testing.assert_close(logits[0], logits[1])


def test_janus_image_route_is_quiet_and_exact():
    target, draft = tiny_janus(seed=0), tiny_janus(seed=1, num_layers=1)
    prompts = torch.tensor([[JANUS_BOS, 17, 99, 42, 8, JANUS_BOI]])
    ref = JanusImageGenerator(target).generate(prompts, method="ar", cfg_scale=4.0, decode=False).codes
    with cache_name_deprecations() as found:
        out = JanusImageGenerator(target, draft).generate(prompts, method="spec", cfg_scale=4.0, num_tokens=3,
                                                          decode=False)
        lm = JanusImageLM(target)
        with torch.no_grad():
            for name in ("cache", "past_key_values"):
                assert output_cache(lm(input_ids=prompts, **{name: DynamicCache(config=lm.config)})) is not None
    assert not found
    assert torch.equal(out.codes, ref)
