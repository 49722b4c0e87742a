"""Processor-driven VLM families through ``VLMGenerator`` and ``mmspec.pipeline``: every processor output
the model's forward takes reaches the prefill (LLaVA-NeXT ``image_sizes``; Qwen2-VL ``image_grid_thw`` and
``mm_token_type_ids``), and greedy answers equal ``target.generate`` on the same inputs."""

import pytest
import torch

import mmspec
from mmspec import VLMGenerator
from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
from tests.vlm_families import (llava_next_processor, paligemma_processor, pictures, qwen_processor, tiny_llava_next,
                          tiny_paligemma, tiny_qwen_vl)

N = 10


def reference(model, gen, images, prompts):
    inputs = gen.prepare(images, prompts)
    tok = gen.tokenizer
    return model.generate(**inputs, do_sample=False, max_new_tokens=N, pad_token_id=tok.pad_token_id,
                          eos_token_id=tok.eos_token_id)


@pytest.fixture(scope="module")
def qwen():
    proc, vocab, ids = qwen_processor()
    return tiny_qwen_vl("2", vocab_size=vocab, ids=ids), proc


@pytest.fixture(scope="module")
def llava_next():
    proc, vocab, image = llava_next_processor()
    return tiny_llava_next(vocab_size=vocab, image_token=image), proc


QWEN_PROMPTS = ["Look: <|vision_start|><|image_pad|><|vision_end|> what is it?",
                "a b c d e f g h <|vision_start|><|image_pad|><|vision_end|><|vision_start|><|image_pad|><|vision_end|>"]


@pytest.mark.parametrize("method", ["prompt-lookup", "eagle", "msd"])
def test_qwen_vl_generator_exact(qwen, method):
    model, proc = qwen
    a, b, c = pictures()
    images = [a, [b, c]]
    net = None
    if method != "prompt-lookup":
        torch.manual_seed(0)
        net = FeatureDraftModel(FeatureDrafterConfig.for_target(model, method))
    gen = VLMGenerator(model, proc, net, method=method, num_tokens=3)
    assert {"image_grid_thw", "mm_token_type_ids"} <= set(gen.prepare(images, QWEN_PROMPTS))
    out = gen.generate(images=images, prompts=QWEN_PROMPTS, max_new_tokens=N, stop_at_eos=True)
    assert torch.equal(out.sequences, reference(model, gen, images, QWEN_PROMPTS))


def test_qwen_vl_pipeline(qwen):
    model, proc = qwen
    a, _, c = pictures()
    pipe = mmspec.pipeline(model, processor=proc, drafter="prompt-lookup")
    out = pipe.generate(images=[a, c], prompts=[QWEN_PROMPTS[0], QWEN_PROMPTS[0]], max_new_tokens=N)
    ref = reference(model, pipe.generator, [a, c], [QWEN_PROMPTS[0]] * 2)
    assert torch.equal(out.sequences, ref)


def test_llava_next_generator_and_pipeline_exact(llava_next):
    """LLaVA-NeXT's tiles need ``image_sizes``: VLMGenerator and the pipeline forward it (they dropped it)."""
    model, proc = llava_next
    a, b, _ = pictures()
    prompts = ["hi <image> what", "a b c <image> d e f g"]
    gen = VLMGenerator(model, proc, method="prompt-lookup", num_tokens=3)
    assert "image_sizes" in gen.prepare([a, b], prompts)
    out = gen.generate(images=[a, b], prompts=prompts, max_new_tokens=N)
    ref = reference(model, gen, [a, b], prompts)
    assert torch.equal(out.sequences, ref)
    pipe = mmspec.pipeline(model, processor=proc, drafter="prompt-lookup")
    assert torch.equal(pipe.generate(images=[a, b], prompts=prompts, max_new_tokens=N).sequences, ref)


def test_paligemma_generator_exact():
    """PaliGemma's processor returns token_type_ids (the bidirectional prefix) and labels: the first reaches the
    prefill mask, the second is not forwarded."""
    proc, vocab, image = paligemma_processor()
    model = tiny_paligemma(vocab_size=vocab, image_token=image)
    a, b, _ = pictures()
    prompts = ["<image>caption", "<image>what is in the picture"]
    gen = VLMGenerator(model, proc, method="prompt-lookup", num_tokens=3)
    inputs = gen.prepare([a, b], prompts)
    assert "token_type_ids" in inputs and "labels" not in inputs
    out = gen.generate(images=[a, b], prompts=prompts, max_new_tokens=N)
    assert torch.equal(out.sequences, reference(model, gen, [a, b], prompts))


def test_qwen_vl_rows_without_images(qwen):
    """A row without a picture next to one with (delta 0 for that row), and a text-only batch (no grids)."""
    model, proc = qwen
    a, _, _ = pictures()
    gen = VLMGenerator(model, proc, method="prompt-lookup", num_tokens=3)
    for images, prompts in (([None, a], ["just some text here", QWEN_PROMPTS[0]]),
                            (None, ["just some text here", "and more"])):
        out = gen.generate(images=images, prompts=prompts, max_new_tokens=N)
        assert torch.equal(out.sequences, reference(model, gen, images, prompts))
