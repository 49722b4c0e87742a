"""Does the image drafter lack the target's deepest features? image-dflash reads the guided features of target
layers 1, 3, 5, 7, 9 of 12 (the DFlash paper's spread, 1 … N − 3); the feature drafter image-eagle reads the last
layer's and agrees with the target's top code at its first slot 36% of the time, where image-dflash's first slot
agrees 25%. Here the shipped drafter gets a sixth feature, layer 11's (the last; the stock model's last
``hidden_states`` entry, after the final norm), through ``fc`` columns that start at zero, so it starts as the shipped
drafter exactly; then the KL stage of ``../../2026-11-27-cpu/image-kl/kl_stage.py`` with its steps, learning rate,
seed and samples. Its held-out sampled accepted length is compared with that stage's run on the shipped layers
(1.12 / 1.16 / 1.18 / 1.18 / 1.22 / 1.25 / 1.27 / 1.27 every 250 steps, from 1.20).

    python last_layer.py --out DIR [--steps 2000] [--layers 1,3,5,7,9,11]"""
import argparse, copy, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "2026-11-27-cpu", "image-kl"))
import torch
from kl_stage import kl_stage, m, shipped_drafter
from mmspec.drafters.dflash_model import DFlashDraftModel

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--out", required=True); ap.add_argument("--steps", type=int, default=2000)
ap.add_argument("--lr", type=float, default=5e-4); ap.add_argument("--layers", default="1,3,5,7,9,11")
a = ap.parse_args()
small = shipped_drafter()
ids = [int(i) for i in a.layers.split(",")]
old = small.target_layer_ids
if ids[: len(old)] != old:
    raise SystemExit(f"--layers must start with the shipped drafter's {old}")
cfg = copy.deepcopy(small.config)
cfg.dflash_config["target_layer_ids"] = ids
net = DFlashDraftModel(cfg)
state = {k: v for k, v in small.state_dict().items() if k != "fc.weight"}
missing, unexpected = net.load_state_dict(state, strict=False)
assert missing == ["fc.weight"] and not unexpected, (missing, unexpected)
with torch.no_grad():
    net.fc.weight.zero_()
    net.fc.weight[:, : small.fc.weight.shape[1]] = small.fc.weight
kl_stage(net, a.out, a.steps, a.lr, m.SEED + 2, "train-last-layer.pt")
