"""Qwen2-VL / Qwen2.5-VL targets (3-axis M-RoPE with per-row rope_deltas): greedy output equals
``target.generate`` on a left-padded batch with images, for chain / static / dynamic trees and the feature
drafters."""

import pytest
import torch

from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter
from mmspec.drafters.feature import FeatureDrafter
from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
from mmspec.tree import TreeTemplate
from tests.vlm_families import qwen_batch, speculative, tiny_qwen_vl

N = 12


@pytest.fixture(scope="module", params=["2", "2.5"])
def qwen(request, greedy_reference):
    model = tiny_qwen_vl(request.param)
    ids, mask, inputs = qwen_batch()
    ref = greedy_reference(model, ids, N, attention_mask=mask, **inputs)
    return model, ids, mask, inputs, ref


def run(model, drafter, ids, mask, inputs):
    return speculative(model, drafter, ids, mask, inputs, N)


@pytest.mark.parametrize("tree", [None, TreeTemplate.full((2, 2)), "dynamic"])
def test_qwen_vl_text_drafter_exact(qwen, tiny_pair, tree):
    model, ids, mask, inputs, ref = qwen
    _, draft = tiny_pair
    out = run(model, AutoregressiveDrafter(draft, num_tokens=3, tree=tree), ids, mask, inputs)
    assert torch.equal(out.sequences, ref)


def test_qwen_vl_prompt_lookup_exact_and_rows_differ(qwen):
    model, ids, mask, inputs, ref = qwen
    out = run(model, PromptLookupDrafter(num_tokens=4), ids, mask, inputs)
    assert torch.equal(out.sequences, ref)
    assert not torch.equal(ref[0, -N:], ref[1, -N:])  # the rows are not a degenerate repetition


def test_qwen_vl_needs_mm_token_type_ids(qwen):
    model, ids, mask, inputs, _ = qwen
    partial = {k: v for k, v in inputs.items() if k != "mm_token_type_ids"}
    with pytest.raises(ValueError, match="mm_token_type_ids"):
        run(model, PromptLookupDrafter(), ids, mask, partial)


@pytest.mark.parametrize("method,tree", [("eagle", None), ("msd", "dynamic"), ("msd", TreeTemplate.full((2, 1))),
                                         ("flash", None)])
def test_qwen_vl_feature_drafters_exact(qwen, method, tree):
    """Untrained drafters: lossless means the output is the target's whatever they propose; the MSD drafter
    also reads the image embeddings captured from the vision tower."""
    model, ids, mask, inputs, ref = qwen
    extra = dict(compress_tokens=2, sar_tokens=3) if method == "flash" else {}
    torch.manual_seed(3)
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(model, method, **extra))
    out = run(model, FeatureDrafter(net, model, tree=tree), ids, mask, inputs)
    assert torch.equal(out.sequences, ref)


def test_captured_image_embeds_are_the_models_own(qwen):
    """The MSD drafter's image inputs are the vision tower's merged output in placeholder order (Qwen2.5-VL
    reorders its windows after the merger: the hook must read the tower's pooler_output, not the merger)."""
    from mmspec.vision import capture_image_embeds

    model, ids, mask, inputs, _ = qwen
    with torch.no_grad():
        with capture_image_embeds(model) as images:
            model(input_ids=ids, attention_mask=mask, **inputs)
        own = model.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"]).pooler_output
    assert images.embeds is not None and torch.equal(images.embeds, torch.cat(own))
    assert images.embeds.shape[0] == int((ids == model.config.image_token_id).sum())
