"""PaliGemma called without ``token_type_ids`` (only ``input_ids``, ``attention_mask``, ``pixel_values``): greedy
output equal to ``target.generate`` with the same inputs, or a ValueError before any forward.

What transformers 5.x does then: no prefix block, but PaliGemma's language model has non-causal attention modules
(``use_bidirectional_attention``), so under SDPA an unpadded batch's prefill runs with no mask and attends
bidirectionally over the whole prompt, while a padded batch (or eager attention) gets a causal mask. With
sliding-window layers (PaliGemma 2's layout), a prompt that reaches the window keeps a causal mask in those layers
only: refused."""

import pytest
import torch

from mmspec.drafters.no_draft import NoDrafter
from mmspec import SpeculativeGenerator
from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter
from mmspec.tree import DraftTree, TreeTemplate
from tests.tiny_models import sharpen
from tests.vlm_families import GEMMA, IMAGE, SIGLIP, gemma_batch, tiny_paligemma

N = 16


def unpadded(seed=1, rows=((1, 10, 11, 12, 13), (1, 20, 21, 22, 23))):
    """Rows of one image's 16 placeholders then the same number of text tokens: no padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor([[IMAGE] * 16 + list(r) for r in rows])
    return ids, torch.ones_like(ids), torch.randn(len(rows), 3, 16, 16, generator=g)


def tiny_paligemma2(window, seed=0):
    """PaliGemma 2's layout (Gemma2 text: sliding-window layers, then full), without soft-capping (SDPA)."""
    from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration

    torch.manual_seed(seed)
    text = dict(GEMMA, model_type="gemma2", sliding_window=window, layer_types=["sliding_attention", "full_attention"],
                attn_logit_softcapping=None, final_logit_softcapping=None, query_pre_attn_scalar=16)
    cfg = PaliGemmaConfig(vision_config=dict(SIGLIP, model_type="siglip_vision_model"), text_config=text,
                          image_token_index=IMAGE, projection_dim=64, hidden_size=64, tie_word_embeddings=False)
    model = sharpen(PaliGemmaForConditionalGeneration(cfg), seed)
    model.set_attn_implementation("mmspec_tree")  # SDPA-like; Gemma2 takes no "sdpa" in transformers 5.24
    return model


def reference(model, ids, mask, pixels, **extra):
    return model.generate(input_ids=ids, attention_mask=mask, pixel_values=pixels, do_sample=False,
                          max_new_tokens=N, eos_token_id=[], pad_token_id=0, **extra)


def speculative(model, drafter, ids, mask, pixels, **extra):
    return SpeculativeGenerator(model, drafter).generate(ids, attention_mask=mask, max_new_tokens=N, eos_token_id=[],
                                                         pad_token_id=0, pixel_values=pixels, **extra)


class Replay(PromptLookupDrafter):
    """Drafts the reference's next two tokens and then a wrong one: two accepted, one rejected every step."""

    def __init__(self, ref):
        super().__init__(num_tokens=3)
        self.ref = ref

    def propose(self, context, run=None):
        state = context.state
        drafts = torch.zeros(state.batch_size, 3, dtype=torch.long)
        lengths = torch.zeros(state.batch_size, dtype=torch.long)
        for b in range(state.batch_size):
            at = int(state.lengths[b])
            cont = self.ref[b, at:at + 3].clone()
            if state.active[b] and cont.numel():
                cont[-1] = (cont[-1] + 1) % 96 if cont.numel() == 3 else cont[-1]
                drafts[b, :cont.numel()], lengths[b] = cont, cont.numel()
        return DraftTree.chain(state.roots, drafts, lengths=lengths)


def drafters(tiny_pair, ref):
    _, draft = tiny_pair
    return [PromptLookupDrafter(num_tokens=3), AutoregressiveDrafter(draft, num_tokens=3),
            AutoregressiveDrafter(draft, num_tokens=3, tree=TreeTemplate.full((2, 2))), Replay(ref)]


def accepted_drafts(out):
    return sum(n - 1 for row in out.stats.accept_lengths for n in row)


