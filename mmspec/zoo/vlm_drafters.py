"""Feature drafters of the vision-language family, trained against the frozen ``vlm-target``:

- ``vlm-eagle``: the plain EAGLE-style feature drafter (image positions fed like text: no decoupling);
- ``vlm-msd``: MSD — image positions take the target's projected image embeddings;
- ``vlm-flash``: FLASH — each image's placeholders (144 in a full build) compressed by nested learned queries
  (any of 1, 2, 4, 8 or 16 tokens at inference) and a semi-autoregressive head drafting 4 tokens per forward.

All three: one decoder layer the size of the target's, the target's embeddings and LM head reused
frozen, trained by :mod:`mmspec.training.feature` with MSD's schedule (stage 1 text-only rows, stage 2
multimodal rows mixed in linearly) on captions and questions of the training scenes (half captions,
where speculative decoding has long answers to work on). Training is checkpointed under
``<home>/.build/<name>/<target fingerprint>/``: a killed build resumes, and a rebuilt target starts afresh.

``mmspec zoo build --device cuda`` trains them on the GPU: the frozen target and each drafter go to
:func:`~mmspec.zoo.common.build_device`, the scenes and batches are still made on the CPU (moved to the device
where used), and each drafter starts from the same CPU-drawn initial weights. The shipped files and the
recorded checksum (computed on the CPU from the saved weights) are the same kind either way.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ..drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
from ..training.feature import FeatureTrainConfig, train_feature_drafter
from . import vlm_data as vd
from .code_data import ensure_tokenizer
from .common import build_device, build_dir, feature_checksum_output, logits_checksum, seed_everything
from .entry import ZooEntry
from .home import write_json
from .vlm_examples import Encoder, ScenePool, collate, to_pixels
from .vlm_loader import FEATURE_NAMES as NAMES
from .vlm_loader import load

METHODS = {"vlm-eagle": "eagle", "vlm-msd": "msd", "vlm-flash": "flash"}
SEED = 4242
CAPTION_FRACTION = 0.5
FLASH_QUERIES, FLASH_SAR = 16, 4


def train_config(micro: bool) -> FeatureTrainConfig:
    if micro:
        return FeatureTrainConfig(stage1_steps=4, stage1_budget_s=3.0, stage2_steps=6, stage2_budget_s=4.0,
                                  batch_size=4, warmup=2, eval_every=3, patience=2, compress_choices=(1, 2, 16))
    # Against the 16-layer, 144-visual-token target a multimodal step costs ~4.5 s on 1 CPU thread (the target's
    # teacher forward dominates) and ~40 ms on one H100: sized for a GPU build. At 1500 stage-2 steps validation
    # was still falling (vlm-msd 0.1155, slot-1 accuracy 92%); the 9-token target's drafters took 4000. Budgets are
    # a safety net (fixed steps keep a resumed build identical).
    return FeatureTrainConfig(stage1_steps=300, stage1_budget_s=3600.0, stage2_steps=4000, stage2_budget_s=12 * 3600.0,
                              compress_choices=(1, 2, 4, 8, 16))


def zoo_batches(enc, pool, batch_size: int, seed: int):
    """``batches(step, multimodal_prob)``: random (scene, item) rows; each row keeps its picture with
    probability ``multimodal_prob``, else it is the same text without the image placeholders."""
    def sample(rng, scene):
        if rng.random() < CAPTION_FRACTION:
            return vd.Question("caption", "", scene.caption)
        return rng.choice(scene.questions)

    def batches(step: int, multimodal_prob: float) -> dict:
        rng = random.Random(seed * 1_000_003 + step)
        rows, pics = [], []
        for _ in range(batch_size):
            i = rng.randrange(len(pool))
            ids, labels = enc.sequence(sample(rng, pool.scenes[i]))
            if rng.random() < multimodal_prob:
                pics.append(i)
            else:
                ids, labels = ids[enc.n_image:], labels[enc.n_image:]
            rows.append((ids, labels))
        batch = collate(rows, enc.pad_id)
        batch.pop("labels")
        batch["pixel_values"] = to_pixels(pool.images[pics]) if pics else None
        return batch

    return batches


def build(home: Path, micro: bool = False, progress: bool = True, names: list[str] | None = None) -> dict:
    names = names or NAMES
    target_entry = load("vlm-target", home / "vlm-target")
    target = target_entry.model
    configs = drafter_configs(target, names)  # before the move: the target's signature read on the CPU
    device = build_device()
    target.to(device)
    tok = ensure_tokenizer(home, micro)
    enc = Encoder(tok, target.config.image_seq_length)
    pool = ScenePool("train", 64 if micro else 4096)
    val_pool = ScenePool("val", 8 if micro else 96, start=5000)  # not the scenes the target validated on
    cfg = train_config(micro)
    val_fn = zoo_batches(enc, val_pool, 4 if micro else 32, seed=SEED + 99)
    val_batches = [val_fn(i, 1.0) for i in range(1 if micro else 3)]
    results = {}
    for name in names:
        method = METHODS[name]
        seed_everything(SEED + NAMES.index(name))
        net = FeatureDraftModel(configs[name]).to(device)  # initial weights drawn on the CPU, then moved
        run_cfg = replace(cfg, seed=cfg.seed + NAMES.index(name))
        ckpt = build_dir(home, name) / target_fingerprint(target_entry.config)
        report = train_feature_drafter(net, target, zoo_batches(enc, pool, cfg.batch_size, SEED + NAMES.index(name)),
                                       val_batches, run_cfg, progress=progress, checkpoint=ckpt)
        path = home / name
        net.save_pretrained(path)
        info = {"family": "vlm", "name": name, "micro": micro, "method": method, "target": "vlm-target",
                "seed": SEED, "params": sum(p.numel() for p in net.parameters()), "drafter_config": asdict(net.config)}
        write_json(path / "zoo.json", info)
        write_json(path / "zoo.json", {**info, "checksum": checksum(load(name, path))})
        report["params"] = sum(p.numel() for p in net.parameters())
        report["steps"] = sum(report[k]["steps"] for k in ("stage1", "stage2") if k in report)
        report["examples_seen"] = report["steps"] * cfg.batch_size
        report["num_image_tokens"] = enc.n_image
        write_json(path / "metrics.json", report)
        results[name] = report
    return results


def drafter_configs(target, names: list[str]) -> dict[str, FeatureDrafterConfig]:
    """Each drafter's config, read off the target where it was loaded (the CPU): its recorded signature of the
    target's LM head (float64 statistics) is then the same number whichever device trains."""
    out = {}
    for name in names:
        method = METHODS[name]
        extra = dict(compress_tokens=FLASH_QUERIES, sar_tokens=FLASH_SAR) if method == "flash" else {}
        out[name] = FeatureDrafterConfig.for_target(target, method, **extra)
    return out


def target_fingerprint(target_zoo_json: dict) -> str:
    """A short name for the target a drafter trains against (its recorded logits checksum), so a drafter's
    checkpoints are never resumed against a rebuilt target."""
    key = json.dumps(target_zoo_json.get("checksum"), sort_keys=True)
    return "target-" + hashlib.sha256(key.encode()).hexdigest()[:12]


@torch.no_grad()
def checksum(entry: ZooEntry) -> dict:
    """``logits_checksum`` of the drafter's feature heads on a fixed synthetic input (sequence of 6)."""
    return logits_checksum(feature_checksum_output(entry.model))


__all__ = ["NAMES", "METHODS", "build", "checksum", "zoo_batches", "train_config",
           "drafter_configs", "target_fingerprint"]
