"""Training a feature drafter against a guided visual AR target (``mmspec train image-drafter``).

The target is wrapped in :class:`~mmspec.guidance.CFGModel`, whose hidden states end with the *guided*
last-layer feature ``h_u + s (h_c - h_u)``. The LM head is linear, so ``lm_head`` of that feature is the
guided logits: a drafter that learns to predict it drafts the guided distribution LANTERN verifies, from
the conditional row alone (one drafter row per image instead of CFG's two).

Data is the guided target's own samples at the scale the drafter will serve (self-distillation: the
drafter learns what the target generates, not what the training images hold). The loss is the feature
drafter's (SmoothL1 on features + 0.1 soft cross-entropy, :func:`~mmspec.training.feature.feature_loss`);
``sar_tokens > 1`` adds FLASH-style semi-autoregressive slots (several draft tokens per drafter forward).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
from ..image_codes import generate_codes, guided_on_codes
from .artifact import cached
from .feature import FeatureTrainConfig, target_features, train_feature_drafter
from .loop import load_checkpoint, model_device, save_checkpoint, to_device


@torch.no_grad()
def target_samples(target, layout, n: int, cfg_scale: float, seed: int, batch_size: int = 256,
                   temperature: float = 1.0, progress: bool = True, partial: Path | None = None) -> torch.LongTensor:
    """``n`` sequences ``[class token] + codes`` sampled from the guided target, classes cycled evenly.
    The target samples on its own device from the CPU generator; the sequences are returned on the CPU (they are
    the drafters' training data, cached to disk and drawn from by CPU batch samplers). With ``partial`` the rows
    drawn so far and the generator's state are saved after every batch, so a killed run goes on from the last
    finished batch with the same draws (a CPU build samples for about 20 minutes)."""
    g = torch.Generator().manual_seed(seed)
    classes = [i % layout.num_classes for i in range(n)]
    rows = []
    saved = load_checkpoint(partial) if partial is not None else None
    if saved is not None and saved["n"] == n and saved["seed"] == seed and saved["batch_size"] == batch_size:
        rows = saved["rows"]
        g.set_state(saved["generator"])
    starts = range(0, n, batch_size)
    for i in tqdm(starts[len(rows):], desc="target samples", disable=not progress, leave=False,
                  initial=len(rows), total=len(starts)):
        ids = classes[i:i + batch_size]
        codes = generate_codes(target, ids, cfg_scale, temperature, 0, g, layout).cpu()
        rows.append(torch.cat([layout.class_tokens(ids)[:, None], layout.codes_to_tokens(codes)], dim=1))
        if partial is not None:
            save_checkpoint(partial, {"rows": rows, "generator": g.get_state(), "n": n, "seed": seed,
                                      "batch_size": batch_size})
    return torch.cat(rows)


def sequence_batches(seqs: torch.LongTensor, batch_size: int, seed: int, features: torch.Tensor | None = None):
    """``batches(step, multimodal_prob)`` over fixed-length sequences (the image target has no images in), each
    with its rows' precomputed target ``features`` [len(seqs), T, H] when given."""

    def batches(step: int, multimodal_prob: float = 0.0) -> dict:
        rng = random.Random(seed * 1_000_003 + step)
        pick = torch.tensor([rng.randrange(len(seqs)) for _ in range(batch_size)])
        ids = seqs[pick]
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if features is not None:
            batch["features"] = features[pick]
        return batch

    return batches


@torch.no_grad()
def guided_features(guided, seqs: torch.LongTensor, batch_size: int = 64, progress: bool = True) -> torch.Tensor:
    """The guided target's last-layer features of every sequence [N, T, H], on the CPU, computed once: the
    target is frozen, so the features a training step needs are the same every epoch. Computing them per step
    ran the 12-layer guided target (two rows per sequence) inside every drafter step, the larger part of its
    cost."""
    out = []
    for i in tqdm(range(0, len(seqs), batch_size), desc="target features", disable=not progress, leave=False):
        ids = seqs[i:i + batch_size]
        out.append(target_features(guided, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})[0].cpu())
    return torch.cat(out)


def train_image_drafter(target, layout, cfg_scale: float = 3.0, sar_tokens: int = 1, samples: int = 4096,
                        val_samples: int = 256, train_cfg: FeatureTrainConfig | None = None, seed: int = 0,
                        progress: bool = True, seqs: torch.LongTensor | None = None, checkpoint=None,
                        checkpoint_every_s: float = 300.0):
    """Returns (drafter network, report). ``target``: the raw visual AR model (it gets wrapped here).
    ``seqs``: ``samples + val_samples`` guided target samples already drawn (else drawn here).
    ``checkpoint``: a directory for the samples and the training checkpoints (a killed run resumes there).
    The drafter's initial weights and the run's draws come from ``seed``; the caller's global RNG is left as it
    was."""
    if cfg_scale != 1.0 and layout.null_id is None:
        raise ValueError("classifier-free guidance needs a null class token in the layout")
    device = model_device(target)
    # the wrapper's mask of allowed ids is a CPU buffer when made: moved to the target's device with it
    guided = guided_on_codes(target, layout, cfg_scale).to(device)
    cfg = train_cfg or FeatureTrainConfig(stage1_steps=3000, stage1_budget_s=600.0, stage2_steps=0)
    t0 = time.perf_counter()
    if seqs is None:
        seqs = cached(None if checkpoint is None else checkpoint / "samples.pt", lambda: target_samples(
            target, layout, samples + val_samples, cfg_scale, seed, progress=progress))
    elif len(seqs) != samples + val_samples:
        raise ValueError(f"{len(seqs)} sequences given for {samples} + {val_samples} samples")
    sample_seconds = time.perf_counter() - t0
    train, val = seqs[:samples], seqs[samples:]
    val_fn = sequence_batches(val, min(64, len(val)), seed + 99)
    # validation batches meet the target (its features) and the drafter outside train_loop: on their device
    val_batches = [to_device(val_fn(i), device) for i in range(max(1, len(val) // 64))]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        net = FeatureDraftModel(FeatureDrafterConfig.for_target(guided, "eagle", sar_tokens=sar_tokens,
                                                                guidance_scale=cfg_scale))
        net = net.to(device)  # made on the CPU (the same initial weights whatever the device), trained there
        # kept with the checkpoints: a resumed run does not recompute them (16 minutes for 8192 rows on a CPU)
        feats = cached(None if checkpoint is None else Path(checkpoint) / f"features-{len(train)}.pt",
                       lambda: guided_features(guided, train, progress=progress))
        report = train_feature_drafter(net, guided, sequence_batches(train, cfg.batch_size, seed, feats), val_batches,
                                       cfg, progress=progress, checkpoint=checkpoint,
                                       checkpoint_every_s=checkpoint_every_s)
    report.update(samples=samples, val_samples=val_samples, cfg_scale=cfg_scale, sample_seconds=sample_seconds,
                  params=sum(p.numel() for p in net.parameters()))
    return net, report


__all__ = ["target_samples", "sequence_batches", "guided_features", "train_image_drafter"]
