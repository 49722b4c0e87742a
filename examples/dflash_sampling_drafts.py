"""Lossless sampling with the DFlash block drafter: each slot drawn from its own q (the default) against the greedy
block verified as point masses (``sampled_drafts=False``), on the zoo's code or VLM suite prompts at T = 1.

    python examples/dflash_sampling_drafts.py code     # zoo:code-target + zoo:code-dflash, 8 prompts x 64 tokens
    python examples/dflash_sampling_drafts.py vlm      # zoo:vlm-target + zoo:vlm-dflash, 8 scenes, up to 48 tokens
    python examples/dflash_sampling_drafts.py code --quick   # a smoke run: 2 prompts, 8 tokens, one round

Prints, per round, each setting's speedup over HF's sampled ``generate`` (same prompts, same process) and τ.
"""

from __future__ import annotations

import sys
import time

import torch

from mmspec import SpeculativeGenerator, zoo
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.eval.code_suite import code_prompts
from mmspec.eval.vlm_suite import vlm_prompts

SETTINGS = {"chain, sampled drafts": dict(confidence=0.4), "chain, greedy block": dict(confidence=0.4,
                                                                                      sampled_drafts=False),
            "DDTree, sampled drafts": dict(tree_nodes=16), "DDTree, greedy block": dict(tree_nodes=16,
                                                                                        sampled_drafts=False)}


def main(suite: str = "code", quick: bool = False) -> None:
    n, rounds = (2, 1) if quick else (8, 2)
    if suite == "code":
        target = zoo.load("code-target")
        net, budget, eos = zoo.load("code-dflash").model, 64, []
        prompts = [dict(input_ids=p) for p in code_prompts(target.tokenizer, n)]
    elif suite == "vlm":
        target = zoo.load("vlm-target")
        net, budget, eos = zoo.load("vlm-dflash").model, 48, [target.extras["tokenizer"].eos_token_id]
        prompts = vlm_prompts(target.tokenizer, n, "mixed")
    else:
        raise SystemExit(f"usage: dflash_sampling_drafts.py code|vlm [--quick] (got {suite!r})")
    budget = 8 if quick else budget
    model = target.model

    def hf_seconds_per_token(seed: int) -> float:
        seconds = tokens = 0
        for i, p in enumerate(prompts):
            torch.manual_seed(seed + i)
            t0 = time.perf_counter()
            out = model.generate(**p, max_new_tokens=budget, do_sample=True, temperature=1.0,
                                 eos_token_id=eos or None, pad_token_id=0)
            seconds += time.perf_counter() - t0
            tokens += out.shape[1] - p["input_ids"].shape[1]
        return seconds / tokens

    def mmspec_seconds_per_token(kw: dict, seed: int) -> tuple[float, float]:
        gen = SpeculativeGenerator(model, DFlashDrafter(net, model, **kw))
        seconds = new = steps = 0
        for i, p in enumerate(prompts):
            extra = {k: v for k, v in p.items() if k != "input_ids"}
            t0 = time.perf_counter()
            out = gen.generate(p["input_ids"], max_new_tokens=budget, do_sample=True, temperature=1.0,
                               generator=torch.Generator().manual_seed(seed + i), eos_token_id=eos, **extra)
            seconds += time.perf_counter() - t0
            new += out.stats.new_tokens
            steps += out.stats.row_forwards - 1  # verification steps (the prefill aside)
        return seconds / new, new / max(steps, 1)

    with torch.inference_mode():
        hf_seconds_per_token(0)  # warm-up
        mmspec_seconds_per_token(SETTINGS["chain, greedy block"], 0)
        for r in range(rounds):
            base = hf_seconds_per_token(100 * r)
            for name, kw in SETTINGS.items():
                per, tau = mmspec_seconds_per_token(kw, 100 * r)
                print(f"{suite} round {r + 1}: {name:24s} {base / per:.2f}x  tau {tau:.2f}", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(2)
    args = [a for a in sys.argv[1:] if a != "--quick"]
    main(args[0] if args else "code", quick="--quick" in sys.argv[1:])
