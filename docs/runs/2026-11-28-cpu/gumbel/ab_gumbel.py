"""Lossless image rows side by side in one process (batch 1, T = 1, CFG 3.0; interleaved with plain AR so the
machine's drift hits every row alike: ``../../2026-11-27-cpu/image-kl/ab_drafters.py``'s ``interleaved``):
image-dflash's DDTree and chain of 8 under p/q rejection and under the Gumbel coupling, each with and without
``reuse_block`` (a step right after a drafter forward drafts from that forward's leftover slots). Every Gumbel row
is checked against plain AR under the same coupling and seed: the codes must be identical.

    python ab_gumbel.py [--rounds 3] [--pictures 4] [--rows a,b,...] --out F.json"""
import argparse, json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "2026-11-27-cpu", "image-kl"))
import torch  # noqa: E402
from ab_drafters import interleaved  # noqa: E402
import mmspec.registry as registry  # noqa: E402
from mmspec.image_gen import ImageGenerator  # noqa: E402

ROWS = {
    "pq ddtree": dict(tree="ddtree"), "pq ddtree reuse6": dict(tree="ddtree", reuse=6),
    "pq chain 8": dict(tree="chain", num_tokens=8),
    "gumbel ddtree": dict(tree="ddtree", coupling="gumbel"),
    "gumbel ddtree reuse6": dict(tree="ddtree", coupling="gumbel", reuse=6),
    "gumbel ddtree reuse8": dict(tree="ddtree", coupling="gumbel", reuse=8),
    "gumbel ddtree24 reuse6": dict(tree="ddtree", coupling="gumbel", reuse=6, nodes=24),
    "gumbel chain 8": dict(tree="chain", num_tokens=8, coupling="gumbel"),
    "gumbel ddtree4 reuse6": dict(tree="ddtree", coupling="gumbel", reuse=6, nodes=4),
    "gumbel ddtree6 reuse6": dict(tree="ddtree", coupling="gumbel", reuse=6, nodes=6),
    "gumbel ddtree8 reuse6": dict(tree="ddtree", coupling="gumbel", reuse=6, nodes=8),
    "gumbel ddtree12 reuse6": dict(tree="ddtree", coupling="gumbel", reuse=6, nodes=12),
    "gumbel ddtree4 reuse3x4": dict(tree="ddtree", coupling="gumbel", reuse=3, steps=4, nodes=4),
    "gumbel ddtree6 reuse4x3": dict(tree="ddtree", coupling="gumbel", reuse=4, steps=3, nodes=6),
    "gumbel ddtree8 reuse4x3": dict(tree="ddtree", coupling="gumbel", reuse=4, steps=3, nodes=8),
    "gumbel ddtree12 reuse5x2": dict(tree="ddtree", coupling="gumbel", reuse=5, steps=2, nodes=12),
    "gumbel ddtree16 reuse6x2": dict(tree="ddtree", coupling="gumbel", reuse=6, steps=2, nodes=16),
    "gumbel ddtree16 reuse5x2": dict(tree="ddtree", coupling="gumbel", reuse=5, steps=2, nodes=16),
    "gumbel ddtree16 reuse4x3": dict(tree="ddtree", coupling="gumbel", reuse=4, steps=3, nodes=16),
    "gumbel ddtree20 reuse6x2": dict(tree="ddtree", coupling="gumbel", reuse=6, steps=2, nodes=20),
}
ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=3); ap.add_argument("--pictures", type=int, default=4)
ap.add_argument("--rows", default=",".join(ROWS)); ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
g = ImageGenerator.from_zoo()
base = dict(registry.IMAGE_DFLASH_TREE)  # (the rejection DDTree's settings: each row sets its own reuse)
shipped = {d: dict(getattr(registry, d)) for d in ("IMAGE_DFLASH_TREE", "IMAGE_DFLASH_GUMBEL_TREE")}
mismatches = []


def row(name, kw):
    kw = dict(kw)
    reuse, nodes, steps = kw.pop("reuse", None), kw.pop("nodes", base["tree_nodes"]), kw.pop("steps", 1)

    def call(c, s):
        for d in shipped:  # both DDTree settings (rejection and Gumbel) set to the row's
            getattr(registry, d).clear()
            getattr(registry, d).update(base, tree_nodes=nodes,
                                        **({"reuse_block": reuse, "reuse_steps": steps} if reuse else {}))
        out = g.generate([c], method="spec", drafter="dflash", seed=s, **kw)
        for d, settings in shipped.items():
            getattr(registry, d).clear()
            getattr(registry, d).update(settings)
        if kw.get("coupling") == "gumbel":
            produced[(name, c, s)] = out.codes  # checked against plain AR after the timing
        return out
    return call


produced = {}
calls = {"ar": lambda c, s: g.generate([c], method="ar", seed=s)}
for name in a.rows.split(","):
    calls[name] = row(name, ROWS[name])
results = interleaved(calls, a.rounds, a.pictures)
checked = 0
for (name, c, s), codes in produced.items():
    checked += 1
    if not torch.equal(g.generate([c], method="ar", seed=s, coupling="gumbel").codes, codes):
        mismatches.append([name, c, s])
print(f"Gumbel rows: {checked} pictures checked against plain AR under the coupling, {len(mismatches)} differ")
json.dump({"args": vars(a), "results": results, "gumbel_pictures_checked": checked, "gumbel_mismatches": mismatches},
          open(a.out, "w"), indent=1)
