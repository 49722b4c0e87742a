"""Rows that finished leave the batch (``SpeculativeGenerator._narrow``): once half a call's rows are done, the
target's cache, the token buffer and the drafter's state keep only the rows still generating. The output must not
change: every drafter that says it can drop rows (``drops_rows``) stays exact on ragged batches whose rows stop at
different steps (EOS), text and VLM (pictures' embeddings narrowed row by row), and the stats stay per call row."""

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.cache import SpecKVCache
from mmspec.drafters.adaptive import AdaptiveDrafter
from mmspec.drafters.base import Drafter
from mmspec.drafters import DEERDrafter, DiffusionLM
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.diffuspec import DiffuSpecDrafter
from mmspec.drafters.dflash_model import DFlashDraftModel, make_config
from mmspec.drafters.feature import FeatureDrafter
from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
from mmspec.drafters.no_draft import NoDrafter
from mmspec.registry import build_drafter
from mmspec.state import DecodeState, DraftContext
from mmspec.tiny import tiny_model
from mmspec.verifiers.logits import SamplingConfig
from tests.drafters.test_dflash_vlm import CASES, make_net
from tests.drafters.test_diffuspec import TableCausal
from tests.drafters.test_feature import batch_inputs, llava_hf_like
from tests.tiny_models import VOCAB, sharpen


@pytest.fixture(scope="module")
def target():
    return sharpen(tiny_model("llama", seed=0, vocab_size=VOCAB, num_layers=2), seed=0)


@pytest.fixture(scope="module")
def draft():
    return sharpen(tiny_model("llama", seed=1, vocab_size=VOCAB, num_layers=1), seed=1)


def _dflash(target, **kw):
    torch.manual_seed(3)
    net = DFlashDraftModel(make_config(target.config, num_layers=1, block_size=5, mask_token_id=2))
    return DFlashDrafter(sharpen(net, seed=3), target, **kw)


def _eagle(target):
    torch.manual_seed(3)
    return FeatureDrafter(FeatureDraftModel(FeatureDrafterConfig.for_target(target, "eagle")), target, num_tokens=4)


DRAFTERS = {
    "plain": lambda t, d: NoDrafter(),
    "chain": lambda t, d: build_drafter("chain", d, num_tokens=4),
    "tree": lambda t, d: build_drafter("tree", d),
    "self-chain": lambda t, d: build_drafter("chain", t, num_tokens=4),  # long accepted runs: rows end mid-draft
    "prompt-lookup": lambda t, d: build_drafter("prompt-lookup", None),
    "dflash": lambda t, d: _dflash(t, num_tokens=4),
    "dflash-tree-lookup": lambda t, d: _dflash(t, tree_nodes=6, top_k=2, lookup=3),
    "eagle": lambda t, d: _eagle(t),
    "chain-auto": lambda t, d: AdaptiveDrafter(build_drafter("chain", d, num_tokens=4)),
    "deer-cache": lambda t, d: DEERDrafter(DiffusionLM(d, 2, context="cache"), num_tokens=4),
    "deer-window": lambda t, d: DEERDrafter(DiffusionLM(d, 2, context="window", window=6), num_tokens=4),
    "diffuspec-cps-adl": lambda t, d: DiffuSpecDrafter(DiffusionLM(d, 2), causal=TableCausal({}, vocab=VOCAB),
                                                       eos_token_id=1, num_tokens=4),
    "diffuspec-lattice": lambda t, d: DiffuSpecDrafter(DiffusionLM(d, 2), causal=TableCausal({}, vocab=VOCAB),
                                                       eos_token_id=1, num_tokens=4, lattice=True, adl=False),
}


@pytest.fixture
def narrowings(monkeypatch):
    """How many rows each ``SpecKVCache.select_rows`` call kept (the target's and drafters' caches alike)."""
    kept = []
    original = SpecKVCache.select_rows

    def spy(self, keep):
        kept.append(int(keep.numel()))
        return original(self, keep)

    monkeypatch.setattr(SpecKVCache, "select_rows", spy)
    return kept


def _staggered_eos(target, greedy_reference, ids, mask, max_new):
    """EOS ids that stop rows 0..3 of the batch at new tokens 3, 5, 7 and 9 (their free runs' tokens there), and
    HF's greedy output with them."""
    free = greedy_reference(target, ids, max_new, attention_mask=mask)
    P = ids.shape[1]
    eos = sorted({int(free[b, P + 2 + 2 * b]) for b in range(4)})
    return eos, greedy_reference(target, ids, max_new, eos_token_id=eos, attention_mask=mask)


@pytest.mark.parametrize("method", list(DRAFTERS))
def test_finished_rows_leave_the_batch_and_every_row_equals_plain_decoding(target, draft, ragged_batch,
                                                                           greedy_reference, narrowings, method):
    ids, mask = ragged_batch(6, 10, seed=7)
    eos, ref = _staggered_eos(target, greedy_reference, ids, mask, 30)
    narrowings.clear()
    out = SpeculativeGenerator(target, DRAFTERS[method](target, draft)).generate(
        ids, attention_mask=mask, max_new_tokens=30, eos_token_id=eos, pad_token_id=0)
    assert torch.equal(out.sequences, ref), method
    assert narrowings and min(narrowings) < 6, f"{method}: no row left the batch"
    # the stats stay per row of the call: each row's emitted tokens add up to what it generated
    hit = torch.isin(ref[:, ids.shape[1]:], torch.tensor(eos))
    generated = torch.where(hit.any(1), hit.long().argmax(1) + 1, 30)  # up to and including its EOS
    assert [sum(a) for a in out.stats.accept_lengths] == generated.tolist()
    assert out.stats.new_tokens == sum(sum(a) for a in out.stats.accept_lengths)


