"""A third training stage for the zoo's image-dflash, tried and not shipped: KL to the guided target's distribution at
each labelled position (beside the cross-entropy on the sampled code), from the shipped weights, on the build's own
guided samples, the weights kept by the held-out accepted length of sampled drafts (the lossless rule's figure).

Why: stages 1-2 fit each slot's marginal from one sampled code per slot, a high-variance label (the target's top code
gets 0.42 on average); KL has the same minimiser with the whole distribution as its label. Slot 1 overlapped the
target's own distribution by 0.55 only, where an oracle holding the exact marginals overlaps it by 1.0
(``../t1-bound/image_bound.py``). ``deeper.py`` runs the same stage on a drafter grown to more layers.

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


def shipped_drafter():
    """The zoo's image-dflash in float32."""
    return load_dflash(zoo_home() / "image-dflash").float()


def kl_stage(net, out: str, steps: int, lr: float, seed: int, checkpoint: str) -> dict:
    """Train ``net`` with the KL stage on the build's guided samples and save it (float16, as the zoo ships) to ``out``
    with its ``train_report.json``; returns the report. ``checkpoint``: its file in the build's work folder."""
    torch.set_num_threads(2)
    t0 = time.perf_counter()
    home = zoo_home()
    data = guided_samples(home, False, True, "image-dflash")
    work = bound_dir(build_dir(home, "image-dflash"), data.entry.config["checksum"])
    train, val = m.rows_of(data.seqs[: data.train]), m.rows_of(data.seqs[data.train:])
    guided = m.guided_target(data.target, data.layout, net)
    run = dataclasses.replace(m.TRAIN, steps=steps, lr=lr, warmup=50, kl_weight=1.0, select_by="sampled", seed=seed)
    report = train_dflash(net, guided, train, val, run, progress=True, checkpoint=work / checkpoint)
    save_dflash(net, out, dtype=torch.float16)
    report["wall_seconds_total"] = time.perf_counter() - t0
    json.dump(report, open(os.path.join(out, "train_report.json"), "w"), indent=1, default=str)
    print(json.dumps({k: report[k] for k in ("steps", "seconds", "val_history")}, default=str))
    return report


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True); ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--lr", type=float, default=5e-4)
    a = ap.parse_args()
    kl_stage(shipped_drafter(), a.out, a.steps, a.lr, m.SEED + 2, "train-kl.pt")
