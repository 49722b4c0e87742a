"""Side by side on the image suite's classes (one picture each, CFG 3, T = 1, the zoo's image-dflash chain of 8):
plain AR, then lossless `spec` and LANTERN++ (the image default, λ 50) with the drafter's float32 weights and with
int8 weight-only products (`mmspec.registry.DRAFT_WEIGHTS`, read when each call builds its drafter); the same seed
per class for every method, rounds interleaved, round 0 warms up.

    python ab_int8_image.py [--classes 8] [--rounds 2] --out F"""
import argparse, json, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
import mmspec
from mmspec import registry

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--classes", type=int, default=8); ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
pipe = mmspec.pipeline("zoo:image-target")
runs = {"ar": dict(method="ar")}
for w in ("float", "int8"):
    runs[f"spec-{w}"] = dict(method="spec", drafter="dflash", weights=w)
    runs[f"lantern++-{w}"] = dict(method="lantern++", drafter="dflash", weights=w)
tot = {k: {"seconds": 0.0, "codes": 0, "forwards": 0} for k in runs}
for r in range(a.rounds + 1):
    for c in range(a.classes):
        for k, kw in runs.items():
            kw = dict(kw)
            registry.DRAFT_WEIGHTS = kw.pop("weights", "auto")
            t = time.perf_counter(); o = pipe.generate(class_ids=[c], seed=100 + c, **kw); dt = time.perf_counter() - t
            if r:
                tot[k]["seconds"] += dt
                if o.stats is not None:  # (plain AR: HF's own loop, no stats; τ 1)
                    tot[k]["codes"] += o.stats.new_tokens; tot[k]["forwards"] += o.stats.target_forwards - 1
out = {k: {"speedup": tot["ar"]["seconds"] / v["seconds"], "tau": v["codes"] / v["forwards"] if v["forwards"] else 1.0,
           "seconds": v["seconds"]} for k, v in tot.items()}
for k, v in out.items():
    print(f"{k:16s} {v['speedup']:.3f}x  tau {v['tau']:.2f}")
json.dump({"args": vars(a), "results": out}, open(a.out, "w"), indent=1)
