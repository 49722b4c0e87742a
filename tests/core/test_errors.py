"""Bad input gets a clear ValueError, never a silent wrong answer."""

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter
from mmspec.tiny import tiny_model


@pytest.fixture(scope="module")
def target():
    return tiny_model("llama", seed=0, vocab_size=64, max_positions=64)


def gen(target, **kw):
    return SpeculativeGenerator(target, PromptLookupDrafter(num_tokens=3), **kw)


def test_vocabulary_mismatch(target):
    other = tiny_model("llama", seed=1, vocab_size=80)
    with pytest.raises(ValueError, match="vocabulary"):
        SpeculativeGenerator(target, AutoregressiveDrafter(other))


def test_empty_prompt(target):
    with pytest.raises(ValueError, match="empty prompt"):
        gen(target).generate(torch.zeros(1, 0, dtype=torch.long), max_new_tokens=4)
    ids = torch.tensor([[5, 6], [0, 0]])
    with pytest.raises(ValueError, match="empty prompt"):
        gen(target).generate(ids, attention_mask=torch.tensor([[1, 1], [0, 0]]), max_new_tokens=4)


@pytest.mark.parametrize("n", [0, -3])
def test_max_new_tokens(target, n):
    with pytest.raises(ValueError, match="max_new_tokens"):
        gen(target).generate(torch.tensor([[5, 6]]), max_new_tokens=n)


def test_longer_than_cache(target):
    with pytest.raises(ValueError, match="longer than the cache"):
        gen(target, max_cache_len=16).generate(torch.tensor([[5, 6, 7]]), max_new_tokens=20)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        gen(target).generate(torch.tensor([[5, 6, 7]]), max_new_tokens=100)


def test_mismatched_attention_mask(target):
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    with pytest.raises(ValueError, match="shape"):
        gen(target).generate(ids, attention_mask=torch.ones(2, 2, dtype=torch.long), max_new_tokens=2)
    with pytest.raises(ValueError, match="left-padded"):
        gen(target).generate(ids, attention_mask=torch.tensor([[1, 1, 0], [1, 1, 1]]), max_new_tokens=2)
    with pytest.raises(ValueError, match="only 0 and 1"):
        gen(target).generate(ids, attention_mask=torch.tensor([[2, 1, 1], [1, 1, 1]]), max_new_tokens=2)


def test_out_of_vocabulary_ids(target):
    with pytest.raises(ValueError, match="vocabulary"):
        gen(target).generate(torch.tensor([[5, 640]]), max_new_tokens=2)


def test_bad_sampling_parameters(target):
    with pytest.raises(ValueError, match="temperature"):
        gen(target).generate(torch.tensor([[5, 6]]), max_new_tokens=2, do_sample=True, temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        gen(target).generate(torch.tensor([[5, 6]]), max_new_tokens=2, do_sample=True, top_p=1.5)


def test_bad_drafter_settings(target):
    with pytest.raises(ValueError):
        AutoregressiveDrafter(target, num_tokens=0)
    with pytest.raises(ValueError):
        AutoregressiveDrafter(target, tree="bushy")
    with pytest.raises(ValueError):
        PromptLookupDrafter(num_tokens=0)
