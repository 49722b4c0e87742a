"""Image-token counts asked of the model (Gemma3 pooling, Idefics3 pixel shuffle with 5-D ``pixel_values``,
LLaVA-NeXT tiles from ``image_sizes``, Qwen2-VL grids) agree with the features the model itself produces; a
prompt with the wrong number of placeholders is refused before any forward; Idefics3 is exact."""

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter
from mmspec.vision import expected_image_tokens
from tests.vlm_families import IMAGE, qwen_batch, tiny_gemma3, tiny_idefics3, tiny_llava_next, tiny_qwen_vl


def feature_count(model, **inputs):
    out = model.model.get_image_features(**inputs)
    pooled = getattr(out, "pooler_output", out)
    return sum(p.shape[0] for p in pooled) if isinstance(pooled, (list, tuple)) else pooled.shape[:-1].numel()


def idefics_inputs():
    """Row 0: two 16x16 tiles; row 1: one tile and an all-zero padding tile (what the processor pads with)."""
    g = torch.Generator().manual_seed(2)
    pixels = torch.randn(2, 2, 3, 16, 16, generator=g)
    pixels[1, 1] = 0
    pam = torch.ones(2, 2, 16, 16, dtype=torch.bool)
    pam[1, 1] = False
    return pixels, pam


def test_counts_agree_with_the_models_features():
    pixels, pam = idefics_inputs()
    idefics = tiny_idefics3()
    assert expected_image_tokens(idefics, dict(pixel_values=pixels)) == feature_count(
        idefics, pixel_values=pixels, pixel_attention_mask=pam) == 3 * 4
    gemma = tiny_gemma3()
    two = torch.randn(2, 3, 16, 16)
    assert expected_image_tokens(gemma, dict(pixel_values=two)) == feature_count(gemma, pixel_values=two) == 2 * 4
    nxt = tiny_llava_next()
    sizes = torch.tensor([[16, 30], [20, 20], [32, 16]])
    tiles = torch.randn(3, 5, 3, 16, 16)
    assert expected_image_tokens(nxt, dict(pixel_values=tiles, image_sizes=sizes)) == feature_count(
        nxt, pixel_values=tiles, image_sizes=sizes)
    qwen = tiny_qwen_vl("2")
    _, _, inputs = qwen_batch()
    assert expected_image_tokens(qwen, inputs) == feature_count(
        qwen, pixel_values=inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"]) == 4 + 8


def idefics_prompt():
    rows = [[1, 10, 11] + [IMAGE] * 4 + [12] + [IMAGE] * 4 + [13, 14], [1, 20] + [IMAGE] * 4 + [21, 22, 23]]
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


@pytest.mark.parametrize("tree", [None, "dynamic"])
def test_idefics3_exact(tree, tiny_pair, greedy_reference):
    model = tiny_idefics3()
    pixels, pam = idefics_inputs()
    ids, mask = idefics_prompt()
    kw = dict(pixel_values=pixels, pixel_attention_mask=pam)
    ref = greedy_reference(model, ids, 10, attention_mask=mask, **kw)
    _, draft = tiny_pair
    out = SpeculativeGenerator(model, AutoregressiveDrafter(draft, num_tokens=3, tree=tree)).generate(
        ids, attention_mask=mask, max_new_tokens=10, eos_token_id=[], pad_token_id=0, **kw)
    assert torch.equal(out.sequences, ref)


def test_wrong_placeholder_counts_are_refused():
    pixels, pam = idefics_inputs()
    ids, mask = idefics_prompt()
    gen = SpeculativeGenerator(tiny_idefics3(), PromptLookupDrafter())
    with pytest.raises(ValueError, match=r"image tokens \(10\) .* fill 12"):
        gen.generate(ids[:, 5:], attention_mask=mask[:, 5:], max_new_tokens=4, pixel_values=pixels,
                     pixel_attention_mask=pam)
    nxt = SpeculativeGenerator(tiny_llava_next(), PromptLookupDrafter())
    ids = torch.tensor([[1] + [IMAGE] * 13 + [10, 11]])
    tiles = torch.randn(1, 5, 3, 16, 16)
    with pytest.raises(ValueError, match="fill 14"):
        nxt.generate(ids, max_new_tokens=4, pixel_values=tiles, image_sizes=torch.tensor([[16, 30]]))
    with pytest.raises(ValueError, match="image_sizes"):
        nxt.generate(ids, max_new_tokens=4, pixel_values=tiles)
