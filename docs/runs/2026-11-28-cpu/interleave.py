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
