"""Trace the adaptive policy on HumanEval at one row, interleaved with plain decoding and always drafting (`dflash-lookup-cut`): per call the kinds of steps (D drafted, p plain, s plain with an unverified draft) and the tokens of drafted steps; `old` is the policy without the pooled prior (a one-row call judged on its own steps alone). Usage: python trace_auto.py [prompts] > trace.txt"""
import os, sys, time
sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.eval.datasets import code_items
from mmspec.zoo import load
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.drafters.adaptive import AdaptiveDrafter
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_LOOKUP_CUT
torch.set_num_threads(2)
target = load("code-target"); net = load("code-dflash").model; model = target.model
n = int(sys.argv[1]) if len(sys.argv) > 1 else 24
calls = [target.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids for i in code_items(n, "humaneval")]
class NoPrior(AdaptiveDrafter):
    def begin(self, context):
        run = super().begin(context)
        run.drafted.prior = None
        return run
auto = AdaptiveDrafter(DFlashDrafter(net, model, **DFLASH_LOOKUP_CUT))
old = NoPrior(DFlashDrafter(net, model, **DFLASH_LOOKUP_CUT))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_log import log_steps
log = log_steps()
gens = {"plain": SpeculativeGenerator(model, NoDrafter()),
        "always": SpeculativeGenerator(model, DFlashDrafter(net, model, **DFLASH_LOOKUP_CUT)),
        "old": SpeculativeGenerator(model, old), "auto": SpeculativeGenerator(model, auto)}
tot = {k: 0.0 for k in gens}
for r in range(2):
    for i, ids in enumerate(calls):
        per = {}
        for k, g in gens.items():
            log.clear()
            t = time.perf_counter(); o = g.generate(ids, max_new_tokens=64); dt = time.perf_counter() - t
            per[k] = dt
            if r: tot[k] += dt
            if k in ("auto", "old"):
                s = "".join(x[0] for x in log)
                ts = [x[1] for x in log if x[0] == "D"]
                print(f"{r}{k[:2]} {i:2d} plain {per['plain']*1e3:5.0f} always {per['always']*1e3:5.0f} auto {dt*1e3:5.0f}  {s}  D-tok {ts}", flush=True)
print({k: tot["plain"] / v for k, v in tot.items()})
