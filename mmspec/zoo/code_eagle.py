"""``code-eagle``: an EAGLE-style feature drafter for ``code-target`` — the autoregressive feature drafter the block
drafter (``code-dflash``) is compared with.

One Llama layer as wide as the target over ``fc([token embedding ; target feature])`` (:mod:`mmspec.drafters.feature_model`,
method ``eagle``), trained as the VLM family's EAGLE drafter is (:func:`mmspec.training.feature.train_feature_drafter`:
SmoothL1 on features + 0.1 × soft cross-entropy, stage 1 only: a text target has no multimodal stage) on the same
target continuations as ``code-dflash`` (:func:`mmspec.zoo.code_dflash.target_data`), with the target's last-layer
features computed once per row and kept under ``<home>/.build/code-eagle/``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from ..drafters.feature import FeatureDrafter
from ..drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
from ..training.dflash import precompute_features, row_lengths
from ..training.feature import FeatureTrainConfig, slot_accuracy, train_feature_drafter
from ..training.loop import load_checkpoint, model_device, on_model, save_checkpoint
from . import code_distill
from .code_dflash import load_target_model, target_data
from .common import build_device, build_dir, feature_checksum_output, logits_checksum, seed_everything, versions
from .entry import ZooEntry
from .home import write_json

NAMES = ["code-eagle"]
SEED = 5151
TRAIN = FeatureTrainConfig(stage1_steps=2000, stage1_budget_s=20 * 60.0, stage2_steps=0, batch_size=16, lr=2e-3,
                           warmup=100, eval_every=250, patience=4)
MICRO_TRAIN = dataclasses.replace(TRAIN, stage1_steps=10, stage1_budget_s=30.0, batch_size=4, warmup=2, eval_every=5)
CHAIN_TOKENS = 8


def row_batch(data, idx: torch.Tensor, features: torch.Tensor | None = None) -> dict:
    lengths = row_lengths(data)[idx]
    width = int(lengths.max())
    batch = {"input_ids": data.tokens[idx, :width],
             "attention_mask": (torch.arange(width)[None, :] < lengths[:, None]).long()}
    if features is not None:
        batch["features"] = features[idx, :width].float()
    return batch


@torch.no_grad()
def checksum(entry: ZooEntry) -> dict:
    return logits_checksum(feature_checksum_output(entry.model))


def build(home: Path, micro: bool = False, progress: bool = True, names: list[str] | None = None) -> dict:
    home = Path(home)
    t0 = time.perf_counter()
    target = load_target_model(home)
    tok, train, val = target_data(home, target, micro, progress)
    work = build_dir(home, "code-eagle")
    feat_path = work / f"features{'-micro' if micro else ''}.pt"
    saved = load_checkpoint(feat_path)
    if saved is None:
        # the last layer's hidden states: what the loop hands a feature drafter
        features = precompute_features(target, None, train, progress=progress, select=lambda hs: hs[-1])
        save_checkpoint(feat_path, {"value": features})
    else:
        features = saved["value"]
    gen = seed_everything(SEED)
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, "eagle")).to(build_device())
    cfg = MICRO_TRAIN if micro else TRAIN

    def batches(step: int, mix: float) -> dict:
        return row_batch(train, torch.randint(0, len(train), (cfg.batch_size,), generator=gen), features)

    val_batches = [row_batch(val, torch.arange(i, min(i + 32, len(val)))) for i in range(0, len(val), 32)]
    report = train_feature_drafter(net, target, batches, val_batches, cfg, progress=progress, checkpoint=work)
    out = home / "code-eagle"
    net.save_pretrained(out)
    tok.save_pretrained(out)
    info = {"family": "code", "name": "code-eagle", "micro": micro, "seed": SEED, "distilled_from": "code-target",
            "method": "eagle", **versions()}
    shipped = FeatureDraftModel.from_pretrained(out, target=target).to(model_device(target)).eval()

    def tau() -> float:
        prompts = code_distill.tau_prompts(tok, micro)
        return code_distill.decode_tau(target, lambda: FeatureDrafter(shipped, target, num_tokens=CHAIN_TOKENS),
                                       prompts, micro)

    metrics = {"layers": 1, "hidden": net.config.hidden_size, "params": sum(p.numel() for p in shipped.parameters()),
               "train_rows": len(train), **report, "steps": report["stage1"]["steps"],
               "tokens_seen": int(report["stage1"]["steps"] * cfg.batch_size * float(row_lengths(train).float().mean())),
               "heldout_slot_accuracy": slot_accuracy(shipped, target, [on_model(b, shipped) for b in val_batches]),
               f"tau_chain{CHAIN_TOKENS}": tau(), "wall_seconds": time.perf_counter() - t0}
    write_json(out / "metrics.json", metrics)
    info["checksum"] = checksum(ZooEntry("code-eagle", shipped.cpu(), tok, info, out))
    write_json(out / "zoo.json", info)
    return {"code-eagle": metrics}


__all__ = ["NAMES", "build", "checksum", "row_batch"]