@pytest.fixture(scope="module")
def paligemma():
    return tiny_paligemma()


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_untyped_prompt_exact(paligemma, tiny_pair, padded):
    """Only input_ids, attention_mask and pixel_values: every drafter's greedy output is HF's, token for token
    (a padded batch gets HF's causal prompt, an unpadded one its bidirectional prompt)."""
    if padded:
        ids, mask, inputs = gemma_batch(16, "paligemma")
        pixels = inputs["pixel_values"]
    else:
        ids, mask, pixels = unpadded()
    ref = reference(paligemma, ids, mask, pixels)
    accepted = 0
    for drafter in drafters(tiny_pair, ref):
        out = speculative(paligemma, drafter, ids, mask, pixels)
        assert torch.equal(out.sequences, ref), type(drafter).__name__
        accepted += accepted_drafts(out)
    assert accepted >= N  # drafts were accepted (Replay's): committed paths of several tokens


def test_untyped_prompt_without_attention_mask(paligemma):
    """No attention_mask at all (one unpadded row): HF's bidirectional prompt as well."""
    ids, _, pixels = unpadded(rows=((1, 20, 21, 22, 23),))
    ref = paligemma.generate(input_ids=ids, pixel_values=pixels, do_sample=False, max_new_tokens=N, eos_token_id=[],
                             pad_token_id=0)
    out = SpeculativeGenerator(paligemma, PromptLookupDrafter(num_tokens=3)).generate(
        ids, max_new_tokens=N, eos_token_id=[], pad_token_id=0, pixel_values=pixels)
    assert torch.equal(out.sequences, ref)


def test_untyped_prompt_is_not_causal(paligemma, monkeypatch):
    """The tiny model is sharp enough to tell: a causal prompt (mmspec before this was handled) differs from HF."""
    import mmspec.families

    ids, mask, pixels = unpadded()
    ref = reference(paligemma, ids, mask, pixels)
    monkeypatch.setattr(mmspec.families, "_paligemma_untyped_prompt", lambda *a: None)
    out = speculative(paligemma, PromptLookupDrafter(num_tokens=3), ids, mask, pixels)
    assert not torch.equal(out.sequences, ref)


def test_typed_prompt_still_exact(paligemma, tiny_pair):
    """With the processor's token_type_ids (0 on the whole prompt), padded and unpadded: HF's output."""
    for ids, mask, pixels in (unpadded(), gemma_batch(16, "paligemma")):
        if isinstance(pixels, dict):
            pixels = pixels["pixel_values"]
        tt = torch.zeros_like(ids)
        ref = reference(paligemma, ids, mask, pixels, token_type_ids=tt)
        for drafter in drafters(tiny_pair, ref):
            out = speculative(paligemma, drafter, ids, mask, pixels, token_type_ids=tt)
            assert torch.equal(out.sequences, ref), type(drafter).__name__


def test_untyped_prompt_eager_exact(tiny_pair):
    """Eager attention always gets a materialised (causal) mask from HF: mmspec's causal prompt is exact."""
    model = tiny_paligemma()
    model.set_attn_implementation("eager")
    ids, mask, pixels = unpadded()
    ref = reference(model, ids, mask, pixels)
    for drafter in drafters(tiny_pair, ref)[1:]:
        assert torch.equal(speculative(model, drafter, ids, mask, pixels).sequences, ref)
    # a lone row's plain steps (one node, no mask from the cache): eager attention gets an explicit one
    one = {k: v[:1] for k, v in dict(ids=ids, mask=mask, pixels=pixels).items()}
    ref_one = reference(model, one["ids"], one["mask"], one["pixels"])
    for drafter in (NoDrafter(), drafters(tiny_pair, ref_one)[1]):
        assert torch.equal(speculative(model, drafter, one["ids"], one["mask"], one["pixels"]).sequences, ref_one)


def test_untyped_sliding_window_prompt_refused():
    """PaliGemma 2 layout: an unpadded prompt that reaches the window would be bidirectional in the full layers
    but causal in the sliding ones: refused before any forward with a ValueError naming token_type_ids."""
    model = tiny_paligemma2(window=22)
    ids, mask, pixels = unpadded(rows=((1, 20, 21, 22, 23, 24, 25),))  # 23 tokens
    with pytest.raises(ValueError, match="without token_type_ids.*sliding window"):
        speculative(model, PromptLookupDrafter(num_tokens=3), ids, mask, pixels)
