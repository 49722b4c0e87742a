"""The cost model beside every speedup, and the own-engine plain baseline (mmspec's loop, no drafter)."""

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters import NoDrafter
from mmspec.eval.cost_model import cost_model, cost_table


def _rec(method, item, seconds, new, forwards=None, verify=None, prefill=None, draft=None):
    return {"method": method, "item": item, "seconds": seconds, "new_tokens": new, "target_forwards": forwards,
            "verify_time": verify, "prefill_time": prefill, "draft_time": draft}


def test_cost_model_formula_on_synthetic_records():
    records = [
        _rec("plain", 0, 1.0, 11), _rec("plain", 1, 1.0, 11),
        # own engine: 10 decode steps of 0.1 s each + 0.2 s prefill, 1.25 s in all -> 0.8x HF plain
        _rec("mmspec-plain", 0, 1.25, 11, 11, 1.2, 0.2, 0.0), _rec("mmspec-plain", 1, 1.25, 11, 11, 1.2, 0.2, 0.0),
        # a method: 4 steps emitting 10 tokens, each step verify 0.15 s and draft 0.05 s
        _rec("deer", 0, 0.5, 11, 5, 0.8, 0.2, 0.2), _rec("deer", 1, 0.5, 11, 5, 0.8, 0.2, 0.2),
    ]
    rows = {r["method"]: r for r in cost_model(records)}
    assert set(rows) == {"mmspec-plain", "deer"}
    own, deer = rows["mmspec-plain"], rows["deer"]
    assert own["target_step_ms"] == pytest.approx(100.0)
    assert own["own_plain_vs_hf"] == pytest.approx(0.8)
    assert deer["tau_step"] == pytest.approx(2.5)
    assert deer["verify_cost"] == pytest.approx(1.5)
    assert deer["draft_cost"] == pytest.approx(0.5)
    assert deer["predicted_vs_own_plain"] == pytest.approx(2.5 / 2.0)
    assert deer["predicted_speedup"] == pytest.approx(1.25 * 0.8)
    assert deer["measured_speedup"] == pytest.approx(2.0)
    lines = cost_table(list(rows.values()))
    assert any("| deer | 2.50 | 1.50 | 0.50 | 1.00× | 2.00× |" in ln for ln in lines)


def test_no_baseline_no_cost_model():
    assert cost_model([_rec("plain", 0, 1.0, 5), _rec("deer", 0, 0.5, 5, 2, 0.3, 0.1, 0.1)]) == []
    assert cost_table([]) == []


def test_own_engine_plain_is_exact_and_one_token_per_forward(tiny_pair, greedy_reference):
    target, _ = tiny_pair
    ids = torch.randint(3, 96, (2, 7), generator=torch.Generator().manual_seed(0))
    out = SpeculativeGenerator(target, NoDrafter()).generate(ids, max_new_tokens=9, eos_token_id=[])
    ref = greedy_reference(target, ids, 9, attention_mask=torch.ones_like(ids))
    assert torch.equal(out.sequences, ref)
    assert out.stats.target_forwards == 9 and out.stats.mean_accepted_tokens == 1.0
    assert 0 < out.stats.prefill_time <= out.stats.verify_time


def test_the_image_suite_reports_its_cost_model(tmp_path):
    """The image suite times mmspec's loop without drafts (its own-engine baseline) beside plain AR, so its report
    carries the cost model too, against plain AR."""
    import json

    from mmspec.cli import main

    out = tmp_path / "run"
    assert main(["eval", "--suite", "image", "--classes", "0", "--methods", "mmspec-plain,spec-chain", "--no-quality",
                 "--warmup", "0", "--out", str(out), "--no-progress", "--no-plots"]) == 0
    suite = json.loads((out / "results.json").read_text())["suites"]["image"]
    rows = {r["method"]: r for r in suite["cost_model"]}
    assert set(rows) == {"mmspec-plain", "spec-chain"}
    assert rows["mmspec-plain"]["tau_step"] == 1.0 and rows["mmspec-plain"]["verify_cost"] == 1.0
    assert rows["spec-chain"]["draft_cost"] > 0 and rows["spec-chain"]["tau_step"] >= 1.0
    report = (out / "report.md").read_text()
    assert "the base method `ar`" in report
    assert "| mmspec-plain | **" not in report  # the baseline is never the summary's "fastest method"


def test_no_drafter_runs_only_the_lossless_loop():
    """``drafter="none"`` is the loop's own plain sampling (τ = 1); a relaxed method without drafts is refused."""
    import pytest

    from mmspec.image_gen import NO_DRAFTER, ImageGenerator

    gen = ImageGenerator.from_zoo()
    out = gen.generate([0], method="spec", drafter=NO_DRAFTER, seed=0)
    assert out.stats.mean_accepted_tokens == 1.0 and out.codes.shape[1] == gen.layout.num_codes
    with pytest.raises(ValueError, match="method 'spec' only"):
        gen.generate([0], method="lantern++", drafter=NO_DRAFTER, seed=0)
