"""The image suite's Fréchet distance (torchmetrics with precomputed classifier features) against closed forms."""

import pytest
import torch

from mmspec.eval.image_quality import fd_against_spread, frechet_distance
from mmspec.eval.report import quality_table


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


def test_fd_is_placed_against_plain_ars_range():
    spread = [0.28, 0.90, 0.46]
    assert fd_against_spread(0.43, spread) == "inside" and fd_against_spread(0.90, spread) == "inside"
    assert fd_against_spread(1.061, spread) == "+0.16 above"


def test_the_eval_quality_table_says_where_each_fd_lies():
    suite = {"summary": [{"method": "ar", "tau": 1.0, "speedup": 1.0}],
             "quality": {"config": {"images": 96, "per_class": 8}, "ar_run_to_run_fd": 0.55,
                         "ar_run_to_run_fd_all": [0.28, 0.90]},
             "quality_by_method": {"ar": dict(fd_vs_reference=0.69, precision=0.9, recall=0.8, class_fidelity=0.97),
                                   "loose": dict(fd_vs_reference=2.49, precision=0.9, recall=0.9, class_fidelity=0.86,
                                                 max_output_tv=0.9, mean_output_tv=0.25, max_moved_mass=0.2)}}
    lines = quality_table(suite)
    assert "range 0.28–0.90 over 2 seeds" in lines[0]
    rows = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ar ") or line.startswith("| loose ")}
    assert "| 0.690 | inside |" in rows["ar"] and "| 2.490 | +1.59 above |" in rows["loose"]
