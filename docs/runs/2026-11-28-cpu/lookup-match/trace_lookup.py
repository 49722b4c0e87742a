"""Per step of `dflash-lookup-cut` under the rule before ALONE_MATCH (a lone lookup step after a match of any length),
on 24 HumanEval prompts (or the suite's with `suite`): whether it verified the lookup continuation alone, the
length of the n-gram it matched (n), how many earlier places matched (hits), how far the match really reaches (match),
and the tokens the step emitted (acc). Written as JSON lines to OUT.

    python trace_lookup.py humaneval|suite OUT"""
import os, sys, collections, json
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from any_match import AnyMatch
from mmspec.eval.datasets import code_items
from mmspec.registry import DFLASH_LOOKUP_CUT
from mmspec.generator import SpeculativeGenerator
from mmspec.zoo import load
torch.set_num_threads(2)
entry = load("code-target"); tgt = entry.model
net = load("code-dflash").model
src = sys.argv[1] if len(sys.argv) > 1 else "humaneval"
items = code_items(24, None if src == "suite" else src)
prompts = [entry.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids for i in items]
d = AnyMatch(net, tgt, **DFLASH_LOOKUP_CUT)
info = []
def match_info(ctx):
    L = ctx.shape[0]
    for n in range(min(3, L - 1), 0, -1):
        windows = ctx.unfold(0, n, 1)[:-1]
        hits = torch.nonzero((windows == ctx[-n:]).all(1)).flatten()
        if hits.numel():
            # longest agreement of the suffix beyond n (how long the match really is)
            best = 0
            for h in hits.tolist():
                m = n
                while h - (m - n) - 1 >= 0 and L - 1 - m >= 0 and ctx[h - (m - n) - 1] == ctx[L - 1 - m] and m < 64:
                    m += 1
                best = max(best, m)
            return n, hits.numel(), best
    return 0, 0, 0
orig_alone = d._lookup_alone
def alone(state, branches=None):
    t = orig_alone(state, branches)
    n, cnt, full = match_info(state.row(0))
    info.append(dict(kind="alone" if t is not None else "tree", n=n, hits=cnt, match=full,
                     cont=len(branches[0][0]) if branches else 0, pos=int(state.lengths[0])))
    return t
d._lookup_alone = alone
gen = SpeculativeGenerator(tgt, d)
rows = []
for p in prompts:
    info.clear()
    o = gen.generate(p, max_new_tokens=64, eos_token_id=[])
    acc = o.stats.accept_lengths[0][1:]
    prev = None
    for i, a in zip(info, acc):
        i["acc"] = int(a); i["prev"] = prev; prev = (i["kind"], int(a)); rows.append(i)
json.dump(rows, open(sys.argv[2], "w"))
print(len(rows))
by = collections.defaultdict(list)
for r in rows:
    by[(r["kind"], r["n"])].append(r["acc"])
for (kind, n), acc in sorted(by.items()):
    print(f"{kind:5s} n={n}: {len(acc):4d} steps, {sum(acc) / len(acc):.2f} tokens a step, "
          f"{sum(a == 1 for a in acc) / len(acc):.0%} emitted the root's token alone")
