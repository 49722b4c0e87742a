"""The zoo's DFlash drafter against a new one, side by side in one process, on the code suite's held-out prompts or
HumanEval, greedy or sampled.

    python eval_new.py DRAFTER_DIR --mode t1|greedy [--data humaneval --prompts 24] [--repeats 2] --out FILE

(greedy mode also times lookup_alone and the tree cut, rows added for docs/runs/2026-11-27-cpu/more-data/)"""
import argparse, json, os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash_io import load_dflash
from mmspec.eval.bench import compare
from mmspec.eval.code_suite import EAGLE_CHAIN_TOKENS
from mmspec.eval.datasets import code_items
from mmspec.registry import build_drafter, CHAIN_CONFIDENCE, DFLASH_LOOKUP_ALONE, DFLASH_LOOKUP_CUT, DFLASH_TREE, \
    DFLASH_TREE_LOOKUP
from mmspec.zoo import load
ap = argparse.ArgumentParser()
ap.add_argument("drafter"); ap.add_argument("--mode", default="t1"); ap.add_argument("--data", default=None)
ap.add_argument("--prompts", type=int, default=8); ap.add_argument("--repeats", type=int, default=2)
ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
entry = load("code-target"); tgt = entry.model
zoo_net = load("code-dflash").model
new_net = load_dflash(a.drafter)
eagle = load("code-eagle").model
extra = {"eagle-chain": lambda: build_drafter("eagle", eagle, target=tgt, num_tokens=EAGLE_CHAIN_TOKENS)}
for tag, net in (("", zoo_net), ("-new", new_net)):
    extra[f"dflash{tag}"] = lambda net=net: build_drafter("dflash", net, target=tgt, confidence=CHAIN_CONFIDENCE)
    extra[f"dflash-tree{tag}"] = lambda net=net: build_drafter("dflash", net, target=tgt, **DFLASH_TREE)
    if a.mode != "greedy":
        extra[f"dflash-n4{tag}"] = lambda net=net: build_drafter("dflash", net, target=tgt, num_tokens=4)
        extra[f"dflash-n2{tag}"] = lambda net=net: build_drafter("dflash", net, target=tgt, num_tokens=2)
        extra[f"dflash-tree8{tag}"] = lambda net=net: build_drafter("dflash", net, target=tgt, tree_nodes=8, top_k=4)
    if a.mode == "greedy":
        extra[f"dflash-tree-lookup{tag}"] = lambda net=net: build_drafter("dflash", net, target=tgt, **DFLASH_TREE_LOOKUP)
        extra[f"dflash-lookup-alone{tag}"] = lambda net=net: build_drafter("dflash", net, target=tgt,
                                                                           **DFLASH_LOOKUP_ALONE)
        extra[f"dflash-lookup-cut{tag}"] = lambda net=net: build_drafter("dflash", net, target=tgt, **DFLASH_LOOKUP_CUT)
items = code_items(a.prompts, a.data)
prompts = [entry.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids for i in items]
methods = ["plain", "chain", *extra] + (["prompt-lookup"] if a.mode == "greedy" else [])
rep = compare(tgt, load("code-drafter").model, prompts, methods=methods, max_new_tokens=64,
              do_sample=a.mode != "greedy", temperature=1.0, repeats=a.repeats, extra=extra)
out = {r["method"]: {k: r[k] for k in ("speedup", "tau", "seconds", "exact")} for r in rep["results"]}
json.dump({"args": vars(a), "results": out}, open(a.out, "w"), indent=1, default=str)
for m, r in out.items():
    print(f"{m:24s} {r['speedup']:.2f}x  tau {r['tau'] if r['tau'] is None else round(r['tau'], 2)}  exact {r['exact']}")
json.dump({"args": vars(a), "results": out, "cost_model": rep["cost_model"]}, open(a.out, "w"), indent=1, default=str)
