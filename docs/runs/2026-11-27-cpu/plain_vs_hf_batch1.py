"""HF plain `generate` against mmspec-plain at batch 1 on the code suite's 8 prompts, interleaved in one process
(EOS off): 1 new token (the prefill) and 64, median over 6 rounds after a warm-up round.

    python docs/runs/2026-11-27-cpu/plain_vs_hf_batch1.py
"""
import time, statistics, torch
from mmspec.zoo import load
from mmspec.eval.code_suite import code_prompts
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator
torch.set_num_threads(2)
t = load("code-target"); m = t.model
ps = code_prompts(t.tokenizer, 8)
g = SpeculativeGenerator(m, NoDrafter())
def hf(ids, n): return m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
def ours(ids, n): return g.generate(ids, max_new_tokens=n, eos_token_id=[])
res = {k: [] for k in ("hf1", "ours1", "hf64", "ours64")}
with torch.inference_mode():
    for r in range(7):
        tot = {k: 0.0 for k in res}
        for i, ids in enumerate(ps):
            items = [("hf1", hf, 1), ("ours1", ours, 1), ("hf64", hf, 64), ("ours64", ours, 64)]
            if (r + i) % 2: items = items[::-1]
            for k, f, n in items:
                t0 = time.perf_counter(); f(ids, n); tot[k] += time.perf_counter() - t0
        if r:
            for k in res: res[k].append(tot[k])
med = {k: statistics.median(v) for k, v in res.items()}
print({k: round(v, 3) for k, v in med.items()})
print("prefill ratio hf/ours", med["hf1"] / med["ours1"], "steps ratio", (med["hf64"] - med["hf1"]) / (med["ours64"] - med["ours1"]), "total", med["hf64"] / med["ours64"])
print("per round total ratios", sorted(round(a / b, 3) for a, b in zip(res["hf64"], res["ours64"])))
