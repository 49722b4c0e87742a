"""Training feature drafters (plain EAGLE-style, MSD, FLASH) against a frozen target.

Targets come from the frozen target's own teacher-forced forward: its last-layer features f and, for
LLaVA, the projector's image embeddings. The loss follows MSD (Sec. 3.3) and EAGLE:
``SmoothL1(f̂, f) + 0.1 · CE(softmax(lm_head f), log_softmax(lm_head f̂))`` on text positions only (image
positions carry no loss). FLASH's semi-autoregressive slots j = 1..k-1 predict the features j positions
further on, with weight ``slot_decay ** j``; each step draws the number of compressed tokens from
``compress_choices`` so that one drafter serves every compression setting.

The two-stage schedule is MSD's: stage 1 on text-only rows, stage 2 mixing multimodal rows in with a
probability rising linearly from 0 to 1 (over the first ``mix_ramp`` of the stage, then all multimodal).

Dtypes: the drafter trains in float32 whatever the target's dtype (most real LLaVA checkpoints are float16 or
bfloat16): the target's features and image embeddings are cast to float32 and its embeddings and LM head are read
through float32 copies (:func:`frozen_heads`); the saved drafter is cast to the target's dtype when loaded.

Devices: the drafter and the frozen target live on one device (a GPU in ``mmspec zoo build --device cuda``);
batches are made on the CPU and moved there where they are used (:func:`~mmspec.training.loop.on_model`), and the training noise
is drawn from a CPU generator and then moved, so what a run draws does not depend on the device.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from PIL import Image

from ..drafters.feature_model import FeatureDraftModel, drafter_sequence, scatter_image_embeds
from ..vision import capture_image_embeds, forward_inputs, image_token_id
from .artifact import stage_checkpoint
from .loop import model_device, on_model, train_loop


@dataclass
class FeatureTrainConfig:
    stage1_steps: int = 400
    stage1_budget_s: float = 120.0
    stage2_steps: int = 1200
    stage2_budget_s: float = 420.0
    batch_size: int = 32
    lr: float = 2e-3
    warmup: int = 30
    eval_every: int = 100
    patience: int = 4
    ce_weight: float = 0.1  # MSD's 0.1 × soft cross-entropy
    slot_decay: float = 0.8  # FLASH: weight of semi-autoregressive slot j
    feature_noise: float = 0.05  # EAGLE's robustness noise on the input features (uniform ± this)
    compress_choices: tuple[int, ...] = (1, 2, 4, 8)
    mix_ramp: float = 0.5  # stage 2: the multimodal share reaches 1 after this fraction of the stage
    seed: int = 1234


@torch.no_grad()
def target_features(target, batch: dict) -> tuple[torch.Tensor, torch.Tensor | None, torch.BoolTensor | None]:
    """(features [B, T, H], image embeddings scattered to [B, T, H] or None, image mask or None), on the
    target's device (``batch`` may be on the CPU: it is moved there)."""
    batch = on_model(batch, target)
    kw = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    # pixel_values and whatever else of the processor's the model takes (image_grid_thw / mm_token_type_ids for
    # Qwen2-VL's M-RoPE, image_sizes, token_type_ids, ...): the target then builds its own positions and masks
    kw.update(forward_inputs(target, batch))
    with capture_image_embeds(target) as images:
        out = target(**kw, output_hidden_states=True, logits_to_keep=1)
    image_id = image_token_id(target)
    mask = batch["input_ids"] == image_id if image_id is not None else None
    if mask is not None and not mask.any():
        mask = None
    embeds = scatter_image_embeds(mask, images.embeds).float() if mask is not None else None
    return out.hidden_states[-1].float(), embeds, mask  # float32 whatever the target's dtype: the drafter's


def batch_features(target, batch: dict) -> tuple[torch.Tensor, torch.Tensor | None, torch.BoolTensor | None]:
    """:func:`target_features` of a training batch, or the features it carries (``batch["features"]``, computed
    once for data the target sees without images, e.g. image-code sequences: a step then costs only the
    drafter's forward and backward, not the target's forward too)."""
    if "features" in batch:
        return on_model(batch["features"], target).float(), None, None
    return target_features(target, batch)


def frozen_heads(target):
    """``(embed, lm_head)``: the target's input embeddings and LM head as float32 functions (the modules
    themselves for a float32 target), so a float32 drafter trains against a float16 / bfloat16 target. The LM
    head's float32 copy is made once per call; neither is trained."""
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    if embed.weight.dtype == torch.float32 and head.weight.dtype == torch.float32:
        return embed, head
    weight = head.weight.detach().float()
    bias = head.bias.detach().float() if getattr(head, "bias", None) is not None else None

    def embed32(ids):
        return embed(ids).float()

    def head32(x):
        return F.linear(x.float(), weight, bias)

    return embed32, head32


