"""The grown VLM block drafter (zoo vlm-dflash, block 32) with a draft vocabulary (FR-Spec: the ids of the target's
training answers, from the build's cached answers) and with shorter blocks, side by side in one process against the
EAGLE chain on the VLM suite's prompts (greedy, EOS on; every output compared with plain decoding's).

    python ab_vocab.py --answers HOME/.build/vlm-dflash/<target>/answers-train.pt --rounds 3 --out F"""
import argparse, json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.no_draft import NoDrafter
from mmspec.eval.vlm_suite import feature_factories, vlm_prompts
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import CHAIN_CONFIDENCE
from mmspec.zoo import load
from interleave import interleaved

ap = argparse.ArgumentParser()
ap.add_argument("--answers", required=True); ap.add_argument("--prompts", type=int, default=8)
ap.add_argument("--rounds", type=int, default=3); ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.set_num_threads(2)
data = torch.load(a.answers, weights_only=False)["value"][0]
ids = sorted({t for _, r in data.rows() for t in r})
print(len(ids), "ids in the training answers")
target = load("vlm-target"); fac = feature_factories(); model = target.model
net = load("vlm-dflash").model
items = vlm_prompts(target.tokenizer, a.prompts, "mixed")
calls = [(p["input_ids"], {k: v for k, v in p.items() if k != "input_ids"}) for p in items]
eos = target.tokenizer.tokenizer.eos_token_id
mk = lambda **kw: SpeculativeGenerator(model, DFlashDrafter(net, model, confidence=CHAIN_CONFIDENCE, **kw))
gens = {"plain": SpeculativeGenerator(model, NoDrafter()), "eagle-chain": SpeculativeGenerator(model, fac["eagle-chain"]()),
        "dflash": mk(), "dflash vocab": mk(draft_vocab=ids), "dflash block 24": mk(block=24),
        "dflash block 24 vocab": mk(block=24, draft_vocab=ids)}
T = interleaved(gens, calls, a.rounds, 64, eos)
secs = {k: t["seconds"] for k, t in T.items()}; exact = {k: t["exact"] for k, t in T.items()}
n = a.rounds * len(calls)
out = {k: {"seconds": secs[k], "speedup": secs["plain"] / secs[k], "vs_eagle": secs["eagle-chain"] / secs[k],
           "exact": exact[k] / n} for k in gens}
for k, v in out.items():
    print(f"{k:24s} {v['speedup']:.3f}x  vs eagle {v['vs_eagle']:.3f}  exact {v['exact']:.2f}")
json.dump({"args": vars(a), "vocab_ids": len(ids), "results": out}, open(a.out, "w"), indent=1)
