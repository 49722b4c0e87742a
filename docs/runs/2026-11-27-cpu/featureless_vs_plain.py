"""A call of the default code policy run without target features (its batch size's memory kept hopeless) against
mmspec-plain, 12 interleaved calls at one batch size after 3 warm-up calls each: the median seconds of each.

    python docs/runs/2026-11-27-cpu/featureless_vs_plain.py 16
"""
import sys, time, torch, statistics
from mmspec.zoo import load
from mmspec.registry import build_drafter, DFLASH_TREE_LOOKUP
from mmspec.eval.code_suite import code_prompts
from mmspec.eval.batch_sweep import collate
from mmspec.drafters.adaptive import AdaptiveDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator
torch.set_num_threads(2)
target = load("code-target"); dfl = load("code-dflash").model
B = int(sys.argv[1])
prompts = code_prompts(target.tokenizer, 16)
b = collate(prompts[:B], 0)
gp = SpeculativeGenerator(target.model, NoDrafter())
ad = AdaptiveDrafter(build_drafter("dflash", dfl, target=target.model, **DFLASH_TREE_LOOKUP))
ga = SpeculativeGenerator(target.model, ad)
def run(g): return g.generate(b["input_ids"], attention_mask=b["attention_mask"], max_new_tokens=64, eos_token_id=[])
with torch.inference_mode():
    for _ in range(3): run(gp); run(ga)
    ts = {"plain": [], "auto": []}
    for i in range(12):
        for name, g in (("plain", gp), ("auto", ga)):
            if name == "auto": ad._memory[B]["plain_calls"] = 1  # keep it featureless
            t0 = time.perf_counter(); run(g); ts[name].append(time.perf_counter() - t0)
    print({k: round(statistics.median(v), 3) for k, v in ts.items()}, "ratio of medians", statistics.median(ts["plain"]) / statistics.median(ts["auto"]))
    print("per-pair", sorted(round(a / b_, 3) for a, b_ in zip(ts["plain"], ts["auto"])))
