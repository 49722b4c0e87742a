"""The loop this folder's side-by-side scripts share: every call through every generator in turn, round after round
(round 0 warms up), each output compared with the ``"plain"`` generator's of the same call."""
import time


def interleaved(gens: dict, calls: list, rounds: int, budget: int, eos) -> dict:
    """Per generator, summed over the timed rounds: ``seconds``, ``forwards`` (target forwards, the prefill
    included), ``tokens`` (new tokens) and ``exact`` (calls whose output equals plain decoding's). ``calls``: (input
    ids [1, P], extra ``generate`` keywords); ``gens`` must hold a ``"plain"`` generator, run first."""
    totals = {k: {"seconds": 0.0, "forwards": 0, "tokens": 0, "exact": 0} for k in gens}
    ref = {}
    for r in range(rounds + 1):
        for i, (ids, kw) in enumerate(calls):
            for k, g in gens.items():
                t = time.perf_counter()
                o = g.generate(ids, max_new_tokens=budget, eos_token_id=eos, **kw)
                dt = time.perf_counter() - t
                seq = o.sequences[0].tolist()
                if k == "plain":
                    ref[i] = seq
                if r:
                    tot = totals[k]
                    tot["seconds"] += dt
                    tot["forwards"] += o.stats.target_forwards or 0
                    tot["tokens"] += o.stats.new_tokens
                    tot["exact"] += int(seq == ref[i])
    return totals


def code_run(description: str):
    """The code A/B scripts' shared start: their arguments (``--data``, ``--prompts``, ``--rounds``, ``--out``), 2
    threads, and (args, target model, zoo code-dflash, calls) for the chosen prompts."""
    import argparse
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from mmspec.eval.datasets import code_items
    from mmspec.zoo import load
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", default=None); ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2); ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(2)
    target = load("code-target")
    calls = [(target.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids, {})
             for i in code_items(a.prompts, a.data)]
    return a, target.model, load("code-dflash").model, calls


def summary(totals: dict, rounds: int, calls: list) -> dict:
    """Per generator of :func:`interleaved`'s totals: seconds, speedup over ``"plain"``, τ (new tokens per target
    forward after the prefill) and the share of exact calls; printed one line each."""
    n = rounds * len(calls)
    out = {k: {"seconds": t["seconds"], "speedup": totals["plain"]["seconds"] / t["seconds"],
               "tau": t["tokens"] / max(t["forwards"] - n, 1), "exact": t["exact"] / n} for k, t in totals.items()}
    for k, v in out.items():
        print(f"{k:18s} {v['speedup']:.3f}x  tau {v['tau']:.2f}  exact {v['exact']:.2f}")
    return out


def timed_calls(drafters: dict, method: str) -> dict:
    """Wrap ``method`` of each drafter in ``drafters`` (name -> drafter) so it sums its seconds and calls into the
    returned ``{name: [seconds, calls]}`` (the A/B scripts' drafting-step timers)."""
    timing = {name: [0.0, 0] for name in drafters}
    for name, d in drafters.items():
        inner = getattr(d, method)

        def timed(*args, _inner=inner, _name=name, **kw):
            t = time.perf_counter(); r = _inner(*args, **kw)
            timing[_name][0] += time.perf_counter() - t; timing[_name][1] += 1
            return r
        setattr(d, method, timed)
    return timing


def weights_ab(a, model, calls: list, drafters: dict, method: str, prefix: str) -> None:
    """The int8 A/B scripts' shared end: plain decoding and each of ``drafters`` (weights name -> drafter, as
    ``"<prefix>-<name>"``) interleaved on ``calls``, ``method`` of each drafter timed as its drafting step; printed,
    and written with ``a``'s arguments to ``a.out``."""
    import json
    from mmspec.drafters.no_draft import NoDrafter
    from mmspec.generator import SpeculativeGenerator
    timing = timed_calls(drafters, method)
    gens = {"plain": SpeculativeGenerator(model, NoDrafter()),
            **{f"{prefix}-{w}": SpeculativeGenerator(model, d) for w, d in drafters.items()}}
    out = summary(interleaved(gens, calls, a.rounds, 64, []), a.rounds, calls)
    steps = {w: 1000 * s / max(n, 1) for w, (s, n) in timing.items()}
    print(f"drafting step ({method}), ms:", {w: round(v, 2) for w, v in steps.items()})
    json.dump({"args": vars(a), "results": out, "drafting_step_ms": steps}, open(a.out, "w"), indent=1)
