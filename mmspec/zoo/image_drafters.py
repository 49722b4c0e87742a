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
from dataclasses import asdict, dataclass
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


def train_config(micro: bool, name: str = "image-eagle") -> FeatureTrainConfig:
    if micro:
        return FeatureTrainConfig(stage1_steps=6, stage1_budget_s=30.0, stage2_steps=0, batch_size=4, warmup=2,
                                  eval_every=3, patience=2)
    # 256-code sequences, batches of 16. The guided target's features are computed once per sample
    # (training.image_feature.guided_features), so a step costs the drafter alone: 0.22 s (image-eagle) and
    # 0.44 s (image-sar, 4 slots) on 2 CPU cores. At 3000 steps on 4096 samples image-eagle's validation loss was
    # still falling (0.746 -> 0.742 over the last 250 steps) and its teacher-forced accuracy was 0.359 on training
    # rows against 0.339 on held-out ones: more samples and steps for the default drafter.
    return FeatureTrainConfig(stage1_steps=TRAIN_STEPS[name], stage1_budget_s=12 * 3600.0, stage2_steps=0,
                              batch_size=16, eval_every=250, patience=4)


# (train, val) guided target samples drawn, full / micro. Sampling runs the 12-layer target with CFG: 0.23 s per
# picture on 2 CPU cores, about 33 minutes for the full set. The validation rows are the last ones drawn.
SAMPLES = {False: (8192, 256), True: (48, 16)}
# training rows each drafter uses (the first ones drawn; None: all of them) and its steps: image-sar keeps the
# recipe it was built with (4096 rows, 3000 steps), its steps cost twice image-eagle's
TRAIN_ROWS = {"image-eagle": None, "image-sar": 4096}
TRAIN_STEPS = {"image-eagle": 6000, "image-sar": 3000}
SAMPLE_BATCH = 512  # pictures sampled per batch (CFG: twice the rows)


@dataclass
class GuidedSamples:
    """The frozen guided target's training pictures, shared by every drafter of the family: ``seqs`` holds
    ``train`` rows, then ``val`` held-out ones (``[class token] + codes``); ``work`` is the build folder bound to
    this target (a rebuilt target starts it over)."""

    entry: ZooEntry
    target: torch.nn.Module  # on the build's device
    seqs: torch.LongTensor
    train: int
    val: int
    work: Path

    @property
    def layout(self):
        return self.entry.extras["layout"]


def guided_samples(home: Path, micro: bool, progress: bool, who: str) -> GuidedSamples:
    """The target's guided samples (CFG ``CFG_SCALE``, seed ``SEED``), drawn once per target and cached with each
    finished batch saved (a killed build resumes)."""
    require_built(Path(home), "image-target", who)
    target_entry = load("image-target", home / "image-target")
    # the frozen target runs on the build's device: it samples the training sequences and gives the features
    target, layout = target_entry.model.to(build_device()), target_entry.extras["layout"]
    samples, val_samples = SAMPLES[micro]
    # the samples and the checkpoints belong to this target: a rebuilt target starts them over
    work = bound_dir(build_dir(home, "image-feature-drafters"), target_entry.config["checksum"])
    n = samples + val_samples  # the cache is named by its count: a recipe that draws more starts over
    seqs = cached(work / f"samples-{n}.pt", lambda: target_samples(target, layout, n, CFG_SCALE, SEED,
                                                                   batch_size=SAMPLE_BATCH, progress=progress,
                                                                   partial=work / f"samples-{n}.partial.pt"))
    return GuidedSamples(target_entry, target, seqs, samples, val_samples, work)


def build(home: Path, micro: bool = False, progress: bool = True, names: list[str] | None = None) -> dict:
    names = names or NAMES
    threads = torch.get_num_threads()
    if micro:
        torch.set_num_threads(1)  # micro builds (the tests') give the same weights whatever the machine's cores
    out = {}
    try:
        data = guided_samples(home, micro, progress, names[0])
        target, layout, seqs, work = data.target, data.layout, data.seqs, data.work
        samples, val_samples = data.train, data.val
        for name in names:
            seed_everything(SEED)
            rows = samples if micro else min(samples, TRAIN_ROWS[name] or samples)
            mine = torch.cat([seqs[:rows], seqs[samples:]])
            net, report = train_image_drafter(target, layout, CFG_SCALE, SAR_TOKENS[name], rows, val_samples,
                                              train_config(micro, name), SEED, progress, seqs=mine,
                                              checkpoint=work / name)
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


def bound_dir(folder: Path, target_checksum: dict) -> Path:
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


__all__ = ["NAMES", "SAR_TOKENS", "GuidedSamples", "bound_dir", "guided_samples", "build", "checksum", "train_config", "CFG_SCALE"]
