"""Experiment: DFlash DDTree + lookup, except on steps where every active row's context has a prompt-lookup match of at
least M tokens: then the lookup chain alone (no drafter forward). Greedy only.

    python lookup_first.py --data humaneval --prompts 24 [--repeats 1] --out F"""
import argparse, json, os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter, LOOKUP_NGRAM
from mmspec.drafters.prompt_lookup import lookup_continuation
from mmspec.eval.bench import compare
from mmspec.eval.datasets import code_items
from mmspec.registry import DFLASH_TREE_LOOKUP
from mmspec.tree import DraftTree
from mmspec.zoo import load

class LookupFirst(DFlashDrafter):
    def __init__(self, *a, min_match=4, chain=12, **k):
        super().__init__(*a, **k)
        self.min_match, self.chain = min_match, chain
    def propose(self, context, run):
        state = context.state
        if not state.sampling.do_sample:
            rows = [b for b in range(state.batch_size) if bool(state.active[b])]
            branches = {b: lookup_continuation(state.row(b), self.chain, LOOKUP_NGRAM[1], LOOKUP_NGRAM[0]).tolist() for b in rows}
            if rows and all(len(branches[b]) >= self.min_match for b in rows):
                return DraftTree.root_only(state.roots).grafted([branches.get(b, []) for b in range(state.batch_size)])
        return super().propose(context, run)

ap = argparse.ArgumentParser()
ap.add_argument("--data", default=None); ap.add_argument("--prompts", type=int, default=8)
ap.add_argument("--repeats", type=int, default=1); ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
entry = load("code-target"); tgt = entry.model
net = load("code-dflash").model
extra = {"dflash-tree-lookup": lambda: DFlashDrafter(net, tgt, **DFLASH_TREE_LOOKUP)}
for m, c in [tuple(int(x) for x in s.split(",")) for s in os.environ.get("LF", "1,4 2,8 4,12 8,12").split()]:
    extra[f"lookup-first-m{m}-c{c}"] = lambda m=m, c=c: LookupFirst(net, tgt, min_match=m, chain=c, **DFLASH_TREE_LOOKUP)
items = code_items(a.prompts, a.data)
prompts = [entry.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids for i in items]
rep = compare(tgt, None, prompts, methods=["plain", "prompt-lookup", *extra], max_new_tokens=64, repeats=a.repeats,
              extra=extra)
out = {r["method"]: {k: r[k] for k in ("speedup", "tau", "seconds", "exact")} for r in rep["results"]}
for m, r in out.items():
    print(f"{m:24s} {r['speedup']:.2f}x  tau {r['tau'] if r['tau'] is None else round(r['tau'], 2)}  exact {r['exact']}")
json.dump({"args": vars(a), "results": out}, open(a.out, "w"), indent=1, default=str)