def drafter_heads(net: FeatureDraftModel, embed, batch: dict, inputs, images, image_mask,
                  compress_to: int | None = None) -> tuple[torch.Tensor, torch.LongTensor]:
    """Teacher-forced drafter outputs over a right-padded batch: (heads [B, S, k, H], token_pos [B, S])."""
    x, ok, token_pos = drafter_sequence(net, embed, batch["input_ids"], batch["attention_mask"].bool(), inputs,
                                        image_mask, images, compress_to, align="right")
    return net.heads(net.body(inputs_embeds=x, attention_mask=ok.long()).last_hidden_state), token_pos


def slot_targets(features, token_pos, j: int, valid, image_mask):
    """For slot j (the feature j positions after an entry's token): which entries have a text-position
    target, and those targets' features [n, H]."""
    T = features.shape[1]
    text = valid & ~image_mask if image_mask is not None else valid
    tp = (token_pos + j).clamp(0, T - 1)
    ok = (token_pos >= 0) & (token_pos + j < T) & text.gather(1, tp)
    return ok, features.gather(1, tp[..., None].expand(*tp.shape, features.shape[-1]))[ok]


def feature_loss(net: FeatureDraftModel, embed, lm_head, batch: dict, features, images, image_mask,
                 cfg: FeatureTrainConfig, compress_to: int | None = None, generator: torch.Generator | None = None
                 ) -> torch.Tensor:
    valid = batch["attention_mask"].bool()
    inputs = features
    if net.training and cfg.feature_noise > 0:
        # drawn on the CPU (``generator`` is a CPU generator, checkpointed with the run) and moved to the
        # features' device: the same noise whichever device trains
        noise = torch.rand(features.shape, generator=generator) * 2 - 1
        inputs = features + cfg.feature_noise * noise.to(features)
    heads, token_pos = drafter_heads(net, embed, batch, inputs, images, image_mask, compress_to)  # [B, S, k, H]
    total = heads.new_zeros(())
    weight_sum = 0.0
    for j in range(heads.shape[2]):
        ok_j, target_f = slot_targets(features, token_pos, j, valid, image_mask)
        if not ok_j.any():
            continue
        pred = heads[:, :, j][ok_j]
        l1 = F.smooth_l1_loss(pred, target_f)
        with torch.no_grad():
            p = torch.softmax(lm_head(target_f).float(), -1)
        ce = -(p * torch.log_softmax(lm_head(pred).float(), -1)).sum(-1).mean()
        w = cfg.slot_decay ** j
        total = total + w * (l1 + cfg.ce_weight * ce)
        weight_sum += w
    return total / max(weight_sum, 1e-9)


@torch.no_grad()
def slot_accuracy(net: FeatureDraftModel, target, batches: list[dict], compress_to: int | None = None) -> list[float]:
    """Teacher-forced top-1 agreement of each drafter slot with the target's next token (text positions).
    ``batches`` may be on the CPU; each is moved to the drafter's device (the target's: see
    :func:`train_feature_drafter`)."""
    net.eval()
    embed, lm_head = frozen_heads(target)
    hits, counts = None, None
    for batch in batches:
        batch = on_model(batch, net)
        features, images, image_mask = target_features(target, batch)
        heads, token_pos = drafter_heads(net, embed, batch, features, images, image_mask, compress_to)
        k = heads.shape[2]
        hits = hits or [0] * k
        counts = counts or [0] * k
        for j in range(k):
            ok_j, target_f = slot_targets(features, token_pos, j, batch["attention_mask"].bool(), image_mask)
            if not ok_j.any():
                continue
            want = lm_head(target_f).argmax(-1)
            got = lm_head(heads[:, :, j][ok_j]).argmax(-1)
            hits[j] += int((want == got).sum())
            counts[j] += int(ok_j.sum())
    return [h / max(c, 1) for h, c in zip(hits or [], counts or [])]


