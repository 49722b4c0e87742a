"""Side by side in one process: the code target's EAGLE-style chain of 8 (zoo:code-eagle, the `eagle-chain` row and
the zoo's sampling default) with the drafter's float32 weights against int8 weight-only products
(`FeatureDrafter(weights="int8")`: its layer, fc and the LM head it drafts through), greedy, on the same prompts,
rounds interleaved, every output compared with plain decoding's; also the drafting step's mean time (propose, ms).

    python ab_int8_eagle.py [--data humaneval] --prompts 24 --rounds 2 --out F
    SAMPLE=1 python ab_int8_eagle.py ...   (T = 1: "exact" then means nothing; speed and τ do)"""
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
from interleave import code_run, weights_ab
from mmspec.drafters.feature import FeatureDrafter
from mmspec.zoo import load

a, model, _, calls = code_run(__doc__)
if os.environ.get("SAMPLE"):
    calls = [(ids, {"do_sample": True, "temperature": 1.0}) for ids, _ in calls]
net = load("code-eagle").model
drafters = {w: FeatureDrafter(net, model, num_tokens=8, weights=w) for w in ("float", "int8")}
weights_ab(a, model, calls, drafters, "propose", "eagle")
