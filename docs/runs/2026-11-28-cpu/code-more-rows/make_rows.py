"""Rows for a fifth code-dflash stage on more data (a test of fit_gap.py's finding that the drafter is data-bound):
``--new`` completion prompts from the installed packages that stage 4 did not draw (the same packages, up to
``--per-package`` each instead of 300, stage 4's own prompts left out), then ``--old`` of stage 3's training prompts
(so the stage does not forget them), as a ``mmspec train dflash --data`` .jsonl without responses (the target answers
them greedily); the first rows (what the command holds out) are old ones.

    python make_rows.py rows.jsonl [--new 4000] [--old 2000] [--per-package 900]"""
import argparse, json, random
from mmspec.zoo import code_dflash as m, load
from mmspec.zoo.code_data import (EXTRA_PACKAGES, UNSEEN_PACKAGES, completion_training_prompts, load_corpus,
                                  package_completion_prompts)

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("out"); ap.add_argument("--new", type=int, default=4000); ap.add_argument("--old", type=int, default=2000)
ap.add_argument("--per-package", type=int, default=900)
a = ap.parse_args()
tok = load("code-target").tokenizer
stage4 = set(package_completion_prompts(EXTRA_PACKAGES, m.PACKAGE_PROMPTS, seed=m.SEED, per_package=m.PER_PACKAGE)
             + package_completion_prompts(UNSEEN_PACKAGES, m.PACKAGE_PROMPTS, seed=m.SEED + 1,
                                          per_package=m.PER_PACKAGE))
pool = [t for t in package_completion_prompts(EXTRA_PACKAGES + UNSEEN_PACKAGES, 10 ** 6, seed=m.SEED + 7,
                                              per_package=a.per_package) if t not in stage4]
old = completion_training_prompts(load_corpus(), "train", seed=m.SEED)


def fits(texts):
    return [t for t, ids in zip(texts, tok(texts, add_special_tokens=False).input_ids) if 0 < len(ids) <= m.MAX_PROMPT]


new, old = fits(pool)[: a.new], fits(old)
random.Random(11).shuffle(old)
rows = old[: a.old] + new
head = old[: max(2, len(rows) // 20)]  # (the command holds out its first len // 20 rows)
rows = head + [t for t in rows if t not in set(head)]
with open(a.out, "w") as f:
    for t in rows:
        f.write(json.dumps({"prompt": t}) + "\n")
print(f"{len(pool)} new prompts in the pool, {len(new)} kept; {len(rows)} rows")
