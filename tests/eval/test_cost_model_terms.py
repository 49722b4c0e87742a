"""The cost model's terms (issue 42, item 2): target and drafter prefill, per-step verify / draft / bookkeeping
costs and the residual outside the generator; the prediction takes the engine's part (target prefill, bookkeeping
per step) from the plain baseline and the method's own part from the method."""

import pytest

from mmspec.eval import run_bench
from mmspec.eval.cost_model import SHARES, cost_model, cost_table


def _rec(method, item, seconds, new=11, forwards=None, **times):
    return {"method": method, "item": item, "seconds": seconds, "new_tokens": new, "target_forwards": forwards,
            **times}


def _records(with_drafter_prefill=True, residual=0.0, rounds=None):
    """Per prompt: own plain = 0.2 s prefill + 10 steps of 0.1 s verify and 0.01 s bookkeeping (1.3 s); the
    method = 1 s target prefill, 0.5 s drafter prefill, 10 steps of 0.15 s verify + 0.05 s drafting + 0.02 s
    bookkeeping (3.7 s in the generator), plus ``residual`` seconds outside it."""
    dp = {"drafter_prefill_time": 0.5} if with_drafter_prefill else {}
    recs = []
    for i in range(2):
        recs += [_rec("plain", i, 2.6),
                 _rec("mmspec-plain", i, 1.3, 11, 11, prefill_time=0.2, verify_time=1.2, draft_time=0.0,
                      drafter_prefill_time=0.0, total_time=1.3),
                 _rec("spec", i, 3.7 + residual, 21, 11, prefill_time=1.0, verify_time=2.5, draft_time=1.0,
                      total_time=3.7, **dp)]
    if rounds is not None:
        for r in recs:
            r["round_seconds"] = [r["seconds"] * f for f in rounds]
    return recs


def test_every_term_on_synthetic_records():
    rows = {r["method"]: r for r in cost_model(_records())}
    assert set(rows) == {"mmspec-plain", "spec"}
    own, spec = rows["mmspec-plain"], rows["spec"]
    assert own["target_step_ms"] == pytest.approx(100.0)
    assert own["verify_cost"] == pytest.approx(1.0) and own["overhead_cost"] == pytest.approx(0.1)
    assert own["own_plain_vs_hf"] == pytest.approx(2.0)
    assert spec["steps"] == 20 and spec["tau_step"] == pytest.approx(2.0)
    assert spec["verify_cost"] == pytest.approx(1.5)
    assert spec["draft_cost"] == pytest.approx(0.5)  # the first step's drafting is in the drafter's prefill
    assert spec["overhead_cost"] == pytest.approx(0.2)
    assert spec["prefill_target_s"] == pytest.approx(2.0) and spec["prefill_drafter_s"] == pytest.approx(1.0)
    assert spec["residual_s"] == pytest.approx(0.0, abs=1e-12)
    # predicted: the target's prefill and the bookkeeping per step are the engine's, measured on mmspec-plain;
    # T = 0.2 + 0.5 + 10 * 0.1 * (1.5 + 0.5 + 0.1) = 2.8 s per prompt; measured 3.7 s: this method's prefill
    # (1 s against plain's 0.2 s) and its bookkeeping (0.02 s a step against 0.01 s) are what the model leaves out
    assert spec["predicted_s"] == pytest.approx(5.6)
    assert spec["measured_speedup"] == pytest.approx(2.6 / 3.7)
    assert spec["predicted_speedup"] == pytest.approx(2.6 / 2.8)
    assert spec["prediction_error"] == pytest.approx(3.7 / 2.8 - 1)
    assert spec["predicted_vs_own_plain"] == pytest.approx(1.3 / 2.8)
    assert own["prediction_error"] == pytest.approx(0.0, abs=1e-12)  # the baseline predicts itself
    shares = spec["time_shares"]
    assert set(shares) == set(SHARES) and sum(shares.values()) == pytest.approx(1.0, abs=1e-12)
    assert shares["prefill_target"] == pytest.approx(1.0 / 3.7)
    assert shares["prefill_drafter"] == pytest.approx(0.5 / 3.7)
    assert shares["verify"] == pytest.approx(1.5 / 3.7) and shares["draft"] == pytest.approx(0.5 / 3.7)
    assert shares["bookkeeping"] == pytest.approx(0.2 / 3.7) and shares["other"] == pytest.approx(0.0, abs=1e-12)
    text = "\n".join(cost_table(list(rows.values())))
    assert "Where the time goes" in text and "| spec | 27% | 14% | 41% | 14% | 5% | 0% |" in text
    assert "| +32.1% | 0.20 | 1000.0 / 500.0 |" in text


