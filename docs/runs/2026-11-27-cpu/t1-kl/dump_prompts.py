"""The code-dflash stage 3-4 training prompts (stdlib training split functions + installed packages' functions) as a
--data .jsonl without responses (the target samples them at T = 1)."""
import json, random, sys
from mmspec.zoo.code_data import (EXTRA_PACKAGES, UNSEEN_PACKAGES, completion_training_prompts, load_corpus,
                                  package_completion_prompts)
from mmspec.zoo.code_dflash import SEED, MAX_PROMPT, PACKAGE_PROMPTS, PER_PACKAGE
from mmspec.zoo import load
n = int(sys.argv[2])
tok = load("code-target").tokenizer
corpus = load_corpus()
texts = completion_training_prompts(corpus, "train", seed=SEED)
texts += package_completion_prompts(EXTRA_PACKAGES, PACKAGE_PROMPTS, seed=SEED, per_package=PER_PACKAGE)
texts += package_completion_prompts(UNSEEN_PACKAGES, PACKAGE_PROMPTS, seed=SEED + 1, per_package=PER_PACKAGE)
lens = tok(texts, add_special_tokens=False).input_ids
texts = [t for t, ids in zip(texts, lens) if 0 < len(ids) <= MAX_PROMPT]
random.Random(7).shuffle(texts)
print(len(texts), "prompts;", "kept", min(n, len(texts)))
with open(sys.argv[1], "w") as f:
    for t in texts[:n]:
        f.write(json.dumps({"prompt": t}) + "\n")
