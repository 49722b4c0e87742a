"""Side by side in one process: `dflash-lookup-cut` drafting with the drafter's float32 weights against its int8
weight-only products (`DFlashDrafter(weights="int8")`: layers, fc and draft head, `mmspec.kernels.int8_linear`), on
the same prompts, rounds interleaved (greedy, every output compared with plain decoding's); also the drafting step's
mean time (propose, ms) per variant.

    python ab_int8.py [--data humaneval] --prompts 24 --rounds 2 --out F"""
import json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
from interleave import code_run, interleaved, summary, timed_calls
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_LOOKUP_CUT

a, model, net, calls = code_run(__doc__)
drafters = {w: DFlashDrafter(net, model, weights=w, **DFLASH_LOOKUP_CUT) for w in ("float", "int8")}
timing = timed_calls(drafters, "propose_sized")
gens = {"plain": SpeculativeGenerator(model, NoDrafter()),
        **{f"cut-{w}": SpeculativeGenerator(model, d) for w, d in drafters.items()}}
out = summary(interleaved(gens, calls, a.rounds, 64, []), a.rounds, calls)
steps = {w: 1000 * s / max(n, 1) for w, (s, n) in timing.items()}
print("block-drafting step (propose_sized), ms:", {w: round(v, 2) for w, v in steps.items()})
json.dump({"args": vars(a), "results": out, "drafting_step_ms": steps}, open(a.out, "w"), indent=1)
