"""Knobs of the cut DDTree with its lookup branch (``DFLASH_LOOKUP_CUT``) on HumanEval, side by side in one run
(greedy, every row exact): the block's length (``block``: a forward over 8-12 positions instead of 16), the lookup
branch's length, the shortest lookup continuation verified alone (``lookup_alone``; None: never alone) and the node
budget. Variant names: ``cut-b8`` block 8, ``cut-l6`` lookup 6, ``cut-a8`` lookup_alone 8, ``cut-n12`` 12 nodes.

    python grid.py --data humaneval --prompts 24 --repeats 2 --variants cut,cut-b8,cut-l6 --out F"""
import argparse, json, os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.eval.bench import compare
from mmspec.eval.datasets import code_items
from mmspec.registry import DFLASH_LOOKUP_ALONE, DFLASH_LOOKUP_CUT
from mmspec.zoo import load
ap = argparse.ArgumentParser()
ap.add_argument("--data", default=None); ap.add_argument("--prompts", type=int, default=16)
ap.add_argument("--repeats", type=int, default=1); ap.add_argument("--out", required=True)
ap.add_argument("--variants", default="cut,cut-b8,cut-b12,cut-l8,cut-l6")
a = ap.parse_args()
torch.set_num_threads(2)
entry = load("code-target"); tgt = entry.model
net = load("code-dflash").model
V = {"alone": dict(DFLASH_LOOKUP_ALONE), "cut": dict(DFLASH_LOOKUP_CUT)}
for b in (6, 8, 10, 12): V[f"cut-b{b}"] = dict(DFLASH_LOOKUP_CUT, block=b)
for l in (4, 6, 8): V[f"cut-l{l}"] = dict(DFLASH_LOOKUP_CUT, lookup=l)
for l in (6, 8): V[f"cut-l{l}-b10"] = dict(DFLASH_LOOKUP_CUT, lookup=l, block=10)
for n in (8, 12, 24): V[f"cut-n{n}"] = dict(DFLASH_LOOKUP_CUT, tree_nodes=n)
for la in (6, 8, 12): V[f"cut-a{la}"] = dict(DFLASH_LOOKUP_CUT, lookup_alone=la)
V["cut-noalone"] = dict(DFLASH_LOOKUP_CUT, lookup_alone=None)
extra = {k: (lambda kw=V[k]: DFlashDrafter(net, tgt, **kw)) for k in a.variants.split(",")}
items = code_items(a.prompts, a.data)
prompts = [entry.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids for i in items]
rep = compare(tgt, None, prompts, methods=["plain", *extra], max_new_tokens=64, repeats=a.repeats, extra=extra)
out = {r["method"]: {k: r[k] for k in ("speedup", "tau", "seconds", "exact")} for r in rep["results"]}
for m, r in out.items():
    print(f"{m:24s} {r['speedup']:.3f}x  tau {r['tau'] if r['tau'] is None else round(r['tau'], 2)}  exact {r['exact']}")
json.dump({"args": vars(a), "results": out}, open(a.out, "w"), indent=1, default=str)
