"""Side by side in one process: the zoo's code-dflash drafting from its draft vocabulary (the default since it carries
one) against the same drafter drafting from the whole vocabulary (`draft_vocab=range(V)`), for the DDTree and
`dflash-lookup-cut`, same prompts, rounds interleaved (greedy; every output compared with plain decoding's).

    python ab_vocab.py [--data humaneval] --prompts 8 --rounds 2 --out F"""
import argparse, json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.eval.datasets import code_items
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_LOOKUP_CUT, DFLASH_TREE
from mmspec.zoo import load
from interleave import interleaved

ap = argparse.ArgumentParser()
ap.add_argument("--data", default=None); ap.add_argument("--prompts", type=int, default=8)
ap.add_argument("--rounds", type=int, default=2); ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
target = load("code-target"); net = load("code-dflash").model
assert net.draft_vocab is not None, "zoo:code-dflash carries no draft vocabulary (run add_vocab.py first)"
items = code_items(a.prompts, a.data)
calls = [(target.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids, {}) for i in items]
model = target.model
whole = range(net.config.vocab_size)
gens = {"plain": SpeculativeGenerator(model, NoDrafter())}
for kind, kw in (("tree", DFLASH_TREE), ("cut", DFLASH_LOOKUP_CUT)):
    gens[f"{kind}/whole"] = SpeculativeGenerator(model, DFlashDrafter(net, model, draft_vocab=whole, **kw))
    gens[f"{kind}/draft-vocab"] = SpeculativeGenerator(model, DFlashDrafter(net, model, **kw))
R = interleaved(gens, calls, a.rounds, 64, [])
n = a.rounds * len(calls)
out = {k: {"seconds": t["seconds"], "speedup": R["plain"]["seconds"] / t["seconds"],
           "tau": t["tokens"] / max(t["forwards"] - n, 1), "exact": t["exact"] / n} for k, t in R.items()}
for k, v in out.items():
    print(f"{k:18s} {v['speedup']:.3f}x  tau {v['tau']:.2f}  exact {v['exact']:.2f}")
json.dump({"args": vars(a), "draft_vocab_ids": len(net.draft_vocab), "results": out}, open(a.out, "w"), indent=1)
