"""Side by side at one row on the VLM suite's prompts (the zoo's vlm-dflash, its confident chain as the suite's
`dflash` row runs it, EOS stopping): plain decoding, the drafter in float32, and with int8 weight-only products
(`weights="int8"`); rounds interleaved, round 0 warms up, every output compared with plain decoding's.

    python ab_int8_vlm.py [--prompts 16] [--rounds 2] --out F"""
import argparse, json, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.eval.vlm_suite import vlm_prompts
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import CHAIN_CONFIDENCE
from mmspec.zoo import load

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--prompts", type=int, default=16); ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
target = load("vlm-target")
net = load("vlm-dflash").model
prompts = vlm_prompts(target.tokenizer, a.prompts, "mixed")
eos = target.tokenizer.tokenizer.eos_token_id
gens = {"plain": SpeculativeGenerator(target.model, NoDrafter()),
        **{f"dflash-{w}": SpeculativeGenerator(target.model, DFlashDrafter(net, target.model, weights=w,
                                                                            confidence=CHAIN_CONFIDENCE))
           for w in ("float", "int8")}}
tot = {k: {"seconds": 0.0, "tokens": 0, "forwards": 0, "exact": 0} for k in gens}
for r in range(a.rounds + 1):
    for p in prompts:
        ids = p["input_ids"]; kw = {k: v for k, v in p.items() if k != "input_ids"}
        ref = None
        for k, g in gens.items():
            t = time.perf_counter(); o = g.generate(ids, max_new_tokens=64, eos_token_id=eos, **kw)
            dt = time.perf_counter() - t
            seq = o.sequences[0].tolist(); ref = seq if k == "plain" else ref
            if r:
                tot[k]["seconds"] += dt; tot[k]["tokens"] += o.stats.new_tokens
                tot[k]["forwards"] += o.stats.target_forwards - 1; tot[k]["exact"] += int(seq == ref)
n = a.rounds * len(prompts)
out = {k: {"speedup": tot["plain"]["seconds"] / v["seconds"], "tau": v["tokens"] / max(v["forwards"], 1),
           "exact": v["exact"] / n, "seconds": v["seconds"]} for k, v in tot.items()}
for k, v in out.items():
    print(f"{k:14s} {v['speedup']:.3f}x  tau {v['tau']:.2f}  exact {v['exact']:.2f}")
json.dump({"args": vars(a), "results": out}, open(a.out, "w"), indent=1)
