"""Side by side in one process: `dflash-lookup-cut` (registry settings, int8 weights as the registry builds them) with
the zoo's code-dflash and with another drafter of the code target (``--new DIR``), greedy, the same prompts, rounds
interleaved, every output compared with plain decoding's.

    python ab_drafter.py --new DIR [--data humaneval] --prompts 24 --rounds 2 --out F"""
import json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
new_dir = None
if "--new" in sys.argv:
    i = sys.argv.index("--new"); new_dir = sys.argv[i + 1]; del sys.argv[i: i + 2]
from interleave import code_run, interleaved, summary
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.dflash_io import load_dflash
from mmspec.drafters.no_draft import NoDrafter
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_LOOKUP_CUT, DRAFT_WEIGHTS

a, model, net, calls = code_run(__doc__)
if new_dir is None:
    raise SystemExit("--new DIR is required")
new = load_dflash(new_dir).to(net.dtype)
gens = {"plain": SpeculativeGenerator(model, NoDrafter())}
for name, n in (("zoo", net), ("new", new)):
    gens[name] = SpeculativeGenerator(model, DFlashDrafter(n, model, weights=DRAFT_WEIGHTS, **DFLASH_LOOKUP_CUT))
out = summary(interleaved(gens, calls, a.rounds, 64, []), a.rounds, calls)
json.dump({"args": vars(a), "new": new_dir, "results": out}, open(a.out, "w"), indent=1)
