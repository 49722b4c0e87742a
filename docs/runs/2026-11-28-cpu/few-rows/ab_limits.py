"""Side by side in one process: `dflash-lookup-cut` (zoo:code-dflash, registry settings, int8 weights) with the
few-row products (`few_rows.py` here, installed around each call) under several row limits, and stock (x·Wᵀ everywhere); greedy, rounds
interleaved, every output compared with plain decoding's. A variant "M" runs W·xᵀ over 2..M rows, "MpP" also pads
M+1..P rows to P.

    python ab_limits.py [--data humaneval] --prompts 12 --rounds 2 --out F [--variants stock,8,11,11p16,16]
    (METHOD=eagle: the EAGLE chain of 8 instead)"""
import json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
variants = "stock,8,11,11p16,16"
if "--variants" in sys.argv:
    i = sys.argv.index("--variants"); variants = sys.argv[i + 1]; del sys.argv[i: i + 2]
from interleave import code_run, interleaved, summary
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.feature import FeatureDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator
import few_rows
from mmspec.registry import DFLASH_LOOKUP_CUT
from mmspec.zoo import load


class Limited:
    def __init__(self, gen, variant: str):
        self.gen, self.variant = gen, variant

    def generate(self, *a, **k):
        v = self.variant
        if v == "stock":
            return self.gen.generate(*a, **k)
        m, _, p = v.partition("p")
        few_rows.MAX_ROWS, few_rows.PAD_ROWS = int(m), int(p or m)
        with few_rows.few_row_products(self.gen.target):
            return self.gen.generate(*a, **k)


a, model, net, calls = code_run(__doc__)
if os.environ.get("METHOD") == "eagle":
    d = FeatureDrafter(load("code-eagle").model, model, num_tokens=8, weights="auto")
else:
    d = DFlashDrafter(net, model, weights="auto", **DFLASH_LOOKUP_CUT)
g = SpeculativeGenerator(model, d)
gens = {"plain": SpeculativeGenerator(model, NoDrafter()), **{v: Limited(g, v) for v in variants.split(",")}}
out = summary(interleaved(gens, calls, a.rounds, 64, []), a.rounds, calls)
json.dump({"args": vars(a), "variants": variants, "results": out}, open(a.out, "w"), indent=1)
