"""Per-call trace of the default code policy (dflash-tree-lookup-auto) beside mmspec-plain at one batch size: each
call's steps (D drafted, L the lookup branch alone, p plain, s a plain step carrying an unverified draft), whether it read the target's
features, and where the time went.

    python docs/runs/2026-11-27-cpu/trace_policy.py 8 4   # batch size, rounds over the 16 prompts
    python docs/runs/2026-11-27-cpu/trace_policy.py 1 1 lookup-alone   # the drafter with lookup_alone=4
"""
import sys, time, statistics, torch
from mmspec.zoo import load
from mmspec.registry import build_drafter, DFLASH_LOOKUP_ALONE, DFLASH_TREE_LOOKUP
from mmspec.eval.code_suite import code_prompts
from mmspec.eval.batch_sweep import collate
from mmspec.drafters.adaptive import AdaptiveDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator
torch.set_num_threads(2)
target = load("code-target"); dfl = load("code-dflash").model
B = int(sys.argv[1]); rounds = int(sys.argv[2])
prompts = code_prompts(target.tokenizer, 16)
class T(AdaptiveDrafter):
    def begin(self, c):
        self.featured = c.hidden is not None; return super().begin(c)
    def propose(self, c, run):
        self._t = time.perf_counter(); return super().propose(c, run)
    def observe(self, c, run, tree, res, hidden=None):
        super().observe(c, run, tree, res, hidden)
        kind = ("D" if self.forwards != self._seen else "L") if tree.num_nodes > 1 else \
            ("s" if run.since_shadow == 0 and run.shadow_seconds else "p")  # L: the lookup branch alone, no forward
        self._seen = self.forwards
        self.log.append((kind, time.perf_counter() - self._t, (res.num_accepted+1).tolist() if tree.num_nodes>1 else None))
shape = DFLASH_LOOKUP_ALONE if sys.argv[3:] == ["lookup-alone"] else DFLASH_TREE_LOOKUP
ad = T(build_drafter("dflash", dfl, target=target.model, **shape))
ad.forwards = ad._seen = 0
_slot_hidden = ad.inner.slot_hidden
def counted(c, run):
    ad.forwards += 1
    return _slot_hidden(c, run)
ad.inner.slot_hidden = counted
g = SpeculativeGenerator(target.model, ad); gp = SpeculativeGenerator(target.model, NoDrafter())
batches = [collate(prompts[i:i+B], 0) for i in range(0, 16 - B + 1, B)]
with torch.inference_mode():
  for r in range(rounds):
    for k, b in enumerate(batches):
        t0 = time.perf_counter(); gp.generate(b["input_ids"], attention_mask=b["attention_mask"], max_new_tokens=64, eos_token_id=[]); tp = time.perf_counter() - t0
        ad.log = []
        t0 = time.perf_counter(); g.generate(b["input_ids"], attention_mask=b["attention_mask"], max_new_tokens=64, eos_token_id=[]); ta = time.perf_counter() - t0
        d = [x for x in ad.log if x[0] in "DL"]; p = [x for x in ad.log if x[0] in "ps"]
        print(f"r{r} b{k}: plain {tp:.2f}s auto {ta:.2f}s ratio {tp/ta:.2f} | D {len(d)} steps {sum(x[1] for x in d):.2f}s  p {len(p)} steps {sum(x[1] for x in p):.2f}s med {statistics.median([x[1] for x in p]) if p else 0:.3f}", flush=True)
        print("   ", "features" if ad.featured else "no features", "".join(x[0] for x in ad.log), [ (round(x[1],3), min(x[2])) for x in d][:12], flush=True)
