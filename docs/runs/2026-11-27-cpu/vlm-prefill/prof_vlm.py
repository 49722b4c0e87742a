"""Where a VLM-suite call's time goes for dflash and eagle-chain (batch 1, EOS on as the suite decodes): the
generator's prefill, the drafter's pieces, per prompt, against mmspec-plain. Timers wrap the drafters' methods.

    python prof_vlm.py [rounds]"""
import collections, os, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.no_draft import NoDrafter
from mmspec.eval.vlm_suite import feature_factories, vlm_prompts
from mmspec.generator import SpeculativeGenerator
from mmspec.zoo import load

torch.set_num_threads(2)
target = load("vlm-target"); fac = feature_factories()
prompts = vlm_prompts(target.tokenizer, 8, "mixed")
eos = target.tokenizer.tokenizer.eos_token_id
acc = collections.defaultdict(lambda: collections.defaultdict(float))


def wrap(obj, name, method):
    f = getattr(obj, name)

    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); acc[method][name] += time.perf_counter() - t; return r
    setattr(obj, name, g)


gens = {"mmspec-plain": SpeculativeGenerator(target.model, NoDrafter())}
for m in ("dflash", "eagle-chain"):
    d = fac[m]()
    for n in ("begin", "propose", "observe", "_prefill", "_catch_up", "slot_hidden", "head", "_chain", "target_features"):
        if hasattr(d, n):
            wrap(d, n, m)
    gens[m] = SpeculativeGenerator(target.model, d)
for m, g in gens.items():
    wrap(g, "_prefill", m) if hasattr(g, "_prefill") else None


def call(g, p):
    kw = dict(p); ids = kw.pop("input_ids")
    return g.generate(ids, max_new_tokens=64, eos_token_id=eos, **kw)


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
with torch.inference_mode():
    for p in prompts[:2]:
        for g in gens.values():
            call(g, p)
    acc.clear()
    total, steps, tokens = collections.defaultdict(float), collections.defaultdict(int), collections.defaultdict(int)
    for r in range(rounds):
        for p in prompts:
            for m, g in gens.items():
                t = time.perf_counter(); o = call(g, p); total[m] += time.perf_counter() - t
                steps[m] += len(o.stats.accept_lengths[0]); tokens[m] += o.stats.new_tokens
n = rounds * len(prompts)
for m in gens:
    print(f"{m:14s} {total[m] / n * 1e3:6.1f} ms/prompt, {steps[m] / n:.1f} steps, {tokens[m] / n:.1f} tokens  "
          f"ratio vs plain {total['mmspec-plain'] / total[m]:.2f}")
    for k, v in sorted(acc[m].items()):
        print(f"    {k:18s} {v / n * 1e3:6.2f} ms/prompt")
