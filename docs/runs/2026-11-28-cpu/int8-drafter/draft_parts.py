"""`dflash-lookup-cut`'s drafting parts timed inside decoding, 12 HumanEval prompts x 64 tokens after 2 warm-up calls
(ms per call): W=int8 (default) or W=float for the drafter's weights. Usage: [W=float] python draft_parts.py"""
import collections, os, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters import dflash_model as DM
from mmspec.drafters import lean_layer as LL
from mmspec.eval.datasets import code_items
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_LOOKUP_CUT
from mmspec.zoo import load
torch.set_num_threads(2)
entry = load("code-target"); tgt = entry.model
net = load("code-dflash").model
prompts = [entry.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids for i in code_items(12, "humaneval")]
d = DFlashDrafter(net, tgt, weights=os.environ.get("W","int8"), **DFLASH_LOOKUP_CUT)
T, C = collections.defaultdict(float), collections.Counter()
def timed(obj, name, label=None):
    f = getattr(obj, name); label = label or name
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); T[label] += time.perf_counter() - t; C[label] += 1
        return r
    setattr(obj, name, g)
for n in ["slot_hidden", "greedy_logits", "_greedy_rows", "_new_entries", "_catch_up", "propose_sized", "embed"]:
    timed(d, n)
timed(net, "block", "net.block"); timed(net, "rope", "net.rope")
import mmspec.cache as MC
timed(MC.SpecKVCache, "extend_committed"); timed(MC.SpecKVCache, "block_view")
orig_dl = DM.decoder_layer
def dl(*a, **k):
    t = time.perf_counter(); r = orig_dl(*a, **k); T["decoder_layer"] += time.perf_counter() - t; C["decoder_layer"] += 1; return r
DM.decoder_layer = dl
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
    print(f"{k:18s} {C[k]:4d} calls {1000*T[k]/C[k]:.3f} ms each, {1000*T[k]:.0f} ms total ({T[k]/tot:.1%})")
