"""Interleaved in-process A/B on the code suite (EOS off, 64 new tokens a row, the 16 prompts as batches):
HF plain, mmspec-plain, the default policy (one tree size), the policy choosing tree sizes, and always drafting.
Per batch size, each round runs every method on every batch in rotating order; the speedup over HF plain is per round,
the median and range over rounds are printed (round 0 is a warm-up).

    python docs/runs/2026-11-27-sizes/ab_sizes.py 1,4,8,16 5

``interleave`` is shared with ``docs/runs/2026-11-27-cpu/ab_default.py``.
"""
import statistics
import sys
import time

import torch

from mmspec.eval.batch_sweep import collate
from mmspec.eval.code_suite import code_prompts
from mmspec.registry import DFLASH_TREE_LOOKUP, build_drafter
from mmspec.zoo import load


def code_models():
    """The zoo's code target and a factory of its default drafter (DFlash's DDTree with a lookup branch)."""
    target = load("code-target")
    dfl = load("code-dflash").model
    return target, lambda: build_drafter("dflash", dfl, target=target.model, **DFLASH_TREE_LOOKUP)


def interleave(target, gens: dict, sizes: list, rounds: int) -> None:
    """Print, per batch size, each generator's speedup over HF plain: median [range] over ``rounds`` rounds."""
    torch.set_num_threads(2)
    prompts = code_prompts(target.tokenizer, 16)

    def hf(b):
        return target.model.generate(b["input_ids"], attention_mask=b["attention_mask"], max_new_tokens=64,
                                     do_sample=False, pad_token_id=0, eos_token_id=None)

    names = ["plain"] + list(gens)
    with torch.inference_mode():
        for B in sizes:
            batches = [collate(prompts[i:i + B], 0) for i in range(0, 16 - B + 1, B)]
            times = {n: [] for n in names}
            for r in range(rounds + 1):
                tot = {n: 0.0 for n in names}
                for k, b in enumerate(batches):
                    order = names[(r + k) % len(names):] + names[:(r + k) % len(names)]
                    for n in order:
                        t0 = time.perf_counter()
                        if n == "plain":
                            hf(b)
                        else:
                            gens[n].generate(b["input_ids"], attention_mask=b["attention_mask"], max_new_tokens=64,
                                             eos_token_id=[])
                        tot[n] += time.perf_counter() - t0
                if r:
                    for n in names:
                        times[n].append(tot["plain"] / tot[n])
            print(f"batch {B}: " + "  ".join(f"{n} {statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"
                                              for n, v in times.items() if n != "plain"), flush=True)


if __name__ == "__main__":
    from mmspec.drafters.adaptive import AdaptiveDrafter
    from mmspec.drafters.no_draft import NoDrafter
    from mmspec.generator import SpeculativeGenerator
    target, dd = code_models()
    gens = {"mmspec-plain": SpeculativeGenerator(target.model, NoDrafter()),
            "auto": SpeculativeGenerator(target.model, AdaptiveDrafter(dd(), tree_sizes=False)),
            "auto-sizes": SpeculativeGenerator(target.model, AdaptiveDrafter(dd(), tree_sizes=True)),
            "always": SpeculativeGenerator(target.model, dd())}
    interleave(target, gens, [int(x) for x in sys.argv[1].split(",")], int(sys.argv[2]))
