"""The image family's feature drafters, trained against the frozen, guided ``image-target``:

- ``image-eagle``: an EAGLE-style feature drafter (one decoder layer the target's width; the target's
  embeddings and LM head reused frozen) that reads the target's *guided* last-layer features at CFG 3 and
  predicts the next one, so its LM-head output is the guided distribution LANTERN verifies;
- ``image-sar``: the same with a semi-autoregressive head (FLASH's, Sec. 3.3) emitting 4 features per forward,
  so a whole chain or lattice tree costs one drafter forward (on a CPU the per-forward cost dominates).

Both trained by :mod:`mmspec.training.image_feature` on the same guided target samples.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import torch

from ..drafters.feature_model import FeatureDraftModel
from ..training.artifact import cached
from ..training.feature import FeatureTrainConfig
from ..training.image_feature import target_samples, train_image_drafter
from .common import build_device, build_dir, feature_checksum_output, logits_checksum, seed_everything
from .entry import ZooEntry
from .image_loader import FEATURE_NAMES as NAMES
from .image_loader import load
from .image_records import require_built, write_records

SAR_TOKENS = {"image-eagle": 1, "image-sar": 4}
SEED = 5151
CFG_SCALE = 3.0  # the scale image-target's own fidelity is measured at, and the benchmarks' default


def train_config(micro: bool) -> FeatureTrainConfig:
    if micro:
        return FeatureTrainConfig(stage1_steps=6, stage1_budget_s=30.0, stage2_steps=0, batch_size=4, warmup=2,
                                  eval_every=3, patience=2)
    # 256-code sequences, batches of 16. The guided target's features are computed once per sample
    # (training.image_feature.guided_features), so a step costs the drafter alone: 0.22 s (image-eagle) and
    # 0.44 s (image-sar, 4 slots) on 2 CPU cores. Sized to build on a CPU in about an hour; at 1200 steps of 8
    # on 3k samples (a GPU build) validation was still falling and LANTERN++ reached tau 1.9-2.1.
    return FeatureTrainConfig(stage1_steps=3000, stage1_budget_s=12 * 3600.0, stage2_steps=0, batch_size=16,
                              eval_every=250, patience=4)


# (train, val) guided target samples, full / micro. Sampling runs the 12-layer target with CFG: 0.23 s per
# picture on 2 CPU cores, 17 minutes for the full set.
SAMPLES = {False: (4096, 256), True: (48, 16)}
SAMPLE_BATCH = 512  # pictures sampled per batch (CFG: twice the rows)


def build(home: Path, micro: bool = False, progress: bool = True, names: list[str] | None = None) -> dict:
    names = names or NAMES
    require_built(Path(home), "image-target", names[0])
    target_entry = load("image-target", home / "image-target")
    # the frozen target runs on the build's device: it samples the training sequences and gives the features
    target, layout = target_entry.model.to(build_device()), target_entry.extras["layout"]
    samples, val_samples = SAMPLES[micro]
    threads = torch.get_num_threads()
    if micro:
        torch.set_num_threads(1)  # micro builds (the tests') give the same weights whatever the machine's cores
    out = {}
    try:
        # the samples and the checkpoints belong to this target: a rebuilt target starts them over
        work = _bound_dir(build_dir(home, "image-feature-drafters"), target_entry.config["checksum"])
        seqs = cached(work / "samples.pt", lambda: target_samples(target, layout, samples + val_samples, CFG_SCALE,
                                                                  SEED, batch_size=SAMPLE_BATCH, progress=progress,
                                                                  partial=work / "samples.partial.pt"))
        for name in names:
            seed_everything(SEED)
            net, report = train_image_drafter(target, layout, CFG_SCALE, SAR_TOKENS[name], samples, val_samples,
                                              train_config(micro), SEED, progress, seqs=seqs, checkpoint=work / name)
            path = home / name
            net.half().save_pretrained(path)  # fp16 like the rest of the zoo (loading casts back to fp32)
            net.float()
            stage = report["stage1"]
            metrics = {**report, "train_steps": stage["steps"], "train_seconds": round(report["train_seconds"], 2),
                       "stopped": stage["stopped"]}
            facts = {"method": "eagle", "sar_tokens": SAR_TOKENS[name], "target": "image-target",
                     "cfg_scale": CFG_SCALE, "drafter_seed": SEED, "params": report["params"],
                     "drafter_config": asdict(net.config),
                     "checksum": checksum(ZooEntry(name, FeatureDraftModel.from_pretrained(path)))}
            out[name] = write_records(home, name, metrics, facts, micro)
    finally:
        torch.set_num_threads(threads)
    return out


def _bound_dir(folder: Path, target_checksum: dict) -> Path:
    """``folder``, emptied first if it was started against another target (its samples would be stale)."""
    stamp = folder / "target.json"
    want = json.loads(json.dumps({"image-target": target_checksum}))
    if stamp.exists() and json.loads(stamp.read_text()) != want:
        shutil.rmtree(folder)
    if not stamp.exists():
        folder.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps(want))
    return folder


def checksum(entry: ZooEntry) -> dict:
    return logits_checksum(feature_checksum_output(entry.model))


__all__ = ["NAMES", "SAR_TOKENS", "build", "checksum", "train_config", "CFG_SCALE"]
