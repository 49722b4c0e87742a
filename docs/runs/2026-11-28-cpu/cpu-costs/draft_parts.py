"""The parts of the code DFlash drafter's drafting step (DDTree, 16 nodes × top 4), timed inside decoding (8 suite
prompts × 64 tokens, after 2 warm-up calls) and alone (the same step's inputs run 200 times in a row), beside a
plain step of the target: what the cost model's c_d is made of, and how much slower each part runs inside decoding.

    python draft_parts.py"""
import collections, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import _GREEDY, DFlashDrafter
from mmspec.eval.datasets import code_items
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_TREE
from mmspec.zoo import load

torch.set_num_threads(2)
entry = load("code-target"); tgt = entry.model
net = load("code-dflash").model
prompts = [entry.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids for i in code_items(8)]
d = DFlashDrafter(net, tgt, **DFLASH_TREE)
T, C, last = collections.defaultdict(float), collections.Counter(), {}


def timed(name):
    f = getattr(d, name)

    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); T[name] += time.perf_counter() - t; C[name] += 1
        last[name] = a
        return r
    setattr(d, name, g)
    return f


raw = {n: timed(n) for n in ["propose", "_catch_up", "slot_hidden", "head", "_ddtree"]}
gen = SpeculativeGenerator(tgt, d)
for p in prompts[:2]:
    gen.generate(p, max_new_tokens=64, eos_token_id=[])
T.clear(); C.clear()
for p in prompts:
    gen.generate(p, max_new_tokens=64, eos_token_id=[])


def alone(fn, n=200):
    for _ in range(10):
        fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return 1000 * sorted(ts)[n // 2]


context, run = last["slot_hidden"]
with torch.no_grad():
    h = raw["slot_hidden"](context, run)
    logits = raw["head"](h)
    iso = {"slot_hidden": alone(lambda: raw["slot_hidden"](context, run)), "head": alone(lambda: raw["head"](h)),
           "_ddtree": alone(lambda: raw["_ddtree"](context.state.roots, logits, _GREEDY, None, d.tree_nodes))}
    out = tgt(prompts[0], use_cache=True)
    cache, x = out.past_key_values, prompts[0][:, -1:]
    plain = alone(lambda: tgt(x, past_key_values=cache, use_cache=True), n=30)  # (the cache grows: a bound)
print(f"plain target step about {plain:.2f} ms")
for k in T:
    ms = 1000 * T[k] / C[k]
    extra = f", alone {iso[k]:.2f} ms" if k in iso else ""
    print(f"{k:12s} {C[k]:4d} calls, {ms:.2f} ms each inside decoding ({ms / plain:.2f} of a plain step){extra}")
