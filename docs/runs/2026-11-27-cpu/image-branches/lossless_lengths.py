"""Lossless image rows side by side in one process (batch 1, T = 1, interleaved with plain AR so drift hits every row
alike: ``../image-kl/ab_drafters.py``'s ``interleaved``): image-dflash chains of 3 / 4 / 6 / 8 slots and its DDTree,
beside image-eagle's lossless chain. A chain's verify forward costs per code on this CPU while slots past the first
few are rarely accepted, so the shortest chain that keeps τ may be the fastest.

    python lossless_lengths.py [--rounds 3] [--pictures 4] --out F.json"""
import argparse, json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "image-kl"))
import torch  # noqa: E402
from ab_drafters import interleaved  # noqa: E402
from mmspec.image_gen import ImageGenerator  # noqa: E402

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
json.dump({"args": vars(a), "results": interleaved(calls, a.rounds, a.pictures)}, open(a.out, "w"), indent=1)
