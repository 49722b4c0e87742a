"""A report flags speedups that τ cannot explain and timed rounds that disagree, and does not headline them."""

from mmspec.eval.aggregate import summarise
from mmspec.eval.report import headline, method_table


def _rec(method, item, seconds, new=64, forwards=None, rounds=None):
    forwards = forwards if forwards is not None else (new if method == "plain" else None)
    lens = [] if method == "plain" else [new // forwards] * forwards
    return {"method": method, "item": item, "id": str(item), "category": "c", "seconds": seconds, "new_tokens": new,
            "exact": True, "target_forwards": None if method == "plain" else forwards,
            "row_forwards": None if method == "plain" else forwards, "accept_lengths": lens, "draft_time": 0.1,
            "verify_time": 0.2, "prefill_time": 0.01, "round_seconds": rounds or [seconds]}


def _suite(records):
    return {"suites": {"code": {"summary": summarise(records, "plain"), "base": "plain", "target": "t",
                                "lossless": ["chain", "tree"]}}}


def test_a_speedup_beyond_tau_is_flagged_and_not_headlined():
    records = [_rec("plain", i, 2.0) for i in range(2)]
    records += [_rec("chain", i, 0.121, forwards=32) for i in range(2)]  # τ 2.0 but 16.5× faster: impossible
    records += [_rec("tree", i, 1.0, forwards=16) for i in range(2)]  # τ 4.0, 2.0×: plausible
    rows = {r["method"]: r for r in summarise(records, "plain")}
    assert rows["chain"]["flags"] and "exceeds what τ 2.00 allows" in rows["chain"]["flags"][0]
    assert rows["tree"]["flags"] == [] and rows["plain"]["flags"] == []
    line = headline(_suite(records))[2]
    assert "| tree |" in line and "chain" not in line.split("|")[5]
    table = "\n".join(method_table(summarise(records, "plain")))
    assert "| chain ⚠ |" in table and "⚠ chain: speedup 16.53×" in table


def test_disagreeing_rounds_are_flagged():
    records = [_rec("plain", i, 2.0, rounds=[2.0, 2.1]) for i in range(2)]
    records += [_rec("chain", i, 1.0, forwards=16, rounds=[1.0, 2.0]) for i in range(2)]
    rows = {r["method"]: r for r in summarise(records, "plain")}
    assert rows["plain"]["flags"] == []
    assert rows["chain"]["flags"] == ["its 2 timed rounds disagree by 100% (2.00–4.00 s)"]


def test_bench_times_what_it_says():
    """`mmspec bench` on a zoo model uses that family's held-out prompts and says so; prompt lengths apply to
    random-token prompts only; random tiny models are named as such; other routes are pointed elsewhere."""
    import pytest

    from mmspec.eval.bench import bench_model, bench_prompts
    from mmspec.eval.datasets import code_items

    model, tok = bench_model("zoo:code-target")
    prompts, what = bench_prompts("zoo:code-target", tok, 4096, 3, None, 0)
    assert [p[0].tolist() for p in prompts] == [tok(it.text, add_special_tokens=False).input_ids
                                                for it in code_items(3)]
    assert "held-out zoo code prompts" in what
    with pytest.raises(ValueError, match="--prompt-length sets the length of random-token prompts"):
        bench_prompts("zoo:code-target", tok, 4096, 3, 30, 0)
    prompts, what = bench_prompts("tiny:llama", None, 512, 2, 20, 0)
    assert [p.shape[1] for p in prompts] == [20, 20] and "random-weight tiny models" in what
    for spec in ("zoo:image-target", "zoo:vlm-target"):
        with pytest.raises(ValueError, match="times causal LMs"):
            bench_model(spec)
