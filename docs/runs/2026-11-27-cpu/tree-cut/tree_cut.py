"""Experiments on the DDTree of the zoo's code drafter with lookup_alone (greedy):

- ``tree_cut``: the best-first search also stops at a path probability floor (on a CPU the verify forward over 28
  nodes costs 1.6-1.85 plain steps, and where the drafter is unsure most of a 16-node tree is never accepted);
- ``--lone``: a lone lookup step only where the lookup matched an n-gram of at least 2 or 3 tokens (a 1-gram match is
  often a guess), with and without the cut.

    python tree_cut.py [--data humaneval] --prompts 24 [--repeats 2] [--lone] --out F   (CUTS="0.02 0.05 0.1")"""
import argparse, json, os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter, LOOKUP_NGRAM
from mmspec.drafters.prompt_lookup import lookup_continuation
from mmspec.eval.bench import compare
from mmspec.eval.datasets import code_items
from mmspec.registry import DFLASH_LOOKUP_ALONE
from mmspec.zoo import load


class LoneNgram(DFlashDrafter):
    """lookup_alone only where every row's lookup matched ``lone_ngram`` tokens or more."""

    def __init__(self, *a, lone_ngram=2, **k):
        super().__init__(*a, **k)
        self.lone_ngram = lone_ngram

    def _lookup_alone(self, state, branches=None):
        rows = state.active.tolist()
        strong = [lookup_continuation(state.row(b), self.lookup, LOOKUP_NGRAM[1], self.lone_ngram).tolist()
                  if a else [] for b, a in enumerate(rows)]
        if not any(rows) or any(a and len(c) < self.lookup_alone for a, c in zip(rows, strong)):
            return None
        return super()._lookup_alone(state, strong)


ap = argparse.ArgumentParser()
ap.add_argument("--data", default=None); ap.add_argument("--prompts", type=int, default=16)
ap.add_argument("--repeats", type=int, default=1); ap.add_argument("--lone", action="store_true")
ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
entry = load("code-target"); tgt = entry.model
net = load("code-dflash").model
extra = {"dflash-lookup-alone": lambda: DFlashDrafter(net, tgt, **DFLASH_LOOKUP_ALONE)}
cuts = os.environ.get("CUTS", "0.03" if a.lone else "0.02 0.05 0.1")
for c in [float(x) for x in cuts.split()]:
    extra[f"cut-{c}"] = lambda c=c: DFlashDrafter(net, tgt, tree_cut=c, **DFLASH_LOOKUP_ALONE)
if a.lone:
    for n in (2, 3):
        extra[f"lone-{n}gram"] = lambda n=n: LoneNgram(net, tgt, lone_ngram=n, **DFLASH_LOOKUP_ALONE)
        extra[f"lone-{n}gram-cut"] = lambda n=n: LoneNgram(net, tgt, lone_ngram=n, tree_cut=0.03, **DFLASH_LOOKUP_ALONE)
items = code_items(a.prompts, a.data)
prompts = [entry.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids for i in items]
methods = ["plain", *([] if a.lone else ["prompt-lookup"]), *extra]
rep = compare(tgt, None, prompts, methods=methods, max_new_tokens=64, repeats=a.repeats, extra=extra)
out = {r["method"]: {k: r[k] for k in ("speedup", "tau", "seconds", "exact")} for r in rep["results"]}
for m, r in out.items():
    print(f"{m:24s} {r['speedup']:.2f}x  tau {r['tau'] if r['tau'] is None else round(r['tau'], 2)}  exact {r['exact']}")
json.dump({"args": vars(a), "cuts": cuts, "results": out}, open(a.out, "w"), indent=1, default=str)
