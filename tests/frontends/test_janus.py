"""Janus image generation through mmspec's loop: a tiny random stock JanusForConditionalGeneration, its own
CFG rule, exactness against its stock generate, LANTERN++ and decoding to pixels."""

import os

import pytest
import torch

from mmspec import TreeTemplate
from mmspec.janus import JanusImageGenerator, JanusImageLM, janus_uncond
from mmspec.tiny import JANUS_BOI, JANUS_BOS, JANUS_PAD, tiny_janus

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PROMPTS = torch.tensor([[JANUS_BOS, 17, 99, 42, 8, JANUS_BOI], [JANUS_BOS, 5, 6, 7, 9, JANUS_BOI]])


@pytest.fixture(scope="module")
def janus():
    return tiny_janus(seed=0), tiny_janus(seed=1, num_layers=1)


def test_joint_vocabulary_logits_are_the_generation_head(janus):
    target, _ = janus
    lm = JanusImageLM(target)
    with torch.no_grad():
        out = lm(torch.cat([PROMPTS, PROMPTS[:, :2] + lm.text_vocab], 1))
        hidden = target.model.language_model(inputs_embeds=lm.embed(PROMPTS)).last_hidden_state
    assert out.logits.shape[-1] == lm.text_vocab + lm.codebook_size
    assert torch.isinf(out.logits[..., :lm.text_vocab]).all()  # only codes can be drafted or accepted
    torch.testing.assert_close(out.logits[:, :PROMPTS.shape[1], lm.text_vocab:], target.model.generation_head(hidden))


def test_uncond_rule_keeps_bos_and_begin_of_image():
    rule = janus_uncond(JANUS_BOS, JANUS_BOI, JANUS_PAD)
    ids = torch.tensor([[JANUS_PAD, JANUS_BOS, 7, 8, JANUS_BOI]])
    real = torch.tensor([[False, True, True, True, True]])
    assert rule(ids, real).tolist() == [[JANUS_PAD, JANUS_BOS, JANUS_PAD, JANUS_PAD, JANUS_BOI]]


@pytest.mark.parametrize("method,tree", [("spec", None), ("spec", TreeTemplate.full((2, 2, 1))), ("lantern", None)])
def test_speculative_janus_equals_stock_generate(janus, method, tree):
    """Greedy, CFG 4: lossless speculative decoding (and LANTERN at δ = 0) gives exactly the codes of the
    stock ``generate(generation_mode="image")``; with the target as its own drafter every draft is accepted."""
    target, draft = janus
    ref = JanusImageGenerator(target).generate(PROMPTS, method="ar", cfg_scale=4.0, decode=False).codes
    for drafter, full in ((draft, False), (target, True)):
        out = JanusImageGenerator(target, drafter).generate(PROMPTS, method=method, cfg_scale=4.0, tree=tree,
                                                            num_tokens=3, decode=False,
                                                            **({"delta": 0.0} if method == "lantern" else {}))
        assert torch.equal(out.codes, ref)
        if full:
            depth = tree.depth if tree is not None else 3
            assert out.stats.mean_accepted_tokens > depth  # every draft accepted (the last step is shorter)
        if method == "lantern":
            assert max(out.stats.moved_mass) == 0.0


def test_lantern_pp_on_janus_is_bounded_and_decodes(janus):
    target, draft = janus
    gen = JanusImageGenerator(target, draft)
    out = gen.generate(PROMPTS, method="lantern++", lam=3.0, lantern_k=4, cfg_scale=4.0, do_sample=True, seed=3)
    assert out.codes.shape == (2, 16) and out.codes.min() >= 0 and out.codes.max() < 64
    assert out.stats.moved_mass and max(out.stats.moved_mass) <= 1.0
    assert out.images.shape[0] == 2 and torch.isfinite(out.images).all()
    spec = gen.generate(PROMPTS, method="spec", cfg_scale=4.0, do_sample=True, seed=3, decode=False)
    assert out.stats.mean_accepted_tokens >= spec.stats.mean_accepted_tokens


def test_janus_errors(janus):
    target, _ = janus
    gen = JanusImageGenerator(target)
    with pytest.raises(ValueError, match="begin_of_image"):
        gen.generate(PROMPTS[:, :-1], method="ar")
    with pytest.raises(ValueError, match="drafter"):
        gen.generate(PROMPTS, method="spec")
    with pytest.raises(ValueError, match="JanusForConditionalGeneration"):
        JanusImageLM(torch.nn.Linear(2, 2))
