"""The engine on a GPU: every text and VLM drafter kind is exact under greedy with its models and inputs on CUDA
(ragged batches, trees, the adaptive policy), and the tree kernels take their Triton path there. Skipped without
a CUDA device; run on one with ``python -m pytest tests/core/test_cuda.py``.

Exactness on a GPU is the stronger check of the two: its matrix kernels pick tiling by shape, so a verify
forward over a tree of T positions and plain decoding's one-position forward round differently unless the engine
keeps them apart where it must (the engine compares argmaxes of the target's own logits, never a drafter's)."""

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters.adaptive import AdaptiveDrafter
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.dflash_model import DFlashDraftModel, make_config
from mmspec.drafters.feature import FeatureDrafter
from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
from mmspec.registry import build_drafter
from mmspec.tiny import tiny_model
from tests.drafters.test_feature import batch_inputs, llava_hf_like
from tests.tiny_models import VOCAB, sharpen

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA = "cuda"


@pytest.fixture(scope="module")
def text_target():
    return sharpen(tiny_model("llama", seed=0, vocab_size=VOCAB, num_layers=4), seed=0).to(CUDA)


@pytest.fixture(scope="module")
def text_draft():
    return sharpen(tiny_model("llama", seed=1, vocab_size=VOCAB, num_layers=1), seed=1).to(CUDA)


def _dflash(target, **kw):
    torch.manual_seed(3)
    net = DFlashDraftModel(make_config(target.config, num_layers=2, block_size=6, mask_token_id=2))
    return DFlashDrafter(sharpen(net, seed=3).to(CUDA), target, **kw)


def _eagle(target):
    torch.manual_seed(3)
    return FeatureDrafter(FeatureDraftModel(FeatureDrafterConfig.for_target(target, "eagle")).to(CUDA), target,
                          num_tokens=5)


TEXT_DRAFTERS = {
    "chain": lambda t, d: build_drafter("chain", d, num_tokens=5),
    "tree": lambda t, d: build_drafter("tree", d),
    "prompt-lookup": lambda t, d: build_drafter("prompt-lookup", None),
    "dflash": lambda t, d: _dflash(t, num_tokens=5),
    "dflash-tree": lambda t, d: _dflash(t, tree_nodes=7, top_k=3),
    "eagle": lambda t, d: _eagle(t),
    "chain-auto": lambda t, d: AdaptiveDrafter(build_drafter("chain", d, num_tokens=5)),
}


@pytest.mark.parametrize("method", list(TEXT_DRAFTERS))
def test_text_drafters_are_exact_on_cuda(text_target, text_draft, ragged_batch, greedy_reference, method):
    ids, mask = ragged_batch(3, 9, seed=4)
    ids, mask = ids.to(CUDA), mask.to(CUDA)
    ref = greedy_reference(text_target, ids, 24, attention_mask=mask)
    out = SpeculativeGenerator(text_target, TEXT_DRAFTERS[method](text_target, text_draft)).generate(
        ids, attention_mask=mask, max_new_tokens=24, eos_token_id=[])
    assert out.sequences.device.type == "cuda"
    assert torch.equal(out.sequences, ref), method


@pytest.mark.parametrize("method,compress", [("msd", None), ("eagle", None), ("flash", 2)])
def test_vlm_feature_drafters_are_exact_on_cuda(greedy_reference, method, compress):
    target = llava_hf_like().to(CUDA)
    ids, mask, pixels = (t.to(CUDA) for t in batch_inputs())
    extra = dict(compress_tokens=3, sar_tokens=3) if method == "flash" else {}
    torch.manual_seed(3)
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, method, **extra)).to(CUDA)
    drafter = FeatureDrafter(net, target, compress_to=compress)
    out = SpeculativeGenerator(target, drafter).generate(ids, attention_mask=mask, pixel_values=pixels,
                                                         max_new_tokens=12, eos_token_id=[], pad_token_id=0)
    ref = greedy_reference(target, ids, 12, attention_mask=mask, pixel_values=pixels)
    assert torch.equal(out.sequences, ref), method


def test_sampling_runs_on_cuda_with_a_seeded_generator(text_target, text_draft, ragged_batch):
    """Sampling with a CUDA model: the same seed gives the same output (the engine draws on the model's device)."""
    ids, mask = (t.to(CUDA) for t in ragged_batch(2, 7, seed=5))
    gen = SpeculativeGenerator(text_target, build_drafter("chain", text_draft, num_tokens=4))
    runs = [gen.generate(ids, attention_mask=mask, max_new_tokens=16, eos_token_id=[], do_sample=True,
                         temperature=1.0, generator=torch.Generator(CUDA).manual_seed(7)).sequences
            for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
