"""Lossless image rows under the Gumbel coupling against plain AR, interleaved picture by picture (batch 1, T = 1,
CFG 3.0): for each picture, plain AR and every row in turn (the order reversed every other picture), so a slow
phase of this shared machine hits every row of that picture alike; per row the ratio of AR's summed time to the
row's over all pictures, and the spread of per-picture ratios. Every row's codes are checked against plain AR
under the same coupling and seed (the AR call of that picture): they must be identical.

A row sets the Gumbel DDTree's settings (``mmspec.registry.IMAGE_DFLASH_GUMBEL_TREE``): ``nodes`` (tree_nodes),
``reuse`` (reuse_block) and ``steps`` (reuse_steps), written ``n16 r6x2`` (``n16 r6x2 k8``: each slot's top 8 codes searched instead of the registry's top_k;
``n16 r6x2 t1``: on one intra-op thread).

    python ab_pictures.py [--pictures 8] [--rounds 2] [--first 0] [--rows "n16 r6x1,n16 r6x2"] --out F.json"""
import argparse, json, re, statistics, time
import torch
import mmspec.registry as registry
from mmspec.image_gen import ImageGenerator

ap = argparse.ArgumentParser()
ap.add_argument("--pictures", type=int, default=8); ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--rows", default="n16 r6x1,n16 r6x2"); ap.add_argument("--out", required=True)
ap.add_argument("--first", type=int, default=0, help="the first picture's index (its class and seed)")
a = ap.parse_args()
torch.set_num_threads(2)
g = ImageGenerator.from_zoo()
shipped = dict(registry.IMAGE_DFLASH_GUMBEL_TREE)


def settings(row: str) -> dict:
    n, r, k = map(int, re.match(r"n(\d+) r(\d+)x(\d+)", row).groups())
    top = re.search(r" k(\d+)", row)
    return dict(shipped, tree_nodes=n, reuse_block=r, reuse_steps=k, **({"top_k": int(top.group(1))} if top else {}))


def threads(row: str) -> int:
    """A row ending in `` t1`` runs on one intra-op thread (plain AR always runs on two)."""
    found = re.search(r" t(\d+)$", row)
    return int(found.group(1)) if found else 2


def spec(row, c, s):
    registry.IMAGE_DFLASH_GUMBEL_TREE.clear()
    registry.IMAGE_DFLASH_GUMBEL_TREE.update(settings(row))
    torch.set_num_threads(threads(row))
    try:
        return g.generate([c], method="spec", drafter="dflash", tree="ddtree", coupling="gumbel", seed=s)
    finally:
        torch.set_num_threads(2)
        registry.IMAGE_DFLASH_GUMBEL_TREE.clear()
        registry.IMAGE_DFLASH_GUMBEL_TREE.update(shipped)


rows = a.rows.split(",")
times = {k: [] for k in ["ar", *rows]}
tokens, steps, mismatches = {k: 0 for k in rows}, {k: 0 for k in rows}, []
with torch.inference_mode():
    g.generate([0], method="ar", seed=0, coupling="gumbel")
    for row in rows:
        spec(row, 0, 0)
    n = 0
    for r in range(a.rounds):
        for i in range(a.first, a.first + a.pictures):
            c, s = i % 12, 1000 * r + i
            order = ["ar", *rows] if n % 2 == 0 else [*reversed(rows), "ar"]
            n += 1
            out = {}
            for k in order:
                t = time.perf_counter()
                out[k] = g.generate([c], method="ar", seed=s, coupling="gumbel") if k == "ar" else spec(k, c, s)
                times[k].append(time.perf_counter() - t)
            for k in rows:
                tokens[k] += out[k].stats.new_tokens
                steps[k] += out[k].stats.target_forwards - 1  # (the prefill's forward is not a step)
                if not torch.equal(out[k].codes, out["ar"].codes):
                    mismatches.append([k, c, s])
res = {}
for k in rows:
    per = [ar / t for ar, t in zip(times["ar"], times[k])]
    res[k] = {"speedup": sum(times["ar"]) / sum(times[k]), "per_picture_median": statistics.median(per),
              "per_picture_min": min(per), "per_picture_max": max(per), "tau": tokens[k] / steps[k],
              "settings": settings(k)}
    print(f"{k:12s} {res[k]['speedup']:.3f}x  per picture median {res[k]['per_picture_median']:.2f} "
          f"[{res[k]['per_picture_min']:.2f}, {res[k]['per_picture_max']:.2f}]  tau {res[k]['tau']:.2f}")
print(f"pictures {n}, rows identical to plain AR: {len(mismatches) == 0} ({len(mismatches)} differ)")
json.dump({"args": vars(a), "results": res, "pictures": n, "mismatches": mismatches,
           "ar_seconds": sum(times["ar"])}, open(a.out, "w"), indent=1)
