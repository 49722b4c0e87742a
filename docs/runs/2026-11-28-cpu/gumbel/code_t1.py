"""The Gumbel coupling on the code target at T = 1 (the suite's 8 prompts × 64 tokens, or HumanEval's): the block
drafter's DDTree (with and without reuse_block) and the EAGLE chain under the coupling, beside plain sampling under
the coupling and the same drafters under p/q rejection, interleaved in one process; every Gumbel row's tokens
checked against plain sampling's under the coupling.

    python code_t1.py [--data suite|humaneval] [--prompts 8] [--rounds 2] --out F.json"""
import argparse, json, os, statistics, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec import SpeculativeGenerator
from mmspec.drafters import NoDrafter
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.feature import FeatureDrafter
from mmspec.eval.datasets import code_items
from mmspec.registry import DFLASH_TREE, DRAFT_WEIGHTS
from mmspec.zoo import load

ap = argparse.ArgumentParser()
ap.add_argument("--data", default="suite"); ap.add_argument("--prompts", type=int, default=8)
ap.add_argument("--rounds", type=int, default=2); ap.add_argument("--tokens", type=int, default=64)
ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
entry = load("code-target"); tgt = entry.model.eval()
dnet, enet = load("code-dflash").model, load("code-eagle").model
items = code_items(a.prompts, None if a.data == "suite" else a.data)
prompts = [entry.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids for i in items]
rows = {
    "plain (gumbel)": (lambda: NoDrafter(), "gumbel"),
    "plain (rejection)": (lambda: NoDrafter(), "rejection"),
    "dflash ddtree (rejection)": (lambda: DFlashDrafter(dnet, tgt, weights=DRAFT_WEIGHTS, **DFLASH_TREE), "rejection"),
    "dflash ddtree (gumbel)": (lambda: DFlashDrafter(dnet, tgt, weights=DRAFT_WEIGHTS, **DFLASH_TREE), "gumbel"),
    "dflash ddtree reuse6 (gumbel)": (lambda: DFlashDrafter(dnet, tgt, weights=DRAFT_WEIGHTS, reuse_block=6,
                                                            **DFLASH_TREE), "gumbel"),
    "eagle chain (rejection)": (lambda: FeatureDrafter(enet, tgt, num_tokens=4, weights=DRAFT_WEIGHTS), "rejection"),
    "eagle chain (gumbel)": (lambda: FeatureDrafter(enet, tgt, num_tokens=4, weights=DRAFT_WEIGHTS), "gumbel"),
}
times = {k: [] for k in rows}
steps = {k: 0 for k in rows}
toks = {k: 0 for k in rows}
outs = {}
with torch.inference_mode():
    for k, (make, coupling) in rows.items():  # warm-up
        SpeculativeGenerator(tgt, make()).generate(prompts[0], max_new_tokens=8, do_sample=True, coupling=coupling,
                                                   eos_token_id=[], generator=torch.Generator().manual_seed(0))
    for r in range(a.rounds):
        order = list(rows) if r % 2 == 0 else list(reversed(rows))
        for k in order:
            make, coupling = rows[k]
            t = time.perf_counter()
            for i, p in enumerate(prompts):
                o = SpeculativeGenerator(tgt, make()).generate(p, max_new_tokens=a.tokens, do_sample=True,
                                                               coupling=coupling, eos_token_id=[],
                                                               generator=torch.Generator().manual_seed(100 * r + i))
                outs[(k, r, i)] = o.sequences
                if o.stats is not None:
                    steps[k] += len(o.stats.accept_lengths[0]); toks[k] += o.sequences.shape[1] - p.shape[1]
            times[k].append(time.perf_counter() - t)
mismatch = sum(not torch.equal(v, outs[("plain (gumbel)", r, i)]) for (k, r, i), v in outs.items() if "(gumbel)" in k)
res = {}
for k in rows:
    sp = [b / t for b, t in zip(times["plain (rejection)"], times[k])]
    res[k] = {"speedup_median": statistics.median(sp), "speedup_rounds": sp, "tau": toks[k] / max(steps[k], 1)}
    print(f"{k:34s} {res[k]['speedup_median']:.2f}x rounds {[round(x, 2) for x in sp]} tau {res[k]['tau']:.2f}")
print("gumbel outputs differing from plain sampling under the coupling:", mismatch)
json.dump({"args": vars(a), "results": res, "gumbel_mismatches": mismatch}, open(a.out, "w"), indent=1)
