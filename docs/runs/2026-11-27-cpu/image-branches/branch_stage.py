"""The zoo's image-dflash turned into a drafter that reads both CFG branches' features (each named layer's conditional
and unconditional features side by side, ``feature_branches`` = 2) instead of their guided combination, then trained
with exactly the KL stage of ``../image-kl/kl_stage.py`` (same steps, learning rate, seed and data), so the two runs'
held-out figures compare one change: what the drafter is shown.

The widened drafter starts as the shipped one exactly (:func:`~mmspec.drafters.dflash_model.with_branch_features`:
``fc``'s block W_j becomes [s W_j, (1 − s) W_j]).

    python branch_stage.py --out DIR      (the build's guided samples must be in zoo/.build: kl_stage.py draws them)"""
import argparse, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "image-kl"))
from kl_stage import kl_stage, shipped_drafter  # noqa: E402
from mmspec.drafters.dflash_model import with_branch_features  # noqa: E402
from mmspec.zoo import image_dflash as m  # noqa: E402

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True); ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--lr", type=float, default=5e-4)
    a = ap.parse_args()
    kl_stage(with_branch_features(shipped_drafter(), m.CFG_SCALE), a.out, a.steps, a.lr, m.SEED + 2,
             "train-branches.pt")
