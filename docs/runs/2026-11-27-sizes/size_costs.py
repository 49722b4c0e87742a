"""What a DDTree step costs at each of DFlash's tree sizes (code suite, default dflash-tree-lookup drafter): a policy
forced to cycle sizes 0..3 and a plain step, recording each step's measured cost, and for smaller sizes the cost the
adaptive policy estimates from a size-0 step (StepCost.at_width) and the tokens they would have emitted.

    python docs/runs/2026-11-27-sizes/size_costs.py 1,4,16
"""
import sys, time, statistics, torch
from mmspec.zoo import load
from mmspec.registry import build_drafter, DFLASH_TREE_LOOKUP
from mmspec.eval.code_suite import code_prompts
from mmspec.eval.batch_sweep import collate
from mmspec.drafters import adaptive
from mmspec.drafters.adaptive import AdaptiveDrafter
from mmspec.generator import SpeculativeGenerator
torch.set_num_threads(2)
target = load("code-target"); dfl = load("code-dflash").model
prompts = code_prompts(target.tokenizer, 16)
rec = []
class Forced(AdaptiveDrafter):
    def _choose(self, run):
        adaptive.AdaptiveDrafter._choose_size(run)
        k = run.step % 5
        if k == 4: return False
        run.arm = k; run.since_largest = 0
        return True
    def observe(self, context, run, tree, result, hidden=None):
        before = [len(a.samples) for a in run.arms] + [len(run.plain.samples)]
        super().observe(context, run, tree, result, hidden)
        if run.step > 5:
            if run.drafting: rec.append((run.arm_run, run.arms[run.arm_run].samples[-1], [a.samples[-1] for a in run.arms[run.arm_run:]]))
            else: rec.append(("p", run.plain.samples[-1]))
for B in [int(x) for x in sys.argv[1].split(",")]:
    rec.clear()
    gen = SpeculativeGenerator(target.model, Forced(build_drafter("dflash", dfl, target=target.model, **DFLASH_TREE_LOOKUP), tree_sizes=True))
    with torch.inference_mode():
        for r in range(2):
            for i in range(0, 16 - B + 1, B):
                b = collate(prompts[i:i+B], 0)
                gen.generate(b["input_ids"], attention_mask=b["attention_mask"], max_new_tokens=64, eos_token_id=[])
    plain = statistics.median(s[1][0] for s in rec if s[0] == "p")
    print(f"batch {B}: plain step {plain*1e3:.1f} ms")
    for a in range(4):
        own = [s[1][0] for s in rec if s[0] == a]
        c = [s[1][0][0] for s in rec if s[0] == a]
        meas = statistics.median(x.draft + x.verify for x in c)
        dr = statistics.median(x.draft for x in c)
        wid = statistics.median(x.width for x in c)
        est = [s[2][a][0][0].at_width(s[2][a][0][1], plain) for s in rec if s[0] == 0 and a > 0]
        toks = [statistics.fmean(t for t in s[2][a][1] if t is not None) for s in rec if s[0] == 0]
        print(f"  size {a}: width {wid}, measured {meas*1e3:.1f} ms (draft {dr*1e3:.1f}), estimated from size-0 steps {statistics.median(est)*1e3 if est else float('nan'):.1f} ms, mean tokens (size-0 steps) {statistics.fmean(toks):.2f}")
