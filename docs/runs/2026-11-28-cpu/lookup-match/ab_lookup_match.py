"""Side by side in one process: `dflash-lookup-cut` as shipped (a lone lookup step needs a match of at least
``ALONE_MATCH`` = 2 tokens) against the rule before (any match), on the same prompts, rounds interleaved (greedy,
every output compared with plain decoding's).

    python ab_lookup_match.py [--data humaneval] --prompts 24 --rounds 2 --out F"""
import json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
from interleave import code_run, interleaved, summary
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_LOOKUP_CUT
from any_match import AnyMatch

a, model, net, calls = code_run(__doc__)
gens = {"plain": SpeculativeGenerator(model, NoDrafter()),
        "any-match": SpeculativeGenerator(model, AnyMatch(net, model, **DFLASH_LOOKUP_CUT)),
        "two-token-match": SpeculativeGenerator(model, DFlashDrafter(net, model, **DFLASH_LOOKUP_CUT))}
out = summary(interleaved(gens, calls, a.rounds, 64, []), a.rounds, calls)
json.dump({"args": vars(a), "results": out}, open(a.out, "w"), indent=1)
