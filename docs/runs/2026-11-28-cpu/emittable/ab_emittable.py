"""Side by side in one process: the loop verifying only the nodes that could be emitted (the committed
``SpeculativeGenerator._emittable``: nothing deeper than a row's remaining budget, nothing below a drafted EOS) against
verifying every drafted node, for the same drafters on the same prompts, rounds interleaved (greedy; every output
is compared with plain decoding's).

    python ab_emittable.py --suite vlm --methods dflash,eagle-chain --rounds 3 --out F
    python ab_emittable.py --suite code [--data humaneval --prompts 24] --methods dflash-lookup-cut,eagle-chain --out F"""
import argparse, json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator
from mmspec.zoo import load
from interleave import interleaved


class EveryNode(SpeculativeGenerator):
    """The loop before: every drafted node verified."""
    @staticmethod
    def _emittable(call, tree):
        return tree, None


ap = argparse.ArgumentParser()
ap.add_argument("--suite", choices=["vlm", "code"], required=True)
ap.add_argument("--data", default=None); ap.add_argument("--prompts", type=int, default=8)
ap.add_argument("--methods", required=True); ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--max-new-tokens", type=int, default=None); ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
if a.suite == "vlm":
    from mmspec.eval.vlm_suite import feature_factories, vlm_prompts
    target = load("vlm-target"); fac = feature_factories()
    items = vlm_prompts(target.tokenizer, a.prompts, "mixed")
    calls = [(p["input_ids"], {k: v for k, v in p.items() if k != "input_ids"}) for p in items]
    eos = target.tokenizer.tokenizer.eos_token_id
    budget = a.max_new_tokens or 48
else:
    from mmspec.eval.code_suite import diffusion_factories
    from mmspec.eval.datasets import code_items
    target = load("code-target")
    fac = diffusion_factories()
    items = code_items(a.prompts, a.data)
    calls = [(target.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids, {}) for i in items]
    eos = []  # the code suite decodes its whole budget
    budget = a.max_new_tokens or 64
model = target.model
gens = {"plain": SpeculativeGenerator(model, NoDrafter())}
for m in a.methods.split(","):
    gens[f"{m}/emittable"] = SpeculativeGenerator(model, fac[m]())
    gens[f"{m}/every-node"] = EveryNode(model, fac[m]())
T = interleaved(gens, calls, a.rounds, budget, eos)
secs = {k: t["seconds"] for k, t in T.items()}; steps = {k: t["forwards"] for k, t in T.items()}
tokens = {k: t["tokens"] for k, t in T.items()}; exact = {k: t["exact"] for k, t in T.items()}
n = a.rounds * len(calls)
out = {k: {"seconds": secs[k], "speedup": secs["plain"] / secs[k], "tau": tokens[k] / max(steps[k] - n, 1),
           "exact": exact[k] / n} for k in gens}
for k, v in out.items():
    print(f"{k:32s} {v['speedup']:.3f}x  tau {v['tau']:.2f}  exact {v['exact']:.2f}")
json.dump({"args": vars(a), "results": out}, open(a.out, "w"), indent=1)
