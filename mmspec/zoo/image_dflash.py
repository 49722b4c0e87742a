"""``image-dflash``: the DFlash block-diffusion drafter (:mod:`mmspec.drafters.dflash_model`) for the guided
``image-target``: one forward of ``[last code, MASK × 15]`` drafts the picture's next 15 codes.

Its context is the target's *guided* features h_u + s (h_c − h_u) at CFG ``CFG_SCALE`` of five of its twelve layers
(the paper's spread, 1 to N−3; :class:`~mmspec.guidance.CFGModel` with ``feature_entries``), so the drafter runs one
row per picture while the target runs two. Two Qwen3-style layers as wide as the target (192); the target's
embeddings and LM head shared; the mask token is the null class id (the target never emits it, nor any class id:
the drafter's slots put no mass on them, :func:`~mmspec.drafters.dflash_model.emitted`).

Data: the guided target's own sampled pictures, the ones image-eagle trains on
(:func:`~mmspec.zoo.image_drafters.guided_samples`); the drafter learns each slot's marginal given the context, which
is the q a lossless sampler needs (slots are independent given the context: p/q rejection per slot stays exact).
The features over every row are computed once and kept in ``<home>/.build/image-dflash/`` with the training
checkpoint, so an interrupted build resumes. The shipped drafter's τ of real decoding (T = 1, lossless and with
LANTERN++'s relaxed acceptance) on held-out pictures is recorded in ``metrics.json``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from ..drafters.dflash_io import load_dflash, save_dflash
from ..drafters.dflash_model import DFlashDraftModel, make_config
from ..guidance import CFGModel
from ..image_codes import guided_for_dflash
from ..image_gen import ImageGenerator
from ..training.deer import Generations
from ..training.dflash import DFlashTrainConfig, block_acceptance, tau_of, train_dflash, validation_batches
from ..training.loop import model_device, on_model
from .code_dflash import cached_features, checksum, checksum_output
from .common import build_device, build_dir, seed_everything
from .entry import ZooEntry
from .image_drafters import CFG_SCALE, bound_dir, guided_samples
from .image_loader import DFLASH_NAMES
from .image_records import write_records

NAMES = DFLASH_NAMES
SEED = 6262
LAYERS, BLOCK = 2, 16
TRAIN = DFlashTrainConfig(steps=3000, budget_s=35 * 60.0, batch_size=16, anchors=16, lr=1.5e-3, warmup=100,
                          eval_every=250, patience=4, val_rows=128, kl_weight=0.0, cache_features=True, seed=SEED)
# stage 2 continues from stage 1's kept weights with a fresh, lower cosine: stage 1's held-out figure was still
# climbing at its end (greedy accepted length 0.373 -> 0.397 over its last 1000 steps; τ of lossless sampling 1.96
# on a whole-block chain, 2.42 on the DDTree)
TRAIN2 = dataclasses.replace(TRAIN, steps=3000, lr=7.5e-4, warmup=50, seed=SEED + 1)
MICRO_TRAIN = dataclasses.replace(TRAIN, steps=10, budget_s=30.0, batch_size=4, anchors=4, warmup=2, eval_every=5,
                                  val_rows=8)
N_TAU, MICRO_N_TAU = 12, 1  # held-out pictures decoded for the recorded τ
TAU_BOUND = dict(lam=10.0, lantern_k=16)  # LANTERN++'s bound the recorded relaxed τ uses


def guided_target(target, layout, net: DFlashDraftModel) -> CFGModel:
    """The target under CFG, returning the guided features of ``net``'s layers."""
    return guided_for_dflash(target, layout, CFG_SCALE, net)


def rows_of(seqs: torch.LongTensor) -> Generations:
    """Pictures ``[class token] + codes`` as rows whose response is the codes."""
    return Generations(seqs, torch.ones(len(seqs), dtype=torch.long), seqs.shape[1] - 1)


