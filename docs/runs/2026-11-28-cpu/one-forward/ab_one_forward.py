"""Side by side in one process: the DFlash drafter whose block forward also appends the verified positions' context
keys / values (one forward, committed after it) against the drafter as it was at commit c783ddb (a separate pass
through every layer for them before the block), same weights, same prompts, rounds interleaved (greedy; every output
compared with plain decoding's); also the mean time of a drafting call (propose).

    python ab_one_forward.py [--data humaneval] --prompts 8 --rounds 2 --out F   (run inside the git checkout)"""
import argparse, json, os, re, subprocess, sys, tempfile, time, collections
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.eval.datasets import code_items
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_LOOKUP_CUT, DFLASH_TREE
from mmspec.zoo import load
from interleave import interleaved

BEFORE = "c783ddb"


def before_module():
    """The drafter's module at BEFORE, importable beside today's (relative imports made absolute; the network's
    removed block_after written out where it was called)."""
    src = subprocess.run(["git", "show", f"{BEFORE}:mmspec/drafters/dflash.py"], capture_output=True, text=True,
                         check=True, cwd=HERE).stdout
    src = re.sub(r"^from \.\.([a-z_.]*) import", r"from mmspec.\1 import", src, flags=re.M)
    src = re.sub(r"^from \.([a-z_]*) import", r"from mmspec.drafters.\1 import", src, flags=re.M)
    src = src.replace("        h = net.block_after(x, cos, sin, keys, values, mask)\n",
                      "        h = net.block(x, cos, sin, lambda i, k, v: (torch.cat([keys[i], k], 2), "
                      "torch.cat([values[i], v], 2)), mask)\n")
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "dflash_before.py"), "w") as f:
        f.write(src)
    sys.path.insert(0, folder)
    import dflash_before
    return dflash_before


ap = argparse.ArgumentParser()
ap.add_argument("--data", default=None); ap.add_argument("--prompts", type=int, default=8)
ap.add_argument("--rounds", type=int, default=2); ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
old = before_module()
target = load("code-target"); net = load("code-dflash").model
items = code_items(a.prompts, a.data)
calls = [(target.tokenizer(i.text, return_tensors="pt", add_special_tokens=False).input_ids, {}) for i in items]
model = target.model
T, C = collections.defaultdict(float), collections.Counter()


def timed(d, name):
    f = d.propose

    def g(*x, **k):
        t = time.perf_counter(); r = f(*x, **k); T[name] += time.perf_counter() - t; C[name] += 1
        return r
    d.propose = g
    return SpeculativeGenerator(model, d)


gens = {"plain": SpeculativeGenerator(model, NoDrafter())}
for kind, kw in (("tree", DFLASH_TREE), ("cut", DFLASH_LOOKUP_CUT)):
    gens[f"{kind}/before"] = timed(old.DFlashDrafter(net, model, **kw), f"{kind}/before")
    gens[f"{kind}/one-forward"] = timed(DFlashDrafter(net, model, **kw), f"{kind}/one-forward")
R = interleaved(gens, calls, a.rounds, 64, [])
n = a.rounds * len(calls)
out = {}
for k, t in R.items():
    v = out[k] = {"seconds": t["seconds"], "speedup": R["plain"]["seconds"] / t["seconds"],
                  "tau": t["tokens"] / max(t["forwards"] - n, 1), "exact": t["exact"] / n,
                  "propose_ms": 1000 * T[k] / C[k] if C[k] else None}
    print(f"{k:16s} {v['speedup']:.3f}x  tau {v['tau']:.2f}  exact {v['exact']:.2f}"
          + (f"  propose {v['propose_ms']:.2f} ms" if v["propose_ms"] else ""))
json.dump({"args": vars(a), "before": BEFORE, "results": out}, open(a.out, "w"), indent=1)
