"""LLaVA-class targets in the core: image prefill, then tree verification of the text."""

import pytest
import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

from mmspec import SpeculativeGenerator
from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter
from mmspec.tiny import tiny_model

IMAGE_TOKEN = 3


def tiny_llava(seed=0):
    torch.manual_seed(seed)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                              image_size=16, patch_size=8, projection_dim=32)
    text = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0,
                       eos_token_id=2)
    cfg = LlavaConfig(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN,
                      vision_feature_select_strategy="default", vision_feature_layer=-1)
    return LlavaForConditionalGeneration(cfg).eval()


def image_prompt(batch, seed=0):
    g = torch.Generator().manual_seed(seed)
    n_img = (16 // 8) ** 2  # "default" strategy drops CLS: 4 patch features per image
    text = torch.randint(4, 96, (batch, 6), generator=g)
    ids = torch.cat([torch.full((batch, n_img), IMAGE_TOKEN), text], 1)
    pixels = torch.randn(batch, 3, 16, 16, generator=g)
    return ids, pixels


@pytest.mark.parametrize("batch", [1, 2])
def test_llava_greedy_exact(batch):
    target = tiny_llava()
    draft = tiny_model("llama", seed=1, vocab_size=96, num_layers=1)
    ids, pixels = image_prompt(batch)
    ref = target.generate(input_ids=ids, pixel_values=pixels, do_sample=False, max_new_tokens=15, eos_token_id=None,
                          pad_token_id=0)
    for drafter in (AutoregressiveDrafter(draft, num_tokens=3), PromptLookupDrafter(num_tokens=4)):
        out = SpeculativeGenerator(target, drafter).generate(ids, max_new_tokens=15, eos_token_id=[],
                                                             pixel_values=pixels)
        assert torch.equal(out.sequences, ref)


def test_llava_missing_pixel_values_is_an_error():
    target = tiny_llava()
    ids, pixels = image_prompt(1)
    gen = SpeculativeGenerator(target, PromptLookupDrafter())
    with pytest.raises(ValueError, match="pixel_values is missing"):
        gen.generate(ids, max_new_tokens=4)
    with pytest.raises(ValueError, match="no image token"):
        gen.generate(ids[:, 4:], max_new_tokens=4, pixel_values=pixels)
