"""Seed a zoo home's vlm-dflash build with stage 1 as shipped (the 2026-11-27 zoo's vlm-dflash: stage 1's kept
weights, float16-rounded as the build keeps them, and its training report), so that ``mmspec zoo build --only
vlm-dflash --home HOME`` runs stage 3 (blocks grown to 32) from it instead of training stage 1 again.

    cp -r zoo HOME && python seed_stage1.py HOME && mmspec zoo build --only vlm-dflash --home HOME"""
import json, os, sys
from pathlib import Path
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from mmspec.training.loop import save_checkpoint
from mmspec.zoo import load
from mmspec.zoo.common import build_dir
from mmspec.zoo.vlm_drafters import target_fingerprint

home = Path(sys.argv[1])
shipped = load("vlm-dflash", home)
metrics = json.loads((home / "vlm-dflash" / "metrics.json").read_text())
if metrics.get("block_size") != 16 or "stages" in metrics:
    raise SystemExit("HOME's vlm-dflash is not the stage-1 drafter (block 16) this seeds from")
keys = ("config", "steps", "seconds", "wall_seconds", "stopped", "rows_seen", "tokens_seen", "blocks_seen",
        "val_history", "best_accepted_length", "heldout_before", "heldout_after")
report = {k: metrics[k] for k in keys if k in metrics}
report["note"] = "seeded from the shipped vlm-dflash (stage 1's float16-rounded weights, zoo of 2026-11-27)"
work = build_dir(home, "vlm-dflash") / target_fingerprint(load("vlm-target", home).config)
work.mkdir(parents=True, exist_ok=True)
save_checkpoint(work / "stage1.pt", {"state": {k: v.float() for k, v in shipped.model.state_dict().items()},
                                     "report": report})
print("seeded", work / "stage1.pt", "steps", report["steps"])
