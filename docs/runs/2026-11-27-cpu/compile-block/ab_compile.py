"""The DFlash drafter's block forward compiled (torch.compile of ``DFlashDraftModel.block_after``, dynamic shapes: the
context grows every step; a second copy of the drafter, so the eager one stays eager) against the same drafter eager, side by side in one process with HF plain decoding (``mmspec.eval.bench.compare``:
greedy, 64 tokens, every row checked exact), on the code suite's prompts or HumanEval's.

    python ab_compile.py [--data humaneval] [--prompts 8] [--repeats 2] [--variants tree,cut] --out F"""
import argparse, json, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.eval.bench import compare
from mmspec.eval.datasets import code_items
from mmspec.registry import DFLASH_LOOKUP_CUT, DFLASH_TREE
from mmspec.zoo import load

ap = argparse.ArgumentParser()
ap.add_argument("--data", default=None); ap.add_argument("--prompts", type=int, default=8)
ap.add_argument("--repeats", type=int, default=2); ap.add_argument("--variants", default="tree,cut")
ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
entry = load("code-target"); tgt = entry.model
net = load("code-dflash").model
fast = load("code-dflash").model
fast.block_after = torch.compile(fast.block_after, dynamic=True)  # an instance attribute: what slot_hidden calls
kinds = {"tree": DFLASH_TREE, "cut": DFLASH_LOOKUP_CUT}
extra = {}
for v in a.variants.split(","):
    extra[v] = lambda kw=kinds[v]: DFlashDrafter(net, tgt, **kw)
    extra[f"{v}-compiled"] = lambda kw=kinds[v]: DFlashDrafter(fast, tgt, **kw)
items = code_items(a.prompts, a.data)
prompts = [entry.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids for i in items]
t0 = time.perf_counter()
with torch.inference_mode():  # compile once, outside the timed calls (the first call of a process compiles)
    from mmspec import SpeculativeGenerator
    SpeculativeGenerator(tgt, DFlashDrafter(fast, tgt, **DFLASH_TREE)).generate(prompts[0], max_new_tokens=16)
compile_s = time.perf_counter() - t0
rep = compare(tgt, None, prompts, methods=["plain", *extra], max_new_tokens=64, repeats=a.repeats, extra=extra)
out = {r["method"]: {k: r.get(k) for k in ("speedup", "tau", "seconds", "exact")} for r in rep["results"]}
for m, r in out.items():
    print(f"{m:16s} {r['speedup']:.3f}x  tau {r['tau'] if r['tau'] is None else round(r['tau'], 2)}  exact {r['exact']}")
print(f"first compile and warm-up call: {compile_s:.1f} s")
json.dump({"args": vars(a), "compile_seconds": compile_s, "results": out}, open(a.out, "w"), indent=1, default=str)