def test_residual_is_the_prediction_error():
    """Time outside the generator is no term of the model: the prediction misses by its share too."""
    spec = next(r for r in cost_model(_records(residual=0.3)) if r["method"] == "spec")
    assert spec["residual_s"] == pytest.approx(0.6)
    assert spec["prediction_error"] == pytest.approx(4.0 / 2.8 - 1)
    assert spec["time_shares"]["other"] == pytest.approx(0.3 / 4.0)
    assert sum(spec["time_shares"].values()) == pytest.approx(1.0, abs=1e-12)


def test_median_seconds_rescale_the_first_rounds_stats():
    """``seconds`` is the median over rounds, the stats the first round's (here 1.25× slower): the parts are
    scaled to the median, so they still add up to the measured seconds."""
    spec = next(r for r in cost_model(_records(rounds=[1.25, 1.0, 0.9])) if r["method"] == "spec")
    assert spec["prefill_target_s"] == pytest.approx(2.0 / 1.25)
    assert spec["residual_s"] == pytest.approx(7.4 * (1 - 1 / 1.25))
    assert spec["verify_cost"] == pytest.approx(1.5)  # a unit of the same round: ratios are unchanged
    assert sum(spec["time_shares"].values()) == pytest.approx(1.0, abs=1e-12)


def test_records_without_the_new_fields_still_give_a_row():
    """Old JSON (no drafter_prefill_time, no total_time): the drafter's prefill stays in c_d, the bookkeeping in
    the residual, and the row is still there."""
    old = _records(with_drafter_prefill=False)
    for r in old:
        r.pop("total_time", None)
        r.pop("drafter_prefill_time", None)
    rows = {r["method"]: r for r in cost_model(old)}
    spec = rows["spec"]
    assert spec["prefill_drafter_s"] is None and spec["overhead_cost"] is None
    assert spec["draft_cost"] == pytest.approx(1.0)  # 1 s drafting per prompt over 10 steps of 0.1 s
    assert spec["residual_s"] == pytest.approx(2 * 0.2)  # the bookkeeping
    assert sum(spec["time_shares"].values()) == pytest.approx(1.0, abs=1e-12)
    assert any("| spec |" in ln and "n/a" in ln for ln in cost_table(list(rows.values())))


def test_a_real_run_is_fully_accounted_for():
    """Tiny models through the bench: the new stats field is recorded, the shares add up, and since every term is
    measured the baseline's prediction follows its measurement (a consistency check, not a timing threshold)."""
    report = run_bench(model="tiny:llama", draft="tiny:llama", methods=["mmspec-plain", "chain", "prompt-lookup"],
                       num_prompts=2, prompt_length=16, max_new_tokens=16, progress=False)
    rows = {r["method"]: r for r in report["cost_model"]}
    assert set(rows) == {"mmspec-plain", "chain", "prompt-lookup"}
    assert rows["chain"]["prefill_drafter_s"] > 0
    assert rows["mmspec-plain"]["prefill_drafter_s"] < 0.1 * rows["chain"]["prefill_drafter_s"] + 1e-3
    for r in rows.values():
        assert sum(r["time_shares"].values()) == pytest.approx(1.0, abs=1e-6), r["method"]
        assert r["prediction_error"] is not None and abs(r["prediction_error"]) < 1.0, r["method"]
        assert r["overhead_cost"] is not None and r["prefill_target_s"] > 0
    # the baseline's own prediction misses only by the time outside the generator
    assert abs(rows["mmspec-plain"]["prediction_error"]) < 0.05, rows["mmspec-plain"]["time_shares"]
    from mmspec.eval.bench import to_markdown
    assert "Where the time goes" in to_markdown(report)


def test_stats_carry_the_drafter_prefill(tiny_pair):
    import torch

    from mmspec import SpeculativeGenerator
    from mmspec.drafters import NoDrafter
    from mmspec.eval.bench import prompt_record
    from mmspec.registry import build_drafter

    target, draft = tiny_pair
    ids = torch.randint(3, 96, (1, 9), generator=torch.Generator().manual_seed(0))
    chain = SpeculativeGenerator(target, build_drafter("chain", draft, num_tokens=3)).generate(
        ids, max_new_tokens=12, eos_token_id=[]).stats
    plain = SpeculativeGenerator(target, NoDrafter()).generate(ids, max_new_tokens=12, eos_token_id=[]).stats
    assert 0 < chain.drafter_prefill_time <= chain.draft_time
    assert 0 <= plain.drafter_prefill_time <= plain.draft_time
    assert chain.as_dict()["drafter_prefill_time"] == chain.drafter_prefill_time
    rec = prompt_record(chain.total_time, chain.new_tokens, chain, True)
    assert rec["drafter_prefill_time"] == chain.drafter_prefill_time and rec["total_time"] == chain.total_time
    assert prompt_record(1.0, 5, None, True)["drafter_prefill_time"] is None
