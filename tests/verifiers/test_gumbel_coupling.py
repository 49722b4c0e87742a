"""The Gumbel coupling (mmspec.verifiers.coupling): plain sampling under it follows the target's distribution
(chi-square, as test_sampling_lossless does), every drafter gives plain sampling's very tokens for a seed (ragged
batches, rows finishing early), a drafter that is the target itself has every draft kept (its noise is the
verifier's, position by position), and the refusals."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from scipy import stats  # noqa: E402

from mmspec import SpeculativeGenerator, TreeTemplate  # noqa: E402
from mmspec.drafters import AutoregressiveDrafter, NoDrafter, PromptLookupDrafter  # noqa: E402
from mmspec.drafters.dflash import DFlashDrafter  # noqa: E402
from mmspec.drafters.dflash_model import DFlashDraftModel, make_config  # noqa: E402
from mmspec.drafters.feature import FeatureDrafter  # noqa: E402
from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel  # noqa: E402
from mmspec.tiny import tiny_model  # noqa: E402
from mmspec.verifiers.coupling import GumbelNoise, check_coupling  # noqa: E402
from mmspec.verifiers.relaxed import Relaxation  # noqa: E402
from tests.tiny_models import VOCAB, sharpen, text_pair  # noqa: E402

ALPHA = 1e-4  # per chi-square check, as in test_sampling_lossless


@pytest.fixture(scope="module")
def pair():
    return text_pair()


def _chisquare_ok(observed: np.ndarray, probs: np.ndarray) -> bool:
    """Pearson's test of counts against exact probabilities, cells of expected count < 5 pooled."""
    n = observed.sum()
    expected = probs * n
    if (observed[probs == 0] > 0).any():
        return False
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue > ALPHA


def test_plain_sampling_under_the_coupling_follows_the_target(pair):
    target, _ = pair
    rows = 3000
    ids = torch.tensor([[5, 17, 33, 2]]).repeat(rows, 1)
    gen = torch.Generator().manual_seed(11)
    out = SpeculativeGenerator(target, NoDrafter()).generate(ids, max_new_tokens=2, do_sample=True, generator=gen,
                                                             coupling="gumbel", eos_token_id=[])
    first, second = out.sequences[:, 4], out.sequences[:, 5]
    with torch.no_grad():
        p1 = torch.softmax(target(ids[:1]).logits[0, -1].double(), -1).numpy()
        common = int(torch.bincount(first, minlength=VOCAB).argmax())
        p2 = torch.softmax(target(torch.tensor([[5, 17, 33, 2, common]])).logits[0, -1].double(), -1).numpy()
    assert _chisquare_ok(np.bincount(first.numpy(), minlength=VOCAB), p1)  # the prefill's token
    after = second[first == common]  # a verify step's token, given the first
    assert after.numel() > 200
    assert _chisquare_ok(np.bincount(after.numpy(), minlength=VOCAB), p2)


def _dflash(target, **kw):
    torch.manual_seed(3)
    net = DFlashDraftModel(make_config(target.config, num_layers=2, block_size=6, mask_token_id=2))
    return DFlashDrafter(sharpen(net, seed=3), target, **kw)


def _eagle(target, **kw):
    torch.manual_seed(4)
    net = sharpen(FeatureDraftModel(FeatureDrafterConfig.for_target(target, "eagle")), seed=4)
    return FeatureDrafter(net, target, **kw)


DRAFTERS = {
    "ar chain": lambda t, d: AutoregressiveDrafter(d, num_tokens=4),
    "ar static tree": lambda t, d: AutoregressiveDrafter(d, tree=TreeTemplate.full((2, 2, 1))),
    "ar dynamic tree": lambda t, d: AutoregressiveDrafter(d, tree="dynamic", num_tokens=4, top_k=3, num_nodes=10),
    "prompt lookup": lambda t, d: PromptLookupDrafter(num_tokens=4),
    "dflash chain": lambda t, d: _dflash(t, num_tokens=5),
    "dflash ddtree": lambda t, d: _dflash(t, tree_nodes=7, top_k=3),
    "dflash ddtree reusing blocks": lambda t, d: _dflash(t, tree_nodes=7, top_k=3, reuse_block=2),
    "dflash chain reusing blocks": lambda t, d: _dflash(t, num_tokens=5, reuse_block=1),
    "eagle chain": lambda t, d: _eagle(t, num_tokens=3),
}


@pytest.mark.parametrize("name", list(DRAFTERS))
def test_every_drafter_gives_plain_sampling_tokens(pair, ragged_batch, name):
    target, draft = pair
    ids, mask = ragged_batch(3, 9, seed=4)
    kw = dict(attention_mask=mask, max_new_tokens=24, do_sample=True, temperature=0.9, coupling="gumbel",
              eos_token_id=[7])  # rows end at different steps: the loop drops them, the noise follows its rows
    ref = SpeculativeGenerator(target, NoDrafter()).generate(ids, generator=torch.Generator().manual_seed(5), **kw)
    out = SpeculativeGenerator(target, DRAFTERS[name](target, draft)).generate(
        ids, generator=torch.Generator().manual_seed(5), **kw)
    assert torch.equal(out.sequences, ref.sequences)


def test_the_target_as_its_own_drafter_has_every_draft_kept(pair):
    """The drafter's noise for depth d is the verifier's for the node at depth d: a drafter whose q is the target's
    p proposes the target's own Gumbel-max tokens, all kept (any shift of one position would reject most)."""
    target, _ = pair
    ids = torch.tensor([[5, 17, 33, 2, 9]])
    out = SpeculativeGenerator(target, AutoregressiveDrafter(target, num_tokens=4)).generate(
        ids, max_new_tokens=26, do_sample=True, coupling="gumbel", generator=torch.Generator().manual_seed(2),
        eos_token_id=[])
    lengths = out.stats.accept_lengths[0][1:]  # (the first entry: the prefill's token)
    assert lengths[:-1] == [5] * (len(lengths) - 1)


