"""Give the committed zoo's code-dflash the draft vocabulary its recipe now ships (every id of the target's answers to
stage 3's training prompts: `mmspec.zoo.code_dflash.build`), without retraining: the answers come from the recipe's
own `completion_data` (cached under HOME/.build/code-dflash, about 8 minutes on 2 cores the first time), the ids go
into config.json's dflash_config, the file hashes into zoo.json, and metrics.json records the count. The weights,
and every figure the build measured, are unchanged (those were measured drafting from the whole vocabulary).

    python add_vocab.py HOME [--zoo ZOO]      (HOME: any folder for the answers' cache; ZOO: the zoo, default ./zoo)"""
import argparse, json, os
from pathlib import Path
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.zoo import load
from mmspec.zoo.code_dflash import completion_data
from mmspec.zoo.integrity import record_file_hashes

ap = argparse.ArgumentParser()
ap.add_argument("home"); ap.add_argument("--zoo", default="zoo")
a = ap.parse_args()
torch.set_num_threads(2)
target = load("code-target")
train, _ = completion_data(Path(a.home), target.model, target.tokenizer, micro=False, progress=True)
ids = train.answer_ids()
entry = Path(a.zoo) / "code-dflash"
cfg = json.loads((entry / "config.json").read_text())
cfg["dflash_config"]["draft_vocab"] = ids
(entry / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
metrics = json.loads((entry / "metrics.json").read_text())
metrics["draft_vocab_ids"] = len(ids)
metrics["draft_vocab_note"] = ("added 2026-11-28 after the build (docs/runs/2026-11-28-cpu/code-vocab/add_vocab.py): "
                               "the weights and the figures above, measured drafting from the whole vocabulary, are "
                               "unchanged")
(entry / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
record_file_hashes(entry)
print(f"{len(ids)} ids from {len(train)} answers; {entry} updated")
