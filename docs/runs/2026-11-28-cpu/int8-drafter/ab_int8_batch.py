"""Side by side at batch 2 and 4 (the code suite's 16 prompts taken in order as left-padded batches, 64 new tokens per
row, EOS off): `dflash-lookup-cut` with the drafter's float32 weights against `weights="int8"` (whose products over
more than 32 rows run in float, `MAX_INT8_ROWS`), rounds interleaved after a warm-up round, every row compared with
plain decoding's.

    python ab_int8_batch.py [--rounds 2] --out F"""
import argparse, json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from interleave import interleaved
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.eval.datasets import code_items
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_LOOKUP_CUT
from mmspec.zoo import load

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--rounds", type=int, default=2); ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
entry = load("code-target"); model, tok = entry.model, entry.tokenizer
net = load("code-dflash").model
tok.padding_side = "left"
texts = [i.text for i in code_items(16)]
gens = {"plain": SpeculativeGenerator(model, NoDrafter()),
        **{f"cut-{w}": SpeculativeGenerator(model, DFlashDrafter(net, model, weights=w, **DFLASH_LOOKUP_CUT))
           for w in ("float", "int8")}}
out = {}
for B in (2, 4):
    calls = []
    for i in range(0, len(texts), B):
        enc = tok(texts[i:i + B], return_tensors="pt", padding=True, add_special_tokens=False)
        calls.append((enc.input_ids, {"attention_mask": enc.attention_mask}))
    tot = interleaved(gens, calls, a.rounds, 64, [])
    out[B] = {k: {"speedup": tot["plain"]["seconds"] / v["seconds"], "exact": v["exact"] / (a.rounds * len(calls))}
              for k, v in tot.items()}
    for k, v in out[B].items():
        print(f"batch {B} {k:10s} {v['speedup']:.3f}x exact {v['exact']:.2f}")
json.dump({"args": vars(a), "results": out}, open(a.out, "w"), indent=1)
