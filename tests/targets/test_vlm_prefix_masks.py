"""Targets that build their own prompt masks from ``token_type_ids`` (PaliGemma's bidirectional image + prompt
prefix, 1-based positions; Gemma3's bidirectional image blocks, pooled image tokens): the prompt's blocks
inside mmspec's 4-D mask, greedy output equal to ``target.generate`` on a left-padded batch."""

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter
from mmspec.tree import TreeTemplate
from tests.vlm_families import gemma_batch, llava_batch, speculative, tiny_gemma3, tiny_llava, tiny_paligemma

N = 10
FAMILIES = {"paligemma": (tiny_paligemma, 16), "gemma3": (tiny_gemma3, 4),
            # real Gemma3 checkpoints mix sliding-window and full layers: the image blocks go into both masks,
            # with a window (3) shorter than an image block plus its neighbours
            "gemma3-hybrid": (lambda: tiny_gemma3(sliding_window=3), 4)}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, greedy_reference):
    build, n_image = FAMILIES[request.param]
    model = build()
    ids, mask, inputs = gemma_batch(n_image, request.param.split("-")[0])
    ref = greedy_reference(model, ids, N, attention_mask=mask, **inputs)
    return model, ids, mask, inputs, ref


def run(model, drafter, ids, mask, inputs):
    return speculative(model, drafter, ids, mask, inputs, N)


@pytest.mark.parametrize("tree", [None, TreeTemplate.full((2, 2)), "dynamic"])
def test_prefix_mask_family_exact(family, tiny_pair, tree):
    model, ids, mask, inputs, ref = family
    _, draft = tiny_pair
    out = run(model, AutoregressiveDrafter(draft, num_tokens=3, tree=tree), ids, mask, inputs)
    assert torch.equal(out.sequences, ref)


def test_the_blocks_matter(family, monkeypatch):
    """Without the prompt's bidirectional blocks the output differs: the tiny models are sharp enough for the
    exactness test above to catch a causal-only prompt."""
    import mmspec.generator

    model, ids, mask, inputs, ref = family
    monkeypatch.setattr(mmspec.generator, "bidirectional_blocks", lambda *a: None)
    out = run(model, PromptLookupDrafter(num_tokens=3), ids, mask, inputs)
    assert not torch.equal(out.sequences, ref)


def test_token_type_ids_of_other_families_refused():
    ids, pixels = llava_batch(1)
    with pytest.raises(ValueError, match="token_type_ids"):  # the model takes none: an unknown input
        SpeculativeGenerator(tiny_llava(), PromptLookupDrafter()).generate(
            ids, max_new_tokens=4, pixel_values=pixels, token_type_ids=torch.zeros_like(ids))
