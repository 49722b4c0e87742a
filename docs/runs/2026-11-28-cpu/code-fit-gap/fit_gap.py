"""Where code-dflash stands between fitting and generalising: the greedy held-out figures of ``block_acceptance``
(each slot's top-1 agreement with the target, teacher-forced, and the accepted length of a whole block) on the
target's greedy 64-token answers to (a) the first ``--rows`` of its stage-3 training prompts, (b) as many of the
validation split's (its held-out set), (c) HumanEval's first ``--rows`` problems (never trained on).
Training far ahead of validation: more rows would help; validation far ahead of HumanEval: other code would.

    python fit_gap.py [--rows 128] [--drafter DIR] --out F   (DIR: another drafter of the code target; default the zoo's)"""
import argparse, dataclasses, json, os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash_io import load_dflash
from mmspec.eval.datasets import code_items
from mmspec.training.dflash import Responses, block_acceptance, target_responses, validation_batches
from mmspec.zoo import load
from mmspec.zoo import code_dflash as m
from mmspec.zoo.code_data import completion_prompts, completion_training_prompts, load_corpus
from mmspec.zoo.home import zoo_home

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--rows", type=int, default=128); ap.add_argument("--out", required=True)
ap.add_argument("--drafter", default=None)
a = ap.parse_args()
torch.set_num_threads(2)
entry = load("code-target"); target, tok = entry.model, entry.tokenizer
net = load_dflash(a.drafter or zoo_home() / "code-dflash").float().eval()
corpus = load_corpus()
texts = {"train": completion_training_prompts(corpus, "train", seed=m.SEED),
         "validation": [p.prompt for p in completion_prompts(corpus, "val", min_body_lines=2, max_body_lines=120)],
         "humaneval": [i.text for i in code_items(0, "humaneval")]}
cfg = dataclasses.replace(m.TRAIN, val_rows=a.rows)
pad = tok.pad_token_id or 0
out = {}
for name, t in texts.items():
    prompts = [ids for ids in tok(t, add_special_tokens=False).input_ids if 0 < len(ids) <= m.MAX_PROMPT][: a.rows]
    answers = target_responses(target, prompts, m.COMPLETION_TOKENS, None, pad)
    rows = Responses.from_rows(list(zip(prompts, answers)), pad)
    with torch.no_grad():
        r = block_acceptance(net, target, validation_batches(rows, cfg, net.block_size))
    out[name] = {**r, "rows": len(prompts)}
    print(f"{name:10s} rows {len(prompts)} accepted length {r['accepted_length']:.3f} agreement "
          f"{[round(x, 3) for x in r['slot_agreement'][:6]]}", flush=True)
json.dump(out, open(a.out, "w"), indent=1)
