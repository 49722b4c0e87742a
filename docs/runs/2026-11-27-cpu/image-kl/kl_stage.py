"""A third training stage for the zoo's image-dflash, tried and not shipped: KL to the guided target's distribution at
each labelled position (beside the cross-entropy on the sampled code), from the shipped weights, on the build's own
guided samples, the weights kept by the held-out accepted length of sampled drafts (the lossless rule's figure).

Why: stages 1-2 fit each slot's marginal from one sampled code per slot, a high-variance label (the target's top code
gets 0.42 on average); KL has the same minimiser with the whole distribution as its label. Slot 1 overlapped the
target's own distribution by 0.55 only, where an oracle holding the exact marginals overlaps it by 1.0
(``../t1-bound/image_bound.py``).

    python kl_stage.py --out DIR      (draws the build's 8448 guided samples into zoo/.build first if absent: ~20 min)
    python ../t1-bound/image_bound.py --drafter DIR --out F     python ab_drafters.py zoo/image-dflash --new DIR ..."""
import argparse, dataclasses, json, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mmspec.drafters.dflash_io import load_dflash, save_dflash
from mmspec.training.dflash import train_dflash
from mmspec.zoo import image_dflash as m
from mmspec.zoo.common import build_dir
from mmspec.zoo.home import zoo_home
from mmspec.zoo.image_drafters import bound_dir, guided_samples

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True); ap.add_argument("--steps", type=int, default=2000)
ap.add_argument("--lr", type=float, default=5e-4)
a = ap.parse_args()
torch.set_num_threads(2)
home = zoo_home()
t0 = time.perf_counter()
data = guided_samples(home, False, True, "image-dflash")
work = bound_dir(build_dir(home, "image-dflash"), data.entry.config["checksum"])
train, val = m.rows_of(data.seqs[: data.train]), m.rows_of(data.seqs[data.train:])
net = load_dflash(home / "image-dflash").float()
guided = m.guided_target(data.target, data.layout, net)
cfg = dataclasses.replace(m.TRAIN, steps=a.steps, lr=a.lr, warmup=50, kl_weight=1.0, select_by="sampled",
                          seed=m.SEED + 2)
report = train_dflash(net, guided, train, val, cfg, progress=True, checkpoint=work / "train-kl.pt")
save_dflash(net, a.out, dtype=torch.float16)
report["wall_seconds_total"] = time.perf_counter() - t0
json.dump(report, open(os.path.join(a.out, "train_report.json"), "w"), indent=1, default=str)
print(json.dumps({k: report[k] for k in ("steps", "seconds", "val_history")}, default=str))
