"""The image suite's Fréchet distance (torchmetrics with precomputed classifier features) against closed forms."""

import pytest
import torch

from mmspec.eval.image_quality import frechet_distance


def _rows(n=400, d=12, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed)).double()


def test_identical_sets_are_at_distance_zero():
    a = _rows()
    assert frechet_distance(a, a) == pytest.approx(0.0, abs=1e-8)


def test_a_shift_adds_its_squared_length():
    a = _rows()
    shift = torch.linspace(-1.0, 2.0, a.shape[1]).double()
    assert frechet_distance(a, a + shift) == pytest.approx(float((shift ** 2).sum()), rel=1e-9)


def test_a_scaled_copy_matches_the_trace_term():
    # same mean, covariance s^2 Σ: FD = Tr(Σ + s^2 Σ - 2 s Σ) = (1 - s)^2 Tr(Σ)
    a = _rows()
    a = a - a.mean(0)
    s = 1.7
    trace = float(torch.cov(a.T).trace())
    assert frechet_distance(a, s * a) == pytest.approx((1 - s) ** 2 * trace, rel=1e-7)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="width"):
        frechet_distance(_rows(d=4), _rows(d=5))
    with pytest.raises(ValueError, match="two pictures"):
        frechet_distance(_rows(n=1), _rows())
