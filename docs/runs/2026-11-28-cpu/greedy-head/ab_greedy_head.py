"""Side by side in one process: `dflash-lookup-cut` as shipped (greedy drafts read the logits of the draft
vocabulary's ids alone, `DFlashDrafter.greedy_logits`) against the full vocabulary's row with the other ids at −inf
(`head`, what greedy drafting read before), on the same prompts, rounds interleaved (greedy, every output compared
with plain decoding's).

    python ab_greedy_head.py [--data humaneval] --prompts 24 --rounds 2 --out F"""
import json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
from interleave import code_run, interleaved, summary
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_LOOKUP_CUT


class FullHead(DFlashDrafter):
    def greedy_logits(self, h):
        return self.head(h), None


a, model, net, calls = code_run(__doc__)
gens = {"plain": SpeculativeGenerator(model, NoDrafter()),
        "full-head": SpeculativeGenerator(model, FullHead(net, model, **DFLASH_LOOKUP_CUT)),
        "draft-vocab-head": SpeculativeGenerator(model, DFlashDrafter(net, model, **DFLASH_LOOKUP_CUT))}
out = summary(interleaved(gens, calls, a.rounds, 64, []), a.rounds, calls)
json.dump({"args": vars(a), "results": out}, open(a.out, "w"), indent=1)