@torch.no_grad()
def decode_tau(gen: ImageGenerator, class_ids: list[int], **kw) -> float:
    """Mean codes per target forward after the prefill (τ) sampling ``class_ids`` at T = 1, one picture at a time."""
    return tau_of(gen.generate([c], drafter="dflash", seed=SEED + i, **kw).stats for i, c in enumerate(class_ids))


def build(home: Path, micro: bool = False, progress: bool = True, names: list[str] | None = None) -> dict:
    home = Path(home)
    t0 = time.perf_counter()
    data = guided_samples(home, micro, progress, "image-dflash")
    target, layout = data.target, data.layout
    work = bound_dir(build_dir(home, "image-dflash"), data.entry.config["checksum"])  # features of this target
    train, val = rows_of(data.seqs[: data.train]), rows_of(data.seqs[data.train:])
    seed_everything(SEED)
    cfg = make_config(target.config, num_layers=LAYERS, block_size=BLOCK, mask_token_id=layout.null_id)
    net = DFlashDraftModel(cfg).to(build_device())
    guided = guided_target(target, layout, net)
    features, feature_seconds = cached_features(work, "features-train.pt", guided, net, train, progress)
    val_features, _ = cached_features(work, "features-val.pt", guided, net, val, progress)
    plan = [MICRO_TRAIN] if micro else [TRAIN, TRAIN2]
    stages = {}
    for i, run_cfg in enumerate(plan, 1):  # each stage checkpointed: a killed build resumes inside it
        stages[f"stage{i}"] = train_dflash(net, guided, train, val, run_cfg, progress=progress,
                                           checkpoint=work / f"train{'' if i == 1 else i}.pt", features=features,
                                           val_features=val_features)
    del features
    report = {**stages, "steps": sum(r["steps"] for r in stages.values()),
              "seconds": sum(r["seconds"] for r in stages.values()), "stopped": stages[f"stage{len(plan)}"]["stopped"],
              "heldout_before": stages["stage1"]["heldout_before"],
              "heldout_after": stages[f"stage{len(plan)}"]["heldout_after"]}
    out = home / "image-dflash"
    save_dflash(net, out, dtype=torch.float16)  # fp16 like the rest of the zoo (loading casts back to fp32)
    shipped = load_dflash(out).to(model_device(target))
    entry = data.entry
    gen = ImageGenerator(target, None, entry.extras["vq"].to(model_device(target)), layout, entry.extras["classes"],
                         dflash_drafter=shipped)
    n_tau = MICRO_N_TAU if micro else N_TAU
    classes = [i % layout.num_classes for i in range(n_tau)]
    metrics = {"layers": LAYERS, "hidden": cfg.hidden_size, "block_size": BLOCK, "cfg_scale": CFG_SCALE,
               "target_layer_ids": shipped.target_layer_ids, "params": sum(p.numel() for p in shipped.parameters()),
               "train_rows": len(train), "val_rows": len(val), "feature_seconds": feature_seconds, **report,
               "train_steps": report["steps"], "train_seconds": round(report["seconds"], 2),
               "heldout_shipped": block_acceptance(shipped, guided, [on_model(b, shipped) for b in validation_batches(
                   val, run_cfg, BLOCK, val_features)]),
               "tau_decode": {"pictures": n_tau, "temperature": 1.0,
                              "spec_chain": decode_tau(gen, classes, method="spec", tree="chain"),
                              "spec_ddtree": decode_tau(gen, classes, method="spec", tree="ddtree"),
                              "lantern++_chain": decode_tau(gen, classes, method="lantern++", tree="chain",
                                                            **TAU_BOUND),
                              "lantern++_bound": TAU_BOUND}}
    metrics["wall_seconds"] = time.perf_counter() - t0
    facts = {"method": "dflash", "target": "image-target", "cfg_scale": CFG_SCALE, "drafter_seed": SEED,
             "params": metrics["params"], "checksum": checksum(ZooEntry("image-dflash", shipped.cpu()))}
    return {"image-dflash": write_records(home, "image-dflash", metrics, facts, micro)}


__all__ = ["NAMES", "build", "checksum", "checksum_output", "guided_target", "rows_of"]
