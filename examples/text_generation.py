"""Speculative text generation with mmspec.

Offline by default (tiny random stock models, so the text is gibberish but the run is real):
    python examples/text_generation.py
With local checkpoints that share a tokenizer (nothing is downloaded):
    python examples/text_generation.py --target /path/to/target --draft /path/to/draft --prompt "def add(a, b):"
"""

import argparse

import torch

from mmspec import DEFAULT_TREE, SpeculativeGenerator
from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter
from mmspec.tiny import tiny_model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target")
    p.add_argument("--draft")
    p.add_argument("--prompt", default="def fibonacci(n):")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--method", choices=["chain", "tree", "dynamic", "prompt-lookup"], default="chain")
    p.add_argument("--do-sample", action="store_true")
    args = p.parse_args()

    if args.target:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.target, local_files_only=True)
        target = AutoModelForCausalLM.from_pretrained(args.target, local_files_only=True)
        draft = AutoModelForCausalLM.from_pretrained(args.draft or args.target, local_files_only=True)
        input_ids = tok(args.prompt, return_tensors="pt").input_ids
    else:
        tok = None
        target = tiny_model("llama", seed=0, vocab_size=256, num_layers=4)
        draft = tiny_model("llama", seed=1, vocab_size=256, num_layers=1)
        input_ids = torch.randint(3, 256, (1, 16), generator=torch.Generator().manual_seed(0))

    drafter = {
        "chain": lambda: AutoregressiveDrafter(draft, num_tokens=4),
        "tree": lambda: AutoregressiveDrafter(draft, tree=DEFAULT_TREE),
        "dynamic": lambda: AutoregressiveDrafter(draft, num_tokens=5, tree="dynamic", top_k=4, num_nodes=16),
        "prompt-lookup": lambda: PromptLookupDrafter(num_tokens=8),
    }[args.method]()
    gen = SpeculativeGenerator(target, drafter)
    out = gen.generate(input_ids, max_new_tokens=args.max_new_tokens, do_sample=args.do_sample,
                       generator=torch.Generator().manual_seed(0))
    new = out.sequences[0, input_ids.shape[1]:]
    print(tok.decode(new) if tok is not None else new.tolist())
    s = out.stats
    print(f"tau = {s.mean_accepted_tokens:.2f} tokens per target forward "
          f"({s.new_tokens} tokens, {s.target_forwards} target forwards; draft {s.draft_time:.3f}s, "
          f"verify {s.verify_time:.3f}s)")
    if not args.do_sample:
        ref = target.generate(input_ids, do_sample=False, max_new_tokens=args.max_new_tokens)
        n = min(ref.shape[1], out.sequences.shape[1])
        print("identical to target.generate:", torch.equal(ref[:, :n], out.sequences[:, :n]))


if __name__ == "__main__":
    main()
