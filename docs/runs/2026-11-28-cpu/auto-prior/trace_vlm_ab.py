"""Side by side at one row on the VLM suite (EOS off): plain, always drafting (vlm-dflash chain), and the adaptive policy three ways: old (a won opening resumes plain steps), noprior (it drafts on, judged on its own steps), auto (as shipped: drafts on, pooled with the recent calls). Rounds 0-1 warm the policies, round 2 is printed per call; totals over rounds 1-2. Usage: python trace_vlm_ab.py 16 > trace_vlm_ab.txt"""
import os, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.eval.vlm_suite import vlm_prompts
from mmspec.generator import SpeculativeGenerator
from mmspec.zoo import load
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.drafters.adaptive import AdaptiveDrafter
from mmspec.registry import CHAIN_CONFIDENCE
torch.set_num_threads(2)
target = load("vlm-target")
net = load("vlm-dflash").model
prompts = vlm_prompts(target.tokenizer, int(sys.argv[1]), "mixed")
class Old(AdaptiveDrafter):
    def _go_on_drafting(self, run):
        pass
class NoPrior(AdaptiveDrafter):
    def _go_on_drafting(self, run):
        super()._go_on_drafting(run); run.drafted.prior = None
mk = lambda cls: cls(DFlashDrafter(net, target.model, confidence=CHAIN_CONFIDENCE))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_log import log_steps
log = log_steps()
gens = {"plain": SpeculativeGenerator(target.model, NoDrafter()),
        "always": SpeculativeGenerator(target.model, DFlashDrafter(net, target.model, confidence=CHAIN_CONFIDENCE)),
        "old": SpeculativeGenerator(target.model, mk(Old)), "noprior": SpeculativeGenerator(target.model, mk(NoPrior)),
        "auto": SpeculativeGenerator(target.model, mk(AdaptiveDrafter))}
tot = {k: 0.0 for k in gens}
for r in range(3):
    for i, p in enumerate(prompts):
        ids = p["input_ids"]; kw = {k: v for k, v in p.items() if k != "input_ids"}
        per = {}
        for k, g in gens.items():
            log.clear()
            t = time.perf_counter(); o = g.generate(ids, max_new_tokens=64, eos_token_id=[], **kw); dt = time.perf_counter() - t
            per[k] = (dt, o.stats.accept_lengths[0])
            if r: tot[k] += dt
        if r == 2:
            s = "".join(x[0] for x in log)
            print(f"{i:2d} " + " ".join(f"{k} {v[0]*1e3:5.0f}" for k, v in per.items()) + " " + s)
            print("   always", per["always"][1])
            print("   autoD ", [x[1] for x in log if x[0] == "D"])
print({k: tot["plain"] / v for k, v in tot.items()})
