"""The image family's feature drafter, trained against the frozen, guided ``image-target``:

- ``image-eagle``: an EAGLE-style feature drafter (one decoder layer the target's width; the target's
  embeddings and LM head reused frozen) that reads the target's *guided* last-layer features at CFG 3 and
  predicts the next one, so its LM-head output is the guided distribution LANTERN verifies. Trained by
  :mod:`mmspec.training.image_feature` on the guided target's own samples.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from . import ZooEntry
from .common import read_json, seed_everything

NAMES = ["image-eagle"]
SEED = 5151
CFG_SCALE = 3.0  # the scale image-target's own fidelity is measured at, and the benchmarks' default


def train_config(micro: bool):
    from ..training.feature import FeatureTrainConfig

    if micro:
        return FeatureTrainConfig(stage1_steps=6, stage1_budget_s=4.0, stage2_steps=0, batch_size=4, warmup=2,
                                  eval_every=3, patience=2)
    return FeatureTrainConfig(stage1_steps=4000, stage1_budget_s=600.0, stage2_steps=0, batch_size=32)


def build(home: Path, micro: bool = False, progress: bool = True, names: list[str] | None = None) -> dict:
    from ..drafters.feature_model import FeatureDraftModel
    from ..training.image_feature import train_image_drafter
    from .image import _write, load as load_image

    target_entry = load_image("image-target", home / "image-target")
    seed_everything(SEED)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        net, report = train_image_drafter(target_entry.model, target_entry.extras["layout"], CFG_SCALE,
                                          samples=48 if micro else 6144, val_samples=16 if micro else 256,
                                          train_cfg=train_config(micro), seed=SEED, progress=progress)
    finally:
        torch.set_num_threads(threads)
    path = home / "image-eagle"
    net.save_pretrained(path)
    stage = report["stage1"]
    metrics = {**report, "train_steps": stage["steps"], "train_seconds": round(report["train_seconds"], 2),
               "stopped": stage["stopped"]}
    facts = {"method": "eagle", "target": "image-target", "cfg_scale": CFG_SCALE, "drafter_seed": SEED,
             "params": report["params"], "drafter_config": asdict(net.config),
             "checksum": checksum(ZooEntry("image-eagle", FeatureDraftModel.from_pretrained(path)))}
    return {"image-eagle": _write(home, "image-eagle", metrics, facts, micro)}


def checksum(entry: ZooEntry) -> dict:
    from .vlm_drafters import checksum as feature_checksum

    return feature_checksum(entry)


def load(name: str, path: Path) -> ZooEntry:
    from ..drafters.feature_model import FeatureDraftModel

    if name not in NAMES:
        raise ValueError(f"unknown image feature drafter {name!r}; choose from {NAMES}")
    return ZooEntry(name=name, model=FeatureDraftModel.from_pretrained(path), tokenizer=None,
                    config=read_json(path / "zoo.json"), path=Path(path))


__all__ = ["NAMES", "build", "load", "checksum", "train_config", "CFG_SCALE"]
