"""Side by side in one process: two image-dflash drafters (``old``, ``--new``; the zoo's by default), on the same
pictures (same classes and seeds), interleaved with plain AR so machine drift hits every row alike. One picture per
call (batch 1), T = 1. ``interleaved`` is the timing loop (``../image-branches/lossless_lengths.py`` uses it too).

    python ab_drafters.py OLD_DIR [--new NEW_DIR] [--rounds 3] [--pictures 4] --out F.json"""
import argparse, json, os, statistics, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash_io import load_dflash
from mmspec.image_gen import ImageGenerator
from mmspec.training.dflash import tau_of


def interleaved(calls: dict, rounds: int, pictures: int) -> dict:
    """Time each of ``calls`` (name -> f(class_id, seed); one of them ``"ar"``, plain AR) on ``pictures`` pictures per
    round, the order reversed every other round after one warm-up call each; per call the median speedup over the
    rounds against ``ar``'s time in the same round, each round's speedup and τ. Prints a line per call."""
    times = {k: [] for k in calls}
    taus = {k: [] for k in calls}
    with torch.inference_mode():
        for f in calls.values():
            f(0, 0)
        for r in range(rounds):
            order = list(calls) if r % 2 == 0 else list(reversed(calls))
            for k in order:
                t = time.perf_counter()
                for i in range(pictures):
                    out = calls[k](i % 12, 1000 * r + i)
                    if k != "ar":
                        taus[k].append(out.stats)
                times[k].append(time.perf_counter() - t)
    res = {}
    for k in calls:
        sp = [ar / t for ar, t in zip(times["ar"], times[k])]
        res[k] = {"speedup_median": statistics.median(sp), "speedup_rounds": sp,
                  "tau": tau_of(taus[k]) if taus[k] else 1.0}
        print(f"{k:42s} {res[k]['speedup_median']:.2f}x  rounds {[round(x, 2) for x in sp]}  tau {res[k]['tau']:.2f}")
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("old"); ap.add_argument("--new", default=None)
    ap.add_argument("--rounds", type=int, default=3); ap.add_argument("--pictures", type=int, default=4)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(2)
    new = ImageGenerator.from_zoo()
    if a.new:
        new.set_feature_drafter(load_dflash(a.new), "dflash")
    old = ImageGenerator.from_zoo()
    old.set_feature_drafter(load_dflash(a.old), "dflash")
    settings = {
        "spec chain 8": dict(method="spec", drafter="dflash", tree="chain", num_tokens=8),
        "spec chain 12": dict(method="spec", drafter="dflash", tree="chain", num_tokens=12),
        "spec ddtree": dict(method="spec", drafter="dflash", tree="ddtree"),
        "lantern++ λ50 k16 chain 8 (default)": dict(method="lantern++", drafter="dflash", tree="chain", num_tokens=8,
                                                    lam=50.0, lantern_k=16),
        "lantern++ λ200 k32 chain 12": dict(method="lantern++", drafter="dflash", tree="chain", num_tokens=12,
                                            lam=200.0, lantern_k=32),
    }
    calls = {"ar": lambda c, s: new.generate([c], method="ar", seed=s)}
    for name, kw in settings.items():
        calls[f"old {name}"] = lambda c, s, kw=kw: old.generate([c], seed=s, **kw)
        calls[f"new {name}"] = lambda c, s, kw=kw: new.generate([c], seed=s, **kw)
    res = interleaved(calls, a.rounds, a.pictures)
    json.dump({"args": vars(a), "results": res}, open(a.out, "w"), indent=1)
