"""Lossless image rows side by side in one process (batch 1, T = 1, interleaved with plain AR so drift hits every row
alike): image-dflash chains of 3 / 4 / 6 / 8 slots and its DDTree, beside image-eagle's lossless chain. A chain's
verify forward costs per code on this CPU while slots past the first few are rarely accepted, so the shortest chain
that keeps τ may be the fastest.

    python lossless_lengths.py [--rounds 3] [--pictures 4] --out F.json"""
import argparse, json, os, statistics, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.image_gen import ImageGenerator
from mmspec.training.dflash import tau_of

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=3); ap.add_argument("--pictures", type=int, default=4)
ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
g = ImageGenerator.from_zoo()
settings = {f"dflash chain {n}": dict(drafter="dflash", tree="chain", num_tokens=n) for n in (3, 4, 6, 8)}
settings["dflash ddtree"] = dict(drafter="dflash", tree="ddtree")
settings["eagle chain"] = dict(drafter="feature", tree="chain")
calls = {"ar": lambda c, s: g.generate([c], method="ar", seed=s)}
for name, kw in settings.items():
    calls[name] = lambda c, s, kw=kw: g.generate([c], method="spec", seed=s, **kw)
times = {k: [] for k in calls}
taus = {k: [] for k in calls}
with torch.inference_mode():
    for f in calls.values():
        f(0, 0)
    for r in range(a.rounds):
        order = list(calls) if r % 2 == 0 else list(reversed(calls))
        for k in order:
            t = time.perf_counter()
            for i in range(a.pictures):
                out = calls[k](i % 12, 1000 * r + i)
                if k != "ar":
                    taus[k].append(out.stats)
            times[k].append(time.perf_counter() - t)
res = {}
for k in calls:
    sp = [ar / t for ar, t in zip(times["ar"], times[k])]
    res[k] = {"speedup_median": statistics.median(sp), "speedup_rounds": sp,
              "tau": tau_of(taus[k]) if taus[k] else 1.0}
    print(f"{k:20s} {res[k]['speedup_median']:.2f}x  rounds {[round(x, 2) for x in sp]}  tau {res[k]['tau']:.2f}")
json.dump({"args": vars(a), "results": res}, open(a.out, "w"), indent=1)
