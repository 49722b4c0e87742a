"""Per step of `dflash-lookup-cut` on 24 HumanEval prompts (or the suite's with `suite`): how many steps verified a lookup
continuation alone and how many drafted the DDTree, their nodes and the tokens they emitted.

    python trace_steps.py [humaneval]"""
import os, sys, collections
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.eval.datasets import code_items
from mmspec.registry import DFLASH_LOOKUP_CUT
from mmspec.generator import SpeculativeGenerator
from mmspec.zoo import load
torch.set_num_threads(2)
entry = load("code-target"); tgt = entry.model
net = load("code-dflash").model
items = code_items(24, sys.argv[1] if len(sys.argv) > 1 else "humaneval")
prompts = [entry.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids for i in items]
d = DFlashDrafter(net, tgt, **DFLASH_LOOKUP_CUT)
kinds = []
orig_alone = d._lookup_alone
def alone(*a, **k):
    t = orig_alone(*a, **k); kinds.append(("alone", None if t is None else int(t.valid.sum()))); return t
d._lookup_alone = alone
orig_ps = d.propose_sized
def ps(*a, **k):
    t = orig_ps(*a, **k); kinds[-1] = ("tree", int(t[0].valid.sum())); return t
d.propose_sized = ps
gen = SpeculativeGenerator(tgt, d)
rows = []
for p in prompts:
    kinds.clear()
    o = gen.generate(p, max_new_tokens=64, eos_token_id=[])
    acc = o.stats.accept_lengths[0][1:]
    rows += list(zip(kinds, acc))
S = collections.defaultdict(lambda: [0, 0, 0])
for (k, n), a in rows:
    s = S[k]; s[0] += 1; s[1] += n; s[2] += a
for k, (c, n, a) in S.items():
    print(k, "steps", c, "mean nodes", round(n / c, 1), "mean emitted", round(a / c, 2))
hist = collections.Counter((k, a) for (k, n), a in rows)
for k in ("alone", "tree"):
    print(k, sorted((a, c) for (kk, a), c in hist.items() if kk == k))
