"""The VLM block drafter grown to blocks of 32 (stage 3 of the vlm-dflash recipe, built into HOME) against the zoo's
(blocks of 16), side by side in one process on the VLM suite's prompts (greedy, EOS on, as the suite decodes; every
output compared with plain decoding's), with the EAGLE chain, the best feature drafter, as the reference.

    python ab_block.py --new-home HOME --prompts 8 --rounds 3 --out F"""
import argparse, json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.eval.vlm_suite import feature_factories, vlm_prompts
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import CHAIN_CONFIDENCE, DFLASH_TREE
from mmspec.zoo import load
from interleave import interleaved

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
T = interleaved(gens, calls, a.rounds, 64, eos)
secs = {k: t["seconds"] for k, t in T.items()}; exact = {k: t["exact"] for k, t in T.items()}
n = a.rounds * len(calls)
steps = {k: t["forwards"] - n for k, t in T.items()}; tokens = {k: t["tokens"] - n for k, t in T.items()}  # after the prefill
out = {k: {"seconds": secs[k], "speedup": secs["plain"] / secs[k], "tau": tokens[k] / max(steps[k], 1),
           "steps_per_prompt": steps[k] / n, "exact": exact[k] / n} for k in gens}
for k, v in out.items():
    print(f"{k:30s} {v['speedup']:.3f}x  tau {v['tau']:.2f}  steps/prompt {v['steps_per_prompt']:.2f}  "
          f"exact {v['exact']:.2f}  vs eagle {secs['eagle-chain'] / secs[k]:.3f}")
json.dump({"args": vars(a), "results": out}, open(a.out, "w"), indent=1)
