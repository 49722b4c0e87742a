"""Side by side in one process: the code target's EAGLE-style chain of 8 (zoo:code-eagle, the `eagle-chain` row and
the zoo's sampling default) with the drafter's float32 weights against int8 weight-only products
(`FeatureDrafter(weights="int8")`: its layer, fc and the LM head it drafts through), greedy, on the same prompts,
rounds interleaved, every output compared with plain decoding's; also the drafting step's mean time (propose, ms).

    python ab_int8_eagle.py [--data humaneval] --prompts 24 --rounds 2 --out F
    SAMPLE=1 python ab_int8_eagle.py ...   (T = 1: "exact" then means nothing; speed and τ do)"""
import json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
from interleave import code_run, interleaved, summary, timed_calls
from mmspec.drafters.feature import FeatureDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator
from mmspec.zoo import load

a, model, _, calls = code_run(__doc__)
if os.environ.get("SAMPLE"):
    calls = [(ids, {"do_sample": True, "temperature": 1.0}) for ids, _ in calls]
net = load("code-eagle").model
drafters = {w: FeatureDrafter(net, model, num_tokens=8, weights=w) for w in ("float", "int8")}
timing = timed_calls(drafters, "propose")
gens = {"plain": SpeculativeGenerator(model, NoDrafter()),
        **{f"eagle-{w}": SpeculativeGenerator(model, d) for w, d in drafters.items()}}
out = summary(interleaved(gens, calls, a.rounds, 64, []), a.rounds, calls)
steps = {w: 1000 * s / max(n, 1) for w, (s, n) in timing.items()}
print("drafting step (propose), ms:", {w: round(v, 2) for w, v in steps.items()})
json.dump({"args": vars(a), "results": out, "drafting_step_ms": steps}, open(a.out, "w"), indent=1)
