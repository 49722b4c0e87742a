"""Setup for every test (offline Hugging Face, one torch thread) and the fixtures many folders share: a tiny
target/drafter pair, a ragged left-padded batch, and HF's own greedy decoding as the reference output."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.tiny_models import VOCAB, text_pair  # noqa: E402

# tiny models: one intra-op thread is as fast and immune to oversubscription stalls
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny_pair(request):
    """``(target, drafter)`` from :func:`tests.tiny_models.text_pair`: Llama, unless the test parametrises
    ``tiny_pair`` indirectly with another architecture. One pair per module, so tests must leave it unchanged."""
    return text_pair(getattr(request, "param", "llama"))


def _ragged_batch(batch, length, seed, vocab=VOCAB, pads=None):
    """``(ids, mask)``: random tokens in ``[3, vocab)``, row ``b`` left-padded (id 0, mask 0) over its first
    ``pads[b]`` positions; by default ``5 * b mod (length - 2)``, so the rows differ and each keeps 3 tokens or more."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    for b in range(batch):
        pad = (b * 5) % max(length - 2, 1) if pads is None else pads[b]
        mask[b, :pad] = 0
    ids[mask == 0] = 0
    return ids, mask


@pytest.fixture(scope="session")
def ragged_batch():
    """The builder ``ragged_batch(batch, length, seed, vocab=96, pads=None) -> (ids, mask)``."""
    return _ragged_batch


def _greedy_reference(model, input_ids, max_new_tokens, eos_token_id=None, pad_token_id=0, **inputs):
    """``model.generate(do_sample=False)``: what mmspec's greedy output must equal token for token. EOS is off
    unless given; ``inputs`` are the model's other inputs (``attention_mask``, ``pixel_values``, ...)."""
    return model.generate(input_ids=input_ids, do_sample=False, max_new_tokens=max_new_tokens,
                          eos_token_id=eos_token_id, pad_token_id=pad_token_id, **inputs)


@pytest.fixture(scope="session")
def greedy_reference():
    """The function ``greedy_reference(model, input_ids, max_new_tokens, eos_token_id=None, pad_token_id=0,
    **inputs)``."""
    return _greedy_reference
