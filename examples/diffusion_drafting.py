"""Draft with a diffusion LM, verify with the AR target: DEER and DiffuSpec on the zoo's code models.

    python examples/diffusion_drafting.py
    python examples/diffusion_drafting.py --max-new-tokens 16      # quicker
"""

import argparse

import torch

from mmspec import SpeculativeGenerator, zoo
from mmspec.drafters import DEERDrafter
from mmspec.drafters.diffuspec import DiffuSpecDrafter
from mmspec.loading import zoo_diffusion_lm


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-new-tokens", type=int, default=48)
    args = p.parse_args()

    target = zoo.load("code-target")
    tok = target.tokenizer
    prompt = 'def clamp(x, lo, hi):\n    """Return x limited to the range [lo, hi]."""'
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    vocab = target.model.config.vocab_size
    drafters = {
        # DEER: the aligned drafter fills 8 mask slots in one forward
        "DEER": DEERDrafter(zoo_diffusion_lm(zoo.load("code-deer"), target_vocab_size=vocab), num_tokens=8),
        # DiffuSpec: training-free, causal path search over the base dLM's lattice + adaptive length
        "DiffuSpec": DiffuSpecDrafter(zoo_diffusion_lm(zoo.load("code-dlm"), target_vocab_size=vocab),
                                      causal=zoo.load("code-ngram").model, eos_token_id=tok.eos_token_id),
    }
    reference = target.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=args.max_new_tokens, pad_token_id=tok.pad_token_id,
                                      eos_token_id=None)
    for name, drafter in drafters.items():
        out = SpeculativeGenerator(target.model, drafter).generate(ids, max_new_tokens=args.max_new_tokens,
                                                                   eos_token_id=[])
        same = torch.equal(out.sequences, reference)
        print(f"{name}: tau {out.stats.mean_accepted_tokens:.2f} tokens per target forward, identical to greedy: "
              f"{same}")
    print(prompt + tok.decode(reference[0, ids.shape[1]:]))


if __name__ == "__main__":
    main()
