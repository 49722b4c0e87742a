"""Prompts for a fine-tune of code-dflash on more data: stage 3-4's training prompts (the stdlib training split's
documented functions, cut after the docstring and inside the body; 1600 documented functions from each package
group) plus ``extra`` documented functions from the same installed packages that stage 4 did not draw (up to 800 a
package instead of 300), as a --data .jsonl without responses (the target answers greedily).

    python dump_prompts.py rows.jsonl 3000"""
import json, random, sys
from mmspec.zoo.code_data import (EXTRA_PACKAGES, UNSEEN_PACKAGES, completion_training_prompts, load_corpus,
                                  package_completion_prompts)
from mmspec.zoo.code_dflash import SEED, MAX_PROMPT, PACKAGE_PROMPTS, PER_PACKAGE
from mmspec.zoo import load

extra = int(sys.argv[2])
tok = load("code-target").tokenizer
old = completion_training_prompts(load_corpus(), "train", seed=SEED)
old += package_completion_prompts(EXTRA_PACKAGES, PACKAGE_PROMPTS, seed=SEED, per_package=PER_PACKAGE)
old += package_completion_prompts(UNSEEN_PACKAGES, PACKAGE_PROMPTS, seed=SEED + 1, per_package=PER_PACKAGE)
seen = set(old)
pool = package_completion_prompts(EXTRA_PACKAGES + UNSEEN_PACKAGES, 10**6, seed=SEED + 2, per_package=800)
new = [t for t in pool if t not in seen]


def short(texts):
    lens = tok(texts, add_special_tokens=False).input_ids
    return [t for t, ids in zip(texts, lens) if 0 < len(ids) <= MAX_PROMPT]


old, new = short(old), short(new)
texts = old + new[:extra]
random.Random(8).shuffle(texts)
print(len(old), "stage 3-4 prompts;", len(new), "new ones available;", len(texts), "written")
with open(sys.argv[1], "w") as f:
    for t in texts:
        f.write(json.dumps({"prompt": t}) + "\n")
