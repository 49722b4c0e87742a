"""The parts of `dflash-lookup-cut`'s drafting inside decoding, 12 HumanEval prompts × 64 tokens after 2 warm-up calls: calls, ms each and share of the whole time (lookup_cut_parts.txt: before greedy_logits, float weights). W=int8 / W=float: the drafter's weights (default float, the class's). Usage: [W=int8] python lookup_cut_parts.py"""
import collections, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.eval.datasets import code_items
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_LOOKUP_CUT
from mmspec.zoo import load
torch.set_num_threads(2)
entry = load("code-target"); tgt = entry.model
net = load("code-dflash").model
prompts = [entry.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids for i in code_items(12, "humaneval")]
d = DFlashDrafter(net, tgt, weights=os.environ.get("W", "float"), **DFLASH_LOOKUP_CUT)
T, C = collections.defaultdict(float), collections.Counter()
def timed(obj, name):
    f = getattr(obj, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); T[name] += time.perf_counter() - t; C[name] += 1
        return r
    setattr(obj, name, g)
for n in ["propose", "slot_hidden", "head", "greedy_logits", "_ddtree", "_greedy_rows", "_new_entries", "_branches",
          "_lookup_alone", "propose_sized", "observe"]:
    if hasattr(d, n):  # (the parts this version has)
        timed(d, n)
timed(d.net, "block")
gen = SpeculativeGenerator(tgt, d)
for p in prompts[:2]:
    gen.generate(p, max_new_tokens=64, eos_token_id=[])
T.clear(); C.clear()
t0 = time.perf_counter()
for p in prompts:
    gen.generate(p, max_new_tokens=64, eos_token_id=[])
tot = time.perf_counter() - t0
print(f"total {tot:.2f}s")
for k in T:
    print(f"{k:14s} {C[k]:4d} calls {1000*T[k]/C[k]:.2f} ms each, {1000*T[k]:.0f} ms total ({T[k]/tot:.1%})")
