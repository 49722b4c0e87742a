"""Side by side in one process: the zoo's code-dflash drafting from its draft vocabulary (the default since it carries
one) against the same drafter drafting from the whole vocabulary (`draft_vocab=range(V)`), for the DDTree and
`dflash-lookup-cut`, same prompts, rounds interleaved (greedy; every output compared with plain decoding's).

    python ab_vocab.py [--data humaneval] --prompts 8 --rounds 2 --out F"""
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from interleave import code_run, interleaved, summary
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_LOOKUP_CUT, DFLASH_TREE

a, model, net, calls = code_run(__doc__)
assert net.draft_vocab is not None, "zoo:code-dflash carries no draft vocabulary (run add_vocab.py first)"
whole = range(net.config.vocab_size)
gens = {"plain": SpeculativeGenerator(model, NoDrafter())}
for kind, kw in (("tree", DFLASH_TREE), ("cut", DFLASH_LOOKUP_CUT)):
    gens[f"{kind}/whole"] = SpeculativeGenerator(model, DFlashDrafter(net, model, draft_vocab=whole, **kw))
    gens[f"{kind}/draft-vocab"] = SpeculativeGenerator(model, DFlashDrafter(net, model, **kw))
out = summary(interleaved(gens, calls, a.rounds, 64, []), a.rounds, calls)
json.dump({"args": vars(a), "draft_vocab_ids": len(net.draft_vocab), "results": out}, open(a.out, "w"), indent=1)
