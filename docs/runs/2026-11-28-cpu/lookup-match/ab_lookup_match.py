"""Side by side in one process: `dflash-lookup-cut` as shipped (a lone lookup step needs a match of at least
``ALONE_MATCH`` = 2 tokens) against the rule before (any match), on the same prompts, rounds interleaved (greedy,
every output compared with plain decoding's).

    python ab_lookup_match.py [--data humaneval] --prompts 24 --rounds 2 --out F"""
import argparse, json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.eval.datasets import code_items
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_LOOKUP_CUT
from mmspec.zoo import load
from any_match import AnyMatch
from interleave import interleaved


ap = argparse.ArgumentParser()
ap.add_argument("--data", default=None); ap.add_argument("--prompts", type=int, default=8)
ap.add_argument("--rounds", type=int, default=2); ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
target = load("code-target"); net = load("code-dflash").model
items = code_items(a.prompts, a.data)
calls = [(target.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids, {}) for i in items]
model = target.model
gens = {"plain": SpeculativeGenerator(model, NoDrafter()),
        "any-match": SpeculativeGenerator(model, AnyMatch(net, model, **DFLASH_LOOKUP_CUT)),
        "two-token-match": SpeculativeGenerator(model, DFlashDrafter(net, model, **DFLASH_LOOKUP_CUT))}
T = interleaved(gens, calls, a.rounds, 64, [])
n = a.rounds * len(calls)
out = {k: {"seconds": t["seconds"], "speedup": T["plain"]["seconds"] / t["seconds"],
           "tau": t["tokens"] / max(t["forwards"] - n, 1), "exact": t["exact"] / n} for k, t in T.items()}
for k, v in out.items():
    print(f"{k:16s} {v['speedup']:.3f}x  tau {v['tau']:.2f}  exact {v['exact']:.2f}")
json.dump({"args": vars(a), "results": out}, open(a.out, "w"), indent=1)
