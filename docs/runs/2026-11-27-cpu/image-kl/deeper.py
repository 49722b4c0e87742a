"""Is the lossless image drafter's overlap bounded by its depth? image-dflash grown from 2 to ``--layers`` decoder
layers: the shipped layers kept, the new ones appended with their output projections (attention ``o_proj``, MLP
``down_proj``) at zero, so the grown drafter starts as the shipped one exactly; then ``kl_stage.py``'s stage.

    python deeper.py --layers 4 --steps 1500 --out DIR   (the build's guided samples in zoo/.build, as kl_stage.py)"""
import argparse, copy
import torch
from kl_stage import kl_stage, m, shipped_drafter
from mmspec.drafters.dflash_model import DFlashDraftModel

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True); ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--steps", type=int, default=1500); ap.add_argument("--lr", type=float, default=1e-3)
a = ap.parse_args()
small = shipped_drafter()
cfg = copy.deepcopy(small.config)
cfg.num_hidden_layers = a.layers
cfg.layer_types = [cfg.layer_types[0]] * a.layers
net = DFlashDraftModel(cfg)
missing, unexpected = net.load_state_dict(small.state_dict(), strict=False)
assert not unexpected and all(k.startswith("layers.") for k in missing), (missing, unexpected)
with torch.no_grad():
    for layer in net.layers[len(small.layers):]:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
kl_stage(net, a.out, a.steps, a.lr, m.SEED + 3, f"train-deeper{a.layers}.pt")
