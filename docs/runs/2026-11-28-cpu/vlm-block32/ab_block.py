"""The VLM block drafter grown to blocks of 32 (stage 3 of the vlm-dflash recipe, built into HOME) against the zoo's
(blocks of 16), side by side in one process on the VLM suite's prompts (greedy, EOS on, as the suite decodes; every
output compared with plain decoding's), with the EAGLE chain, the best feature drafter, as the reference.

    python ab_block.py --new-home HOME --prompts 8 --rounds 3 --out F"""
import argparse, json, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.eval.vlm_suite import feature_factories, vlm_prompts
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import CHAIN_CONFIDENCE, DFLASH_TREE
from mmspec.zoo import load

ap = argparse.ArgumentParser()
ap.add_argument("--new-home", required=True); ap.add_argument("--prompts", type=int, default=8)
ap.add_argument("--start", type=int, default=0); ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
target = load("vlm-target"); fac = feature_factories()
model = target.model
new = load("vlm-dflash", a.new_home).model
items = vlm_prompts(target.tokenizer, a.prompts, "mixed", start=a.start)
calls = [(p["input_ids"], {k: v for k, v in p.items() if k != "input_ids"}) for p in items]
eos = target.tokenizer.tokenizer.eos_token_id
gens = {"plain": SpeculativeGenerator(model, NoDrafter()),
        "eagle-chain": SpeculativeGenerator(model, fac["eagle-chain"]()),
        "dflash (zoo, block 16)": SpeculativeGenerator(model, fac["dflash"]()),
        "dflash-tree (zoo, block 16)": SpeculativeGenerator(model, fac["dflash-tree"]()),
        "dflash (block 32)": SpeculativeGenerator(model, DFlashDrafter(new, model, confidence=CHAIN_CONFIDENCE)),
        "dflash (block 32 run at 24)": SpeculativeGenerator(model, DFlashDrafter(new, model, block=24,
                                                                                 confidence=CHAIN_CONFIDENCE)),
        "dflash (block 32 run at 16)": SpeculativeGenerator(model, DFlashDrafter(new, model, block=16,
                                                                                 confidence=CHAIN_CONFIDENCE)),
        "dflash-tree (block 32)": SpeculativeGenerator(model, DFlashDrafter(new, model, **DFLASH_TREE))}
secs = {k: 0.0 for k in gens}; steps = {k: 0 for k in gens}; tokens = {k: 0 for k in gens}; exact = {k: 0 for k in gens}
ref = {}
for r in range(a.rounds + 1):  # round 0 warms up
    for i, (ids, kw) in enumerate(calls):
        for k, g in gens.items():
            t = time.perf_counter()
            o = g.generate(ids, max_new_tokens=64, eos_token_id=eos, **kw)
            dt = time.perf_counter() - t
            seq = o.sequences[0].tolist()
            if k == "plain":
                ref[i] = seq
            if r:
                secs[k] += dt; steps[k] += o.stats.target_forwards - 1; tokens[k] += o.stats.new_tokens - 1
                exact[k] += int(seq == ref[i])
n = a.rounds * len(calls)
out = {k: {"seconds": secs[k], "speedup": secs["plain"] / secs[k], "tau": tokens[k] / max(steps[k], 1),
           "steps_per_prompt": steps[k] / n, "exact": exact[k] / n} for k in gens}
for k, v in out.items():
    print(f"{k:30s} {v['speedup']:.3f}x  tau {v['tau']:.2f}  steps/prompt {v['steps_per_prompt']:.2f}  "
          f"exact {v['exact']:.2f}  vs eagle {secs['eagle-chain'] / secs[k]:.3f}")
json.dump({"args": vars(a), "results": out}, open(a.out, "w"), indent=1)