def train_feature_drafter(net: FeatureDraftModel, target, batches, val_batches: list[dict],
                          cfg: FeatureTrainConfig | None = None, progress: bool = True, checkpoint=None,
                          checkpoint_every_s: float = 300.0) -> dict:
    """Two-stage training. ``batches(step, multimodal_prob)`` returns a right-padded batch dict
    (``input_ids``, ``attention_mask``, optional ``pixel_values`` for the rows holding image tokens).
    ``checkpoint``: a directory for per-stage checkpoints; a killed run called again with it resumes.

    ``net`` and ``target`` must be on one device (the drafter reads the target's features, embeddings and LM
    head); batches may be made on the CPU: they are moved to that device where used."""
    cfg = cfg or FeatureTrainConfig()
    if model_device(net) != model_device(target):
        raise ValueError(f"the drafter is on {model_device(net)} but the target on {model_device(target)}: "
                         "move both to the device that trains")
    if net.fc.weight.dtype != torch.float32:
        raise ValueError(f"the drafter is {net.fc.weight.dtype}: it trains in float32 (build it in float32; it is "
                         "cast to the target's dtype when loaded)")
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    embed, lm_head = frozen_heads(target)
    rng = random.Random(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    compress = bool(net.config.compress_tokens)
    choices = [c for c in cfg.compress_choices if c <= net.config.compress_tokens] or [net.config.compress_tokens]
    val = [(b, *target_features(target, b)) for b in (on_model(b, net) for b in val_batches)]

    def loss_fn(model, item):
        batch, n = item
        feats, images, mask = batch_features(target, batch)
        return feature_loss(model, embed, lm_head, batch, feats, images, mask, cfg, n, g)

    def val_loss() -> float:
        net.eval()
        with torch.no_grad():
            n = max(choices) if compress else None
            return sum(float(feature_loss(net, embed, lm_head, b, f, i, m, cfg, n)) for b, f, i, m in val) / len(val)

    report = {"config": asdict(cfg), "method": net.config.method}
    t0 = time.perf_counter()
    for stage, steps, budget in ((1, cfg.stage1_steps, cfg.stage1_budget_s), (2, cfg.stage2_steps, cfg.stage2_budget_s)):
        if steps <= 0:
            continue

        def next_batch(step: int, stage=stage, steps=steps):
            mix = 0.0 if stage == 1 else min(1.0, (step + 1) / max(1.0, cfg.mix_ramp * steps))
            return batches(step + (0 if stage == 1 else 1_000_000), mix), (rng.choice(choices) if compress else None)

        res = train_loop(net, next_batch, val_loss, loss_fn, max_steps=steps, budget_s=budget, lr=cfg.lr,
                         warmup=cfg.warmup, eval_every=cfg.eval_every, patience=cfg.patience,
                         desc=f"{net.config.method} stage {stage}", progress=progress,
                         checkpoint=stage_checkpoint(checkpoint, stage), checkpoint_every_s=checkpoint_every_s,
                         generators=(g, rng))
        report[f"stage{stage}"] = {"steps": res.steps, "seconds": res.seconds, "best_val_loss": res.best_val_loss,
                                   "stopped": res.stopped, "val_history": res.val_history}
    report["train_seconds"] = time.perf_counter() - t0
    settings = sorted(set(choices)) if compress else [None]
    report["slot_accuracy"] = {str(n): slot_accuracy(net, target, val_batches, n) for n in settings}
    net.eval()
    return report


def read_training_rows(path: str, placeholder: str, need_response: bool = True) -> list[dict]:
    """Every row of a training ``.jsonl`` checked before training starts: JSON, ``image`` / ``prompt`` /
    ``response`` strings (``response`` optional without ``need_response``: the target answers), the picture present
    (a relative path is relative to the data file, as in ``mmspec eval``) and the prompt holding the image
    placeholder. All faults are reported with file:line."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--data {path} is not a file")
    rows, faults = [], []
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            faults.append(f"{path}:{n}: not JSON ({err.msg})")
            continue
        if not isinstance(row, dict):
            faults.append(f"{path}:{n}: a row is an object with image, prompt and response")
            continue
        bad = [k for k in ("image", "prompt", "response") if (k != "response" or need_response or k in row)
               and (not isinstance(row.get(k), str) or not row[k])]
        if bad:
            faults.append(f"{path}:{n}: missing or empty field(s) {bad}")
            continue
        image = Path(row["image"]) if Path(row["image"]).is_absolute() else file.parent / row["image"]
        if not image.is_file():
            faults.append(f"{path}:{n}: image {image} does not exist")
        if placeholder not in row["prompt"]:
            faults.append(f"{path}:{n}: the prompt lacks the image placeholder {placeholder!r}")
        rows.append({**row, "image": str(image)})
    if faults:
        more = f" (and {len(faults) - 10} more)" if len(faults) > 10 else ""
        raise ValueError(f"{len(faults)} bad training row(s):\n  " + "\n  ".join(faults[:10]) + more)
    if not rows:
        raise ValueError(f"{path} holds no rows")
    return rows


def jsonl_batches(path: str, processor, batch_size: int, seed: int):
    """``batches(step, multimodal_prob)`` over a user ``.jsonl`` of ``{"image": path, "prompt": ..., "response":
    ...}`` rows (the prompt holds the processor's image placeholder; a relative image path is relative to the
    data file). Text-only rows drop the image and its placeholder. Rows are right-padded whatever the
    processor's tokenizer is set to (the caller's processor is left as it is)."""
    placeholder = getattr(processor, "image_token", "<image>")
    rows = read_training_rows(path, placeholder)

    def batches(step: int, multimodal_prob: float) -> dict:
        rng = random.Random(seed * 1_000_003 + step)
        picked = [rows[rng.randrange(len(rows))] for _ in range(batch_size)]
        with_image = [rng.random() < multimodal_prob for _ in picked]
        texts = [r["prompt"] + r["response"] if img else (r["prompt"] + r["response"]).replace(placeholder, "")
                 for r, img in zip(picked, with_image)]
        images = [Image.open(r["image"]).convert("RGB") for r, img in zip(picked, with_image) if img]
        out = processor(images=images or None, text=texts, return_tensors="pt", padding=True, padding_side="right")
        batch = dict(out)  # every processor output (pixel_values, image_grid_thw, mm_token_type_ids, image_sizes, ...)
        batch.setdefault("pixel_values", None)
        return batch

    return batches


__all__ = ["FeatureTrainConfig", "target_features", "frozen_heads", "feature_loss", "slot_accuracy",
           "train_feature_drafter", "read_training_rows", "jsonl_batches"]
