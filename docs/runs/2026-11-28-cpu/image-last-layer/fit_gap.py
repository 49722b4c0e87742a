"""Does the zoo's image-dflash underfit or overfit? The held-out figures of ``block_acceptance`` (sampled: each slot's
overlap Σ min(p, q) with the guided target at T = 1, and the expected accepted length of a chain of independent
draws) on 128 of its training pictures and on 128 held-out ones, the same blocks per picture (every 8th position).
Training rows far ahead of held-out ones: more pictures would help; the two alike: the drafter's fit is the bound.

    python fit_gap.py --out F   (the build's guided samples in zoo/.build, as ../../2026-11-27-cpu/image-kl/kl_stage.py)"""
import argparse, dataclasses, json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "2026-11-27-cpu", "image-kl"))
import torch
from kl_stage import m, shipped_drafter
from mmspec.training.dflash import block_acceptance, validation_batches
from mmspec.zoo.home import zoo_home
from mmspec.zoo.image_drafters import guided_samples

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--out", required=True); ap.add_argument("--rows", type=int, default=128)
a = ap.parse_args()
torch.set_num_threads(2)
net = shipped_drafter().eval()
data = guided_samples(zoo_home(), False, True, "image-dflash")
guided = m.guided_target(data.target, data.layout, net)
cfg = dataclasses.replace(m.TRAIN, val_rows=a.rows)
out = {}
for name, seqs in (("train", data.seqs[: a.rows]), ("heldout", data.seqs[data.train: data.train + a.rows])):
    rows = m.rows_of(seqs)
    with torch.no_grad():
        r = block_acceptance(net, guided, validation_batches(rows, cfg, net.block_size), sampled=True)
    out[name] = r
    print(name, "sampled accepted", round(r["sampled_accepted_length"], 3), "overlap",
          [round(x, 3) for x in r["slot_overlap"][:6]], "agreement", [round(x, 3) for x in r["slot_agreement"][:3]])
json.dump(out, open(a.out, "w"), indent=1)