def test_a_batch_whose_rows_end_together_is_never_narrowed(target, draft, ragged_batch, greedy_reference,
                                                          narrowings):
    ids, mask = ragged_batch(4, 9, seed=2)
    ref = greedy_reference(target, ids, 12, attention_mask=mask)
    out = SpeculativeGenerator(target, NoDrafter()).generate(ids, attention_mask=mask, max_new_tokens=12,
                                                             eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences, ref)
    assert narrowings == []


def test_a_drafter_that_does_not_say_it_can_drop_rows_keeps_them(target, draft, ragged_batch, greedy_reference,
                                                                narrowings):
    """A subclass may hold per-row state its parent's select_rows does not know: it keeps every row unless it says
    otherwise (``drops_rows`` is not inherited)."""

    class Subclassed(type(build_drafter("chain", draft, num_tokens=4))):
        pass

    assert not Subclassed.drops_rows and not issubclass(Drafter, Subclassed)
    ids, mask = ragged_batch(6, 10, seed=7)
    eos, ref = _staggered_eos(target, greedy_reference, ids, mask, 30)
    narrowings.clear()
    out = SpeculativeGenerator(target, Subclassed(draft, num_tokens=4)).generate(
        ids, attention_mask=mask, max_new_tokens=30, eos_token_id=eos, pad_token_id=0)
    assert torch.equal(out.sequences, ref)
    assert narrowings == []


@pytest.mark.parametrize("method,compress", [("msd", None), ("flash", 2)])
def test_vlm_rows_leave_the_batch_with_their_pictures(greedy_reference, narrowings, method, compress):
    """A LLaVA-layout batch: the drafter's prompt pass runs after rows were dropped only if it was deferred; the
    pictures' embeddings (row-major over the image tokens) are narrowed row by row either way."""
    model = llava_hf_like()
    ids, mask, pixels = batch_inputs()
    P = ids.shape[1]
    free = greedy_reference(model, ids, 16, attention_mask=mask, pixel_values=pixels)
    eos = [int(free[0, P + 1])]
    ref = greedy_reference(model, ids, 16, attention_mask=mask, pixel_values=pixels, eos_token_id=eos)
    extra = dict(compress_tokens=3, sar_tokens=3) if method == "flash" else {}
    torch.manual_seed(3)
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(model, method, **extra))
    narrowings.clear()
    out = SpeculativeGenerator(model, FeatureDrafter(net, model, compress_to=compress)).generate(
        ids, attention_mask=mask, pixel_values=pixels, max_new_tokens=16, eos_token_id=eos, pad_token_id=0)
    assert torch.equal(out.sequences, ref), method
    if ids.shape[0] > 1 and bool((ref[:, P:] == eos[0]).any(1).sum() * 2 >= ids.shape[0]):
        assert narrowings, method


def test_the_context_keeps_each_kept_rows_own_pictures():
    """``image_embeds`` lists every image token's embedding row-major over the batch: narrowing keeps each kept
    row's own run of them, in order (rows with different numbers of image tokens)."""
    image = 9
    prompt = torch.tensor([[image, image, 5, 6], [7, image, 8, 8], [image, image, image, 4]])
    embeds = torch.arange(6, dtype=torch.float32)[:, None].expand(6, 3).clone()  # row 0: 0, 1; row 1: 2; row 2: 3..5
    state = DecodeState(prompt.clone(), torch.full((3,), 4), torch.zeros(3, dtype=torch.long), 4,
                        torch.tensor([True, False, True]), SamplingConfig())
    context = DraftContext(state, prompt, torch.ones_like(prompt), 10, image_token_id=image,
                           hidden=torch.arange(3.0)[:, None, None].expand(3, 4, 2).clone(), image_embeds=embeds)
    keep = torch.tensor([0, 2])
    state.select_rows(keep)
    context.select_rows(keep)
    assert context.image_embeds[:, 0].tolist() == [0, 1, 3, 4, 5]
    assert torch.equal(context.prompt_ids, prompt[[0, 2]]) and context.hidden[:, 0, 0].tolist() == [0, 2]
    assert state.batch_size == 2 and state.active.tolist() == [True, True]
    assert int(context.image_mask.sum()) == context.image_embeds.shape[0]


@pytest.mark.parametrize("family", ["qwen2-vl", "gemma3"])
def test_m_rope_and_sliding_window_rows_leave_the_batch(greedy_reference, narrowings, family):
    """Qwen2-VL's per-row M-RoPE shift and Gemma3's sliding-window layers are narrowed with the cache: a DFlash
    DDTree on a ragged pair whose first row stops early (at a token only it emits) stays exact."""
    target, ids, mask, inputs, _ = CASES[family]()
    P = ids.shape[1]
    free = greedy_reference(target, ids, 14, attention_mask=mask, **inputs)
    eos = [next(int(t) for t in free[0, P + 1:] if int(t) not in free[1, P:].tolist())]  # row 0's alone
    ref = greedy_reference(target, ids, 14, attention_mask=mask, eos_token_id=eos, **inputs)
    narrowings.clear()
    out = SpeculativeGenerator(target, DFlashDrafter(make_net(target), target, tree_nodes=6, top_k=2)).generate(
        ids, attention_mask=mask, max_new_tokens=14, eos_token_id=eos, pad_token_id=0, **inputs)
    assert torch.equal(out.sequences, ref), family
    assert not bool((ref[1, P:] == eos[0]).any())  # the second row runs on, so the first one left the batch
    assert narrowings, family
