"""LLaVA-class targets in the core: image prefill, then tree verification of the text."""

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter
from tests.vlm_families import llava_batch, tiny_llava


@pytest.mark.parametrize("batch", [1, 2])
def test_llava_greedy_exact(batch, tiny_pair, greedy_reference):
    target = tiny_llava()
    _, draft = tiny_pair
    ids, pixels = llava_batch(batch)
    ref = greedy_reference(target, ids, 15, pixel_values=pixels)
    for drafter in (AutoregressiveDrafter(draft, num_tokens=3), PromptLookupDrafter(num_tokens=4)):
        out = SpeculativeGenerator(target, drafter).generate(ids, max_new_tokens=15, eos_token_id=[],
                                                             pixel_values=pixels)
        assert torch.equal(out.sequences, ref)


def test_llava_missing_pixel_values_is_an_error():
    target = tiny_llava()
    ids, pixels = llava_batch(1)
    gen = SpeculativeGenerator(target, PromptLookupDrafter())
    with pytest.raises(ValueError, match="pixel_values is missing"):
        gen.generate(ids, max_new_tokens=4)
    with pytest.raises(ValueError, match="no image token"):
        gen.generate(ids[:, 4:], max_new_tokens=4, pixel_values=pixels)