def test_noise_is_fixed_per_position_and_row():
    """Drawn in chunks for the whole batch: the noise of a position does not depend on how far a call reached when
    it was asked for, nor on which rows are still held."""
    a = GumbelNoise.for_call(3, 10, torch.Generator().manual_seed(0), "cpu")
    b = GumbelNoise.for_call(3, 10, torch.Generator().manual_seed(0), "cpu")
    far = a.at(torch.tensor([[70]] * 3))  # draws three chunks at once
    near = b.at(torch.tensor([[1]] * 3))
    b.select_rows(torch.tensor([2]))
    assert torch.equal(b.at(torch.tensor([[70]]))[0], far[2])
    assert torch.equal(a.at(torch.tensor([[1]] * 3)), near)


def test_refusals(pair):
    target, draft = pair
    ids = torch.tensor([[5, 17, 33]])
    with pytest.raises(ValueError, match="coupling must be one of"):
        SpeculativeGenerator(target, NoDrafter()).generate(ids, do_sample=True, coupling="gumble")
    relaxed = SpeculativeGenerator(target, AutoregressiveDrafter(draft), relaxation=Relaxation(
        torch.randint(0, VOCAB, (VOCAB, 4)), delta=0.1))
    with pytest.raises(ValueError, match="LANTERN"):
        relaxed.generate(ids, do_sample=True, coupling="gumbel")
    assert check_coupling("gumbel", do_sample=False) == "rejection"  # greedy: a sampling setting, ignored
    greedy = SpeculativeGenerator(target, AutoregressiveDrafter(draft)).generate(ids, max_new_tokens=8,
                                                                                 coupling="gumbel")
    plain = SpeculativeGenerator(target, NoDrafter()).generate(ids, max_new_tokens=8)
    assert torch.equal(greedy.sequences, plain.sequences)
    for bad in (0, 6, True, 2.0):
        with pytest.raises(ValueError, match="reuse_block"):
            _dflash(target, reuse_block=bad)


def test_reused_blocks_stay_exact_under_greedy(pair, ragged_batch, greedy_reference):
    target, _ = pair
    ids, mask = ragged_batch(3, 9, seed=6)
    ref = greedy_reference(target, ids, 20, attention_mask=mask)
    for kw in (dict(num_tokens=5, reuse_block=2), dict(tree_nodes=7, top_k=3, reuse_block=1)):
        out = SpeculativeGenerator(target, _dflash(target, **kw)).generate(ids, attention_mask=mask,
                                                                            max_new_tokens=20, eos_token_id=[])
        assert torch.equal(out.sequences, ref)


def test_a_bigger_tiny_target_keeps_the_coupling_exact():
    """A four-layer target of another family (Qwen2) with its DFlash DDTree and reused blocks."""
    target = sharpen(tiny_model("qwen2", seed=0, vocab_size=VOCAB, num_layers=4), seed=0)
    ids = torch.tensor([[3, 8, 21, 40, 11, 9]])
    kw = dict(max_new_tokens=30, do_sample=True, coupling="gumbel", eos_token_id=[])
    ref = SpeculativeGenerator(target, NoDrafter()).generate(ids, generator=torch.Generator().manual_seed(9), **kw)
    out = SpeculativeGenerator(target, _dflash(target, tree_nodes=9, top_k=3, reuse_block=2)).generate(
        ids, generator=torch.Generator().manual_seed(9), **kw)
    assert torch.equal(out.sequences, ref.sequences)


def test_the_text_pipeline_takes_the_coupling():
    """zoo:code-target's pipeline: its block drafter under the coupling gives mmspec-plain's tokens for a seed; HF's
    own generate (method "plain") has no coupling and refuses it; greedy leaves it unapplied."""
    import mmspec

    pipe = mmspec.pipeline("zoo:code-target", method="dflash")
    kw = dict(max_new_tokens=24, do_sample=True, seed=3, coupling="gumbel")
    out = pipe.generate("def parse_args(argv):\n", **kw)
    ref = pipe.generate("def parse_args(argv):\n", method="mmspec-plain", **kw)
    assert torch.equal(out.sequences, ref.sequences) and out.config["coupling"] == "gumbel"
    with pytest.raises(ValueError, match="mmspec-plain"):
        pipe.generate("def f(x):\n", method="plain", **kw)
    with pytest.raises(ValueError, match="coupling must be one of"):
        pipe.generate("def f(x):\n", do_sample=True, coupling="exact")
    assert "coupling" not in pipe.generate("def f(x):\n", max_new_tokens=4, coupling="gumbel").config


def test_released_noise_keeps_the_rest():
    """Chunks every generating row has passed are dropped; the positions kept read what they read before."""
    a = GumbelNoise.for_call(2, 7, torch.Generator().manual_seed(1), "cpu")
    b = GumbelNoise.for_call(2, 7, torch.Generator().manual_seed(1), "cpu")
    idx = torch.tensor([[100, 101], [130, 131]])
    ref = a.at(idx)
    b.at(torch.tensor([[5], [6]]))
    b.release_before(99)
    assert b.base == 32 and b.drawn.shape[1] == 0  # (only what was drawn is dropped: the stream stays in order)
    assert torch.equal(b.at(idx), ref)
    b.release_before(130)
    assert b.base == 128 and torch.equal(b.at(idx)[1], ref[1])
