"""Is the lossless image drafter's overlap bounded by its depth? image-dflash grown from 2 to ``--layers`` decoder
layers: the shipped layers kept, the new ones appended with their output projections (attention ``o_proj``, MLP
``down_proj``) at zero, so the grown drafter starts as the shipped one exactly; then the KL stage of ``kl_stage.py``
(KL to the guided target's distribution + cross-entropy, weights kept by the held-out sampled accepted length).

    python deeper.py --layers 4 --steps 1500 --out DIR      (the build's guided samples in zoo/.build, as kl_stage.py)"""
import argparse, copy, dataclasses, json, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash_io import load_dflash, save_dflash
from mmspec.drafters.dflash_model import DFlashDraftModel
from mmspec.training.dflash import train_dflash
from mmspec.zoo import image_dflash as m
from mmspec.zoo.common import build_dir
from mmspec.zoo.home import zoo_home
from mmspec.zoo.image_drafters import bound_dir, guided_samples

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True); ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--steps", type=int, default=1500); ap.add_argument("--lr", type=float, default=1e-3)
a = ap.parse_args()
torch.set_num_threads(2)
home = zoo_home()
t0 = time.perf_counter()
data = guided_samples(home, False, True, "image-dflash")
work = bound_dir(build_dir(home, "image-dflash"), data.entry.config["checksum"])
train, val = m.rows_of(data.seqs[: data.train]), m.rows_of(data.seqs[data.train:])
small = load_dflash(home / "image-dflash").float()
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
guided = m.guided_target(data.target, data.layout, net)
run = dataclasses.replace(m.TRAIN, steps=a.steps, lr=a.lr, warmup=50, kl_weight=1.0, select_by="sampled",
                          seed=m.SEED + 3)
report = train_dflash(net, guided, train, val, run, progress=True, checkpoint=work / f"train-deeper{a.layers}.pt")
save_dflash(net, a.out, dtype=torch.float16)
report["wall_seconds_total"] = time.perf_counter() - t0
json.dump(report, open(os.path.join(a.out, "train_report.json"), "w"), indent=1, default=str)
print(json.dumps({k: report[k] for k in ("steps", "seconds", "val_history")}, default=str))
