"""The image family's feature drafters, trained against the frozen, guided ``image-target``:

- ``image-eagle``: an EAGLE-style feature drafter (one decoder layer the target's width; the target's
  embeddings and LM head reused frozen) that reads the target's *guided* last-layer features at CFG 3 and
  predicts the next one, so its LM-head output is the guided distribution LANTERN verifies;
- ``image-sar``: the same with a semi-autoregressive head (FLASH's, Sec. 3.3) emitting 4 features per forward,
  so a whole chain or lattice tree costs one drafter forward (on a CPU the per-forward cost dominates).

Both trained by :mod:`mmspec.training.image_feature` on the same guided target samples.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from . import ZooEntry
from .common import read_json, seed_everything

NAMES = ["image-eagle", "image-sar"]
SAR_TOKENS = {"image-eagle": 1, "image-sar": 4}
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
    from ..training.image_feature import target_samples, train_image_drafter
    from .image import _write, load as load_image

    names = names or NAMES
    target_entry = load_image("image-target", home / "image-target")
    target, layout = target_entry.model, target_entry.extras["layout"]
    samples, val_samples = (48, 16) if micro else (6144, 256)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = {}
    try:
        seqs = target_samples(target, layout, samples + val_samples, CFG_SCALE, SEED, progress=progress)
        for name in names:
            seed_everything(SEED)
            net, report = train_image_drafter(target, layout, CFG_SCALE, SAR_TOKENS[name], samples, val_samples,
                                              train_config(micro), SEED, progress, seqs=seqs)
            path = home / name
            net.save_pretrained(path)
            stage = report["stage1"]
            metrics = {**report, "train_steps": stage["steps"], "train_seconds": round(report["train_seconds"], 2),
                       "stopped": stage["stopped"]}
            facts = {"method": "eagle", "sar_tokens": SAR_TOKENS[name], "target": "image-target",
                     "cfg_scale": CFG_SCALE, "drafter_seed": SEED, "params": report["params"],
                     "drafter_config": asdict(net.config),
                     "checksum": checksum(ZooEntry(name, FeatureDraftModel.from_pretrained(path)))}
            out[name] = _write(home, name, metrics, facts, micro)
    finally:
        torch.set_num_threads(threads)
    return out


def checksum(entry: ZooEntry) -> dict:
    from .vlm_drafters import checksum as feature_checksum

    return feature_checksum(entry)


def load(name: str, path: Path) -> ZooEntry:
    from ..drafters.feature_model import FeatureDraftModel

    if name not in NAMES:
        raise ValueError(f"unknown image feature drafter {name!r}; choose from {NAMES}")
    return ZooEntry(name=name, model=FeatureDraftModel.from_pretrained(path), tokenizer=None,
                    config=read_json(path / "zoo.json"), path=Path(path))


__all__ = ["NAMES", "SAR_TOKENS", "build", "load", "checksum", "train_config", "CFG_SCALE"]
