"""The bonus-token draw of the sampling verifier (``acceptance.sample_rows``, an inverse-CDF draw in place of
``torch.multinomial``): it must follow the given distribution and never return a token of mass zero, also at
the ends of the uniform's range."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402

from mmspec.verifiers import acceptance  # noqa: E402
from mmspec.verifiers.acceptance import sample_rows  # noqa: E402
from tests.verifiers.test_sampling_lossless import ALPHA, chisq_pvalue  # noqa: E402

# unnormalised, float32, zeros first, inside and last (the draw must skip all three)
WEIGHTS = torch.tensor([0.0, 3.0, 0.5, 0.0, 1.5, 5.0, 0.0, 0.0], dtype=torch.float32)


def test_draws_follow_the_distribution():
    n = 40_000
    got = sample_rows(WEIGHTS.expand(n, -1), torch.Generator().manual_seed(11))
    counts = torch.bincount(got, minlength=WEIGHTS.numel()).numpy()
    assert chisq_pvalue(counts, WEIGHTS.double().numpy()) > ALPHA  # also fails on any draw of a zero-mass token


def test_rows_are_drawn_from_their_own_distribution():
    probs = torch.eye(5)[[3, 0, 4, 1]] * 0.7  # one token of mass per row
    assert sample_rows(probs, torch.Generator().manual_seed(0)).tolist() == [3, 0, 4, 1]


def test_extreme_uniforms_land_on_tokens_with_mass(monkeypatch):
    real_rand = torch.rand
    for u, expected in ((0.0, 1), (1.0, 5)):  # 1.0: u · total rounded up to the total itself
        monkeypatch.setattr(acceptance.torch, "rand",
                            lambda *a, u=u, **k: torch.full_like(real_rand(*a, **k), u))
        assert sample_rows(WEIGHTS[None]).tolist() == [expected]
