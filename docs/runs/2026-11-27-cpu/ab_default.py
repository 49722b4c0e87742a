"""Interleaved in-process A/B on the code suite (EOS off, 64 new tokens a row, the 16 prompts as batches): HF plain,
mmspec-plain and the default policy (dflash-tree-lookup-auto; a third argument adds always drafting). Per batch size,
each round runs every method on every batch in rotating order; round 0 is a warm-up; median [range] over rounds.

    python docs/runs/2026-11-27-cpu/ab_default.py 8,16 8
"""
import sys, time, statistics, torch
from mmspec.zoo import load
from mmspec.registry import build_drafter, DFLASH_TREE_LOOKUP
from mmspec.eval.code_suite import code_prompts
from mmspec.eval.batch_sweep import collate
from mmspec.drafters.adaptive import AdaptiveDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator
torch.set_num_threads(2)
target = load("code-target"); dfl = load("code-dflash").model
sizes = [int(x) for x in sys.argv[1].split(",")]; rounds = int(sys.argv[2])
prompts = code_prompts(target.tokenizer, 16)
def dd(): return build_drafter("dflash", dfl, target=target.model, **DFLASH_TREE_LOOKUP)
gens = {"mmspec-plain": SpeculativeGenerator(target.model, NoDrafter()),
        "auto": SpeculativeGenerator(target.model, AdaptiveDrafter(dd()))}
if len(sys.argv) > 3: gens["always"] = SpeculativeGenerator(target.model, dd())
def hf(b): return target.model.generate(b["input_ids"], attention_mask=b["attention_mask"], max_new_tokens=64, do_sample=False, pad_token_id=0, eos_token_id=None)
names = ["plain"] + list(gens)
with torch.inference_mode():
  for B in sizes:
    batches = [collate(prompts[i:i+B], 0) for i in range(0, 16 - B + 1, B)]
    times = {n: [] for n in names}
    for r in range(rounds + 1):
        tot = {n: 0.0 for n in names}
        for k, b in enumerate(batches):
            order = names[(r + k) % len(names):] + names[:(r + k) % len(names)]
            for n in order:
                t0 = time.perf_counter()
                if n == "plain": out = hf(b)
                else: out = gens[n].generate(b["input_ids"], attention_mask=b["attention_mask"], max_new_tokens=64, eos_token_id=[]).sequences
                tot[n] += time.perf_counter() - t0
        if r:
            for n in names: times[n].append(tot["plain"] / tot[n])
    print(f"batch {B}: " + "  ".join(f"{n} {statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]" for n, v in times.items() if n != "plain"), flush=True)
