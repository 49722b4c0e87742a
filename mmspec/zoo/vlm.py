"""The zoo's vision-language family, trained from scratch on the procedurally drawn scenes of
:mod:`mmspec.zoo.vlm_data`:

- ``vlm-target``: a stock ``transformers.LlavaForConditionalGeneration`` (tiny ``CLIPVisionModel`` tower,
  2-layer MLP projector, small Llama language model) with a stock ``LlavaProcessor``
  (``CLIPImageProcessor`` + the zoo's shared BPE tokenizer; ``<image>`` is id 3);
- ``vlm-drafter``: a text-only ``LlamaForCausalLM`` with the same tokenizer, trained on the target's own
  token ids (image placeholders included) without the picture. It cannot see the image: it is the baseline
  drafter, and it reads exactly the ids the speculative engine hands every drafter.

Prompt format (the processor expands ``<image>`` into ``num_image_tokens`` copies of id 3: 144 for a full
build, 5-pixel patches over the 60-pixel scene, so each 20-pixel grid cell is 4 x 4 patches)::

    target : "<image>\\nQuestion: what colour is the circle?\\nAnswer:"  ->  " red" <eos>
             "<image>\\nCaption:"                                       ->  " a large red circle left of ..." <eos>
    drafter: the same ids (the placeholders carry no picture for it)

Recipe (CPU), LLaVA-style:

1. *vision pretraining*: the CLIP vision tower plus a throwaway linear head learns to classify, at every
   patch, the shape / colour / size of the object in the patch's grid cell and the cell's index (dense
   labels from the scene);
2. *instruction tuning*: the tower is frozen; projector (its first units seeded with the stage-1 head, see
   ``seed_projector``) and a shallow language model learn single-turn question answering and captioning,
   with the loss on the answer/caption tokens and their ``<eos>`` only;
3. *depth growth*: the language model is grown to full depth (``growth.grow_depth`` mode ``"split"``: r copies
   of each trained layer, their output projections divided by r, so every layer computes from the first step
   and the base's function is kept to first order; zeroed copies left the first grown code target's new
   layers unused) and trained on, so the target's decode step costs many drafter forwards
   (the ratio speculative decoding lives on) without training a deep model from scratch.

Every stage runs ``training.loop.train_loop`` for a fixed number of steps (the time budget is only a safety net),
checkpointed under ``<home>/.build/<name>/``: an interrupted ``mmspec zoo build --only vlm-target`` resumes
where it stopped. The drafter is trained like stage 2 on the same examples without the picture.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import (CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlamaForCausalLM, LlavaConfig,
                          LlavaForConditionalGeneration, LlavaProcessor)

from ..training.loop import TrainResult, model_device, on_model, train_loop
from . import vlm_data as vd
from . import vlm_dflash, vlm_drafters
from .code_data import EOS, IMAGE, ensure_tokenizer
from .common import build_device, build_dir, logits_checksum, seed_everything, versions
from .entry import ZooEntry
from .growth import grow_depth, unused_layers
from .home import write_json
from .vlm_examples import Encoder, ScenePool, collate, pixel_tensor, to_pixels
from .vlm_loader import BASE_NAMES, NAMES, load, set_generation_config

SEED = 20240611

# Sizes: 5-pixel patches give 144 visual tokens per image (LLaVA-1.5 has 576; the old 20-pixel patches gave
# 9, leaving FLASH nothing to compress). The language model is 16 layers of 128: measured with 1 thread (median,
# random weights), a KV-cached decode step at 184 tokens of context costs 16-20x an EAGLE/MSD drafter forward (one
# decoder layer of the same width + the LM head) and 10-12x a FLASH forward (its semi-autoregressive head
# included), the regime of the papers' 7B targets (12 layers: ~8x).
# Fixed step counts (max_steps) make rebuilds deterministic and resumable; budget_s is a safety net.
# Trained at full depth from scratch after the vision pretraining (base_layers == text layers: no growth), sized
# for a GPU build (`mmspec zoo build --device cuda`: 1200 vision steps in 16 s, 5000 language steps in 7.5 min on
# one H100 with two other builds running). Recipe history, all measured on held-out scenes: the 4-layer base grown
# to 16 layers (800 steps at LR 5e-4) reached 87.6% answer accuracy with every grown layer unused (ablation
# <= 0.005 nats); 3000 grown steps at LR 1e-3 reached 91.6%, grown layers still unused; 16 layers from scratch
# (5000 steps, LR 1e-3) reached 96.6% (colour 97.5%, shape 91.3%).
FULL = {
    "patch_size": 5,
    "vision": {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 3, "num_attention_heads": 4},
    "text": {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 16, "num_attention_heads": 4},
    "base_layers": 16,  # stage 2 trains this many layers; fewer would be grown to text.num_hidden_layers in stage 3
    "drafter": {"hidden_size": 96, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4},
    "pool_scenes": 16384,  # training scenes rendered once, shared by all stages
    "vision_train": {"budget_s": 1800.0, "batch_size": 64, "lr": 2e-3, "warmup": 50, "eval_every": 100,
                     "patience": 4, "val_scenes": 256, "max_steps": 1200},
    "target_train": {"budget_s": 24 * 3600.0, "batch_size": 48, "lr": 1e-3, "warmup": 200, "eval_every": 200,
                     "patience": 6, "val_scenes": 64, "max_steps": 5000},
    "drafter_train": {"budget_s": 1800.0, "batch_size": 64, "lr": 3e-3, "warmup": 50, "eval_every": 100,
                      "patience": 3, "val_scenes": 64, "max_steps": 1200},
    "eval_scenes": 240,  # one question of every type per scene
    "caption_scenes": 120,
}
MICRO = {
    "patch_size": 10,  # 36 visual tokens, 2 x 2 patches per cell: the full build's layout, smaller
    "vision": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2},
    "text": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2},
    "base_layers": 1,
    "drafter": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2},
    "pool_scenes": 128,
    "vision_train": {"budget_s": 2.0, "batch_size": 16, "lr": 3e-3, "warmup": 5, "eval_every": 10,
                     "patience": 3, "val_scenes": 8, "max_steps": 20},
    "target_train": {"budget_s": 3.0, "batch_size": 8, "lr": 3e-3, "warmup": 5, "eval_every": 10,
                     "patience": 3, "val_scenes": 4, "max_steps": 20},
    "grow_train": {"budget_s": 3.0, "batch_size": 8, "lr": 1e-3, "warmup": 2, "eval_every": 5,
                   "patience": 3, "val_scenes": 4, "max_steps": 10},
    "drafter_train": {"budget_s": 2.0, "batch_size": 8, "lr": 3e-3, "warmup": 5, "eval_every": 10,
                      "patience": 3, "val_scenes": 4, "max_steps": 20},
    "eval_scenes": 4,
    "caption_scenes": 2,
}
CHECKPOINT_EVERY_S = 300.0
FULL_STAGE2_TUNES_TOWER = False  # tuning it at the stage-2 rate stalled validation at 0.50
THRESHOLDS = {"colour": 0.9, "shape": 0.9}  # held-out greedy accuracy per type required of a full build
ACCURACY_THRESHOLD = 0.95  # ... and over all question types
# Colour questions ("what colour is the cross?") find an object by its shape, the hardest binding: with
# uniform weights they stayed at 58% while every other type reached 98-100%; they get 3x the weight.
QUESTION_WEIGHTS = {"colour": 3.0, "shape": 1.0, "count": 0.5, "position": 1.0, "size": 0.5}
CAPTION_FRACTION = 0.3  # share of training examples that are captions (the rest: question types uniformly)
FP16_TOLERANCE = 0.01  # keep fp32 weights if fp16 rounding raises held-out loss by more than this (relative)
CHECKSUM_SCENE = vd.split_seed("test", 0)
CHECKSUM_PROMPT = vd.QUESTION_PROMPT.format(question="what colour is the circle?")
MAX_ANSWER_TOKENS = 8
MAX_CAPTION_TOKENS = 48


# --------------------------------------------------------------------------- processor and configs

def image_processor(image_size: int = vd.IMAGE_SIZE):
    """CLIP-style preprocessing without resizing or cropping: pixels / 255, normalised to [-1, 1]."""
    return CLIPImageProcessor(do_resize=False, do_center_crop=False, do_rescale=True, rescale_factor=1 / 255,
                              do_normalize=True, image_mean=[0.5] * 3, image_std=[0.5] * 3, do_convert_rgb=True,
                              size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size})


def make_processor(tokenizer, patch_size: int = vd.CELL):
    return LlavaProcessor(image_processor=image_processor(), tokenizer=tokenizer, patch_size=patch_size,
                          vision_feature_select_strategy="default", image_token=IMAGE, num_additional_image_tokens=1)


def num_image_tokens(patch_size: int = vd.CELL) -> int:
    return (vd.IMAGE_SIZE // patch_size) ** 2


def _text_config(sizes: dict, tokenizer):
    heads = sizes["num_attention_heads"]
    return LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=256, num_key_value_heads=heads,
                       pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
                       tie_word_embeddings=False, **sizes)


def target_config(cfg: dict, tokenizer):
    vision = CLIPVisionConfig(image_size=vd.IMAGE_SIZE, patch_size=cfg["patch_size"], num_channels=3,
                              projection_dim=cfg["vision"]["hidden_size"], **cfg["vision"])
    config = LlavaConfig(vision_config=vision, text_config=_text_config(cfg["text"], tokenizer),
                         image_token_index=tokenizer.convert_tokens_to_ids(IMAGE),
                         image_seq_length=num_image_tokens(cfg["patch_size"]), projector_hidden_act="gelu",
                         vision_feature_select_strategy="default", vision_feature_layer=-1, tie_word_embeddings=False)
    config.pad_token_id = tokenizer.pad_token_id
    config.eos_token_id = tokenizer.eos_token_id
    return config


# --------------------------------------------------------------------------- data

def sample_item(rng: random.Random, scene: vd.Scene) -> vd.Question:
    """A caption CAPTION_FRACTION of the time, else a question drawn by QUESTION_WEIGHTS (about a random
    object where it matters)."""
    if rng.random() < CAPTION_FRACTION:
        return vd.Question("caption", "", scene.caption)
    kind = rng.choices(vd.QUESTION_TYPES, weights=[QUESTION_WEIGHTS[k] for k in vd.QUESTION_TYPES])[0]
    return rng.choice([q for q in scene.questions if q.kind == kind])


def example_batches(enc: Encoder, pool: ScenePool, batch_size: int, image: bool, seed: int):
    """``next_batch(step)``: random (scene, item) examples from the pool, deterministic per step."""

    def next_batch(step: int) -> dict:
        rng = random.Random(seed * 1_000_003 + step)
        idx = [rng.randrange(len(pool)) for _ in range(batch_size)]
        batch = collate([enc.sequence(sample_item(rng, pool.scenes[i])) for i in idx], enc.pad_id)
        if image:
            batch["pixel_values"] = to_pixels(pool.images[idx])
        return batch

    return next_batch


def item_batches(enc: Encoder, pairs: list[tuple[vd.Scene, vd.Question]], image: bool,
                 batch_size: int = 64) -> list[dict]:
    out = []
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i: i + batch_size]
        batch = collate([enc.sequence(q) for _, q in chunk], enc.pad_id)
        batch["kinds"] = [q.kind for _, q in chunk]
        if image:
            batch["pixel_values"] = pixel_tensor([sc.image() for sc, _ in chunk])
        out.append(batch)
    return out


def all_items(scenes: list[vd.Scene]) -> list[tuple[vd.Scene, vd.Question]]:
    return [(sc, q) for sc in scenes for q in sc.items()]


# --------------------------------------------------------------------------- losses

def _answer_logits(model, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits at the positions that predict a labelled token (the LM head runs nowhere else); the batch is
    moved to the model's device (batches are made on the CPU)."""
    batch = on_model(batch, model)
    kwargs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    if "pixel_values" in batch:
        kwargs["pixel_values"] = batch["pixel_values"]
    h = model.model(**kwargs).last_hidden_state[:, :-1]
    labels = batch["labels"][:, 1:]
    sel = labels != -100
    return model.lm_head(h[sel]).float(), labels[sel], sel


def loss_fn(model, batch: dict) -> torch.Tensor:
    """Cross-entropy on the answer/caption tokens, averaged per sequence then over the batch, so that a
    one-word answer weighs as much as a 25-token caption."""
    logits, targets, sel = _answer_logits(model, batch)
    nll = F.cross_entropy(logits, targets, reduction="none")
    rows = sel.nonzero()[:, 0]
    per_row = torch.zeros(sel.shape[0], device=nll.device).index_add_(0, rows, nll)
    counts = sel.sum(1)
    return (per_row[counts > 0] / counts[counts > 0]).mean()


@torch.no_grad()
def teacher_forced(model, batches: list[dict]) -> dict:
    """Mean answer-token loss and argmax token accuracy, overall and per item kind."""
    model.eval()
    acc: dict[str | None, list[float]] = {}
    for b in batches:
        logits, targets, sel = _answer_logits(model, b)
        nll = F.cross_entropy(logits, targets, reduction="none")
        correct = (logits.argmax(-1) == targets).float()
        rows = sel.nonzero()[:, 0].tolist()
        kinds = b.get("kinds") or [None] * sel.shape[0]
        for key in {None, *kinds}:
            m = torch.tensor([key is None or kinds[r] == key for r in rows], dtype=torch.bool, device=nll.device)
            a = acc.setdefault(key, [0.0, 0.0, 0])
            a[0] += float(nll[m].sum())
            a[1] += float(correct[m].sum())
            a[2] += int(m.sum())

    def fin(a):
        return {"loss": a[0] / max(1, a[2]), "token_accuracy": a[1] / max(1, a[2]), "tokens": a[2]}

    return {**fin(acc.get(None, [0.0, 0.0, 0])),
            "by_kind": {k: fin(v) for k, v in sorted(acc.items(), key=lambda kv: str(kv[0])) if k is not None}}


# --------------------------------------------------------------------------- greedy answers

@torch.no_grad()
def generate_answers(model, tokenizer, pairs: list[tuple[vd.Scene, vd.Question]], image: bool,
                     processor=None, batch_size: int = 64, n_image: int | None = None) -> list[str | None]:
    """Greedy ``model.generate`` on single-turn prompts (the target through its processor, with
    ``pixel_values``; the drafter on the same ids without the picture). Prompts are batched by token length,
    so no padding is involved. Returns the decoded answer (text before ``<eos>``, stripped) or None where no
    ``<eos>`` came. ``n_image``: the placeholders per picture (default: the target's ``image_seq_length``)."""
    model.eval()
    eos = tokenizer.eos_token_id
    enc = Encoder(tokenizer, n_image or model.config.image_seq_length)
    texts = [vd.with_image(q.prompt) for _, q in pairs]
    ids = [enc.prompt_ids(q) for _, q in pairs]
    groups: dict[tuple[int, bool], list[int]] = {}
    for i, (_, q) in enumerate(pairs):
        groups.setdefault((len(ids[i]), q.kind == "caption"), []).append(i)
    out: list[str | None] = [None] * len(pairs)
    for (_, is_caption), idx in sorted(groups.items()):
        for j in range(0, len(idx), batch_size):
            chunk = idx[j: j + batch_size]
            if image:
                inputs = processor(images=[pairs[i][0].image() for i in chunk], text=[texts[i] for i in chunk],
                                   return_tensors="pt")
            else:
                inputs = {"input_ids": torch.tensor([ids[i] for i in chunk])}
            inputs = on_model(dict(inputs), model)
            n_prompt = inputs["input_ids"].shape[1]
            gen = model.generate(**inputs, do_sample=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos,
                                 max_new_tokens=MAX_CAPTION_TOKENS if is_caption else MAX_ANSWER_TOKENS)
            for row, i in enumerate(chunk):
                new = gen[row, n_prompt:].tolist()
                if eos in new:
                    out[i] = tokenizer.decode(new[: new.index(eos)]).strip()
    return out


def answer_metrics(preds: list[str | None], pairs: list[tuple[vd.Scene, vd.Question]]) -> dict:
    """Exact-match accuracy overall (questions only) and per question type; caption exact match and
    position-wise word accuracy."""
    by: dict[str, list[bool]] = {}
    hit = tot = 0
    for p, (_, q) in zip(preds, pairs):
        by.setdefault(q.kind, []).append(p == q.answer)
        if q.kind == "caption":
            ref, hyp = q.answer.split(), (p or "").split()
            hit += sum(a == b for a, b in zip(ref, hyp))
            tot += max(len(ref), len(hyp))
    questions = [ok for k, v in by.items() if k != "caption" for ok in v]
    out = {"accuracy": sum(questions) / max(1, len(questions)), "n_questions": len(questions),
           "accuracy_by_type": {k: sum(v) / len(v) for k, v in sorted(by.items()) if k != "caption"}}
    if "caption" in by:
        out["caption_exact_match"] = sum(by["caption"]) / len(by["caption"])
        out["caption_word_accuracy"] = hit / max(1, tot)
        out["n_captions"] = len(by["caption"])
    return out


# --------------------------------------------------------------------------- training stages

class _CellClassifier(torch.nn.Module):
    """Vision tower + throwaway linear head: per-patch shape / colour / size logits of the object in the
    patch's grid cell, and the cell's index (which keeps each patch's position readable from its features)."""

    def __init__(self, tower):
        super().__init__()
        self.tower = tower
        h = tower.config.hidden_size
        self.sizes = (len(vd.SHAPES) + 1, len(vd.COLOURS) + 1, 3, vd.GRID * vd.GRID)
        self.head = torch.nn.Linear(h, sum(self.sizes)).to(model_device(tower))

    def forward(self, pixel_values: torch.Tensor) -> list[torch.Tensor]:
        # the last layer's patch states, as LLaVA reads them (vision_feature_layer=-1, CLS dropped)
        h = self.tower(pixel_values, output_hidden_states=True).hidden_states[-1][:, 1:]
        return list(self.head(h).split(self.sizes, dim=-1))


def patch_cells(patch_size: int) -> torch.LongTensor:
    """For every vision patch (row-major), the index of the grid cell it lies in."""
    side = vd.IMAGE_SIZE // patch_size
    if side * patch_size != vd.IMAGE_SIZE or vd.CELL % patch_size:
        raise ValueError(f"patch size {patch_size} must divide the {vd.CELL}-pixel grid cells")
    cell = torch.arange(side) * patch_size // vd.CELL
    return (cell[:, None] * vd.GRID + cell[None, :]).flatten()


def _cell_targets(cells: torch.Tensor, n_patches: int) -> torch.Tensor:
    """(n, 9, 3) per-cell shape / colour / size labels -> (n, n_patches, 4): each patch gets its cell's labels
    and the cell index."""
    index = patch_cells(vd.IMAGE_SIZE // math.isqrt(n_patches)).to(cells.device)
    return torch.cat([cells[:, index], index.expand(cells.shape[0], -1)[..., None]], dim=-1)


def _cell_loss(model: _CellClassifier, batch: dict) -> torch.Tensor:
    batch = on_model(batch, model)
    logits = model(batch["pixel_values"])
    targets = _cell_targets(batch["cells"], logits[0].shape[1])
    return sum(F.cross_entropy(lg.flatten(0, 1), targets[..., k].flatten()) for k, lg in enumerate(logits)) / 4


@torch.no_grad()
def _cell_accuracy(model: _CellClassifier, batches: list[dict]) -> dict:
    model.eval()
    names = ("shape", "colour", "size", "cell")
    hit = {k: 0 for k in names}
    n = {k: 0 for k in names}
    for b in batches:
        b = on_model(b, model)
        logits = model(b["pixel_values"])
        targets = _cell_targets(b["cells"], logits[0].shape[1])
        for k, lg in enumerate(logits):
            occupied = targets[..., 0] > 0  # score patches of occupied cells (empty ones are trivial)
            hit[names[k]] += int((lg.argmax(-1) == targets[..., k])[occupied].sum())
            n[names[k]] += int(occupied.sum())
    return {k: hit[k] / max(1, n[k]) for k in names}


def _train_info(res: TrainResult, tc: dict, tokens_per_example: float | None = None) -> dict:
    info = {"steps": res.steps, "seconds": round(res.seconds, 2), "best_val_loss": res.best_val_loss,
            "val_history": res.val_history, "stopped": res.stopped, "budget_s": tc["budget_s"],
            "max_steps": tc["max_steps"], "batch_size": tc["batch_size"], "lr": tc["lr"],
            "examples_seen": res.steps * tc["batch_size"]}
    if tokens_per_example is not None:
        info["tokens_seen"] = int(res.steps * tc["batch_size"] * tokens_per_example)
    return info


def _run(model, next_batch, val_loss, loss, tc: dict, desc: str, progress: bool, checkpoint: Path | None,
         tokens_per_example: float | None = None) -> dict:
    """One checkpointed stage of ``tc["max_steps"]`` steps (a fixed count, so a resumed run matches)."""
    res = train_loop(model, next_batch, val_loss, loss, max_steps=tc["max_steps"], budget_s=tc["budget_s"],
                     lr=tc["lr"], warmup=tc["warmup"], eval_every=tc["eval_every"], patience=tc["patience"],
                     desc=desc, progress=progress, checkpoint=checkpoint, checkpoint_every_s=CHECKPOINT_EVERY_S)
    return _train_info(res, tc, tokens_per_example)


def pretrain_vision(tower, pool: ScenePool, val_pool: ScenePool, tc: dict, progress: bool = False,
                    checkpoint: Path | None = None) -> dict:
    """Stage 1: per-patch shape / colour / size / cell classification from the tower's last-layer states."""
    clf = _CellClassifier(tower)
    bs = tc["batch_size"]

    def next_batch(step: int) -> dict:
        idx = torch.randint(0, len(pool), (bs,), generator=torch.Generator().manual_seed(SEED + step))
        return {"pixel_values": to_pixels(pool.images[idx]), "cells": pool.cells[idx]}

    val = [{"pixel_values": to_pixels(val_pool.images[i: i + 256]), "cells": val_pool.cells[i: i + 256]}
           for i in range(0, len(val_pool), 256)]

    def val_loss() -> float:
        return sum(float(_cell_loss(clf, b)) * len(b["cells"]) for b in val) / len(val_pool)

    info = _run(clf, next_batch, val_loss, _cell_loss, tc, "vlm-vision", progress, checkpoint)
    info["val_cell_accuracy"] = _cell_accuracy(clf, val)
    info["head"] = clf.head
    return info


def seed_projector(projector, head: torch.nn.Linear) -> int:
    """Start the projector's first layer with the stage-1 cell head as its first units, so the language
    model receives each cell's shape / colour / size / position scores directly (the rest of the layer
    keeps its random init). Without it, a frozen-tower build left shape questions at chance (15%) and
    colour-of-shape at 55% after 1500 s, although a linear probe reads shapes from the same features.
    Returns the number of seeded units."""
    n = min(head.out_features, projector.linear_1.out_features)
    with torch.no_grad():
        projector.linear_1.weight[:n] = head.weight[:n]
        projector.linear_1.bias[:n] = head.bias[:n]
    return n


def train_language(model, enc: Encoder, pool: ScenePool, val_scenes: list[vd.Scene], tc: dict, image: bool,
                   desc: str, progress: bool = False, checkpoint: Path | None = None,
                   seed: int | None = None) -> tuple[dict, list[dict]]:
    """Stage 2 / 3 (target: vision tower frozen) or the drafter's training: single-turn answers and captions."""
    seed = SEED + (0 if image else 1) if seed is None else seed
    next_batch = example_batches(enc, pool, tc["batch_size"], image, seed)
    val = item_batches(enc, all_items(val_scenes), image)
    probe = next_batch(0)["attention_mask"]
    tokens = float(probe.sum()) / probe.shape[0]  # mean example length, for the tokens-seen figure

    def val_loss() -> float:
        return teacher_forced(model, val)["loss"]

    return _run(model, next_batch, val_loss, loss_fn, tc, desc, progress, checkpoint, tokens), val


def grow_language_model(base, config):
    """``base`` (a trained LLaVA) with its language model grown to ``config.text_config``'s depth by
    :func:`mmspec.zoo.growth.grow_depth` (mode ``"split"``: every copy of a base layer in use, the group adding
    about the base layer's update); vision tower and projector are copied unchanged."""
    shallow = LlamaForCausalLM(base.config.text_config)
    shallow.model.load_state_dict(base.model.language_model.state_dict())
    shallow.lm_head.load_state_dict(base.lm_head.state_dict())
    deep_lm = grow_depth(shallow, config.text_config, mode="split")
    deep = LlavaForConditionalGeneration(config).float()
    deep.model.vision_tower.load_state_dict(base.model.vision_tower.state_dict())
    deep.model.multi_modal_projector.load_state_dict(base.model.multi_modal_projector.state_dict())
    deep.model.language_model.load_state_dict(deep_lm.model.state_dict())
    deep.lm_head.load_state_dict(deep_lm.lm_head.state_dict())
    return deep.to(model_device(base))


@torch.no_grad()
def layer_ablation(model, batches: list[dict]) -> list[float]:
    """Held-out answer loss increase when each language-model layer is skipped in turn (~0 for a layer that
    does nothing): the evidence that every layer of the grown target is used."""
    lm = model.model.language_model
    layers = lm.layers
    base = teacher_forced(model, batches)["loss"]
    out = []
    for i in range(len(layers)):
        lm.layers = torch.nn.ModuleList([m for j, m in enumerate(layers) if j != i])
        for k, m in enumerate(lm.layers):
            m.self_attn.layer_idx = k
        try:
            out.append(teacher_forced(model, batches)["loss"] - base)
        finally:
            lm.layers = layers
            for k, m in enumerate(layers):
                m.self_attn.layer_idx = k
    return out


def _round_fp16(model, batches: list[dict]) -> tuple[str, dict]:
    """Round the weights to fp16 (kept as fp32 in memory) unless that raises held-out loss noticeably."""
    before = teacher_forced(model, batches)["loss"]
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.state_dict().values():
            if p.is_floating_point():
                p.copy_(p.half().float())
    after = teacher_forced(model, batches)["loss"]
    info = {"val_loss_fp32": before, "val_loss_fp16": after}
    if after > before * (1 + FP16_TOLERANCE) + 1e-4:
        model.load_state_dict(saved)
        return "float32", info
    return "float16", info


def _save(model, path: Path, dtype: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for f in path.glob("*.safetensors"):
        f.unlink()
    if dtype == "float16":
        model.half()
    try:
        model.save_pretrained(path)
    finally:
        model.float()


# --------------------------------------------------------------------------- checksum, build, load

def checksum_inputs(processor_or_tokenizer, image: bool = True, n_image: int | None = None) -> dict:
    """The fixed input whose logits fingerprint a built model: test scene 0, "what colour is the circle?"
    (through the processor for the target; the same ids without the picture for the drafter)."""
    if image:
        scene = vd.make_scene(CHECKSUM_SCENE)
        return dict(processor_or_tokenizer(images=[scene.image()], text=[vd.with_image(CHECKSUM_PROMPT)],
                                           return_tensors="pt"))
    enc = Encoder(processor_or_tokenizer, n_image or num_image_tokens())
    return {"input_ids": torch.tensor([enc.prompt_text_ids(CHECKSUM_PROMPT)])}


@torch.no_grad()
def checksum(entry: ZooEntry) -> dict:
    """``logits_checksum`` of the entry's forward pass on ``checksum_inputs``."""
    if entry.name in vlm_drafters.NAMES:
        return vlm_drafters.checksum(entry)
    if entry.name in vlm_dflash.NAMES:
        return vlm_dflash.checksum(entry)
    inputs = checksum_inputs(entry.tokenizer, image=entry.name == "vlm-target",
                             n_image=entry.config.get("num_image_tokens"))
    return logits_checksum(entry.model(**inputs).logits)


def build(home: Path, micro: bool = False, progress: bool = True, names: list[str] | None = None) -> dict[str, dict]:
    """Train ``vlm-target`` and ``vlm-drafter`` (single-threaded, restoring the thread count afterwards),
    then the feature drafters, and write them under ``home``; returns {name: metrics}."""
    names = names or NAMES
    results: dict[str, dict] = {}
    base = [n for n in BASE_NAMES if n in names]
    if base:
        prev_threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            results.update(_build(Path(home), micro, progress, base))
        finally:
            torch.set_num_threads(prev_threads)
    extra = [n for n in vlm_drafters.NAMES if n in names]
    if extra:
        results.update(vlm_drafters.build(Path(home), micro, progress, extra))
    if any(n in names for n in vlm_dflash.NAMES):
        results.update(vlm_dflash.build(Path(home), micro, progress, [n for n in names if n in vlm_dflash.NAMES]))
    return results


def _build(home: Path, micro: bool, progress: bool, names: list[str]) -> dict[str, dict]:
    t_start = time.perf_counter()
    cfg = MICRO if micro else FULL
    tokenizer = ensure_tokenizer(home, micro)
    processor = make_processor(tokenizer, cfg["patch_size"])
    enc = Encoder(tokenizer, num_image_tokens(cfg["patch_size"]))
    t0 = time.perf_counter()
    pool = ScenePool("train", cfg["pool_scenes"])
    val_pool = ScenePool("val", cfg["vision_train"]["val_scenes"])
    data_seconds = time.perf_counter() - t0
    eval_pairs = vd.eval_questions("test", cfg["eval_scenes"], seed=SEED)
    caption_pairs = [(sc, sc.items()[-1]) for sc in vd.scenes("test", cfg["caption_scenes"])]
    test_scenes = vd.scenes("test", cfg["eval_scenes"])
    results: dict[str, dict] = {}

    for name in names:
        t0 = time.perf_counter()
        image = name == "vlm-target"
        seed_everything(SEED + (0 if image else 1))
        ckpt = build_dir(home, name)
        train: dict = {}
        if image:
            model, train, val_batches = _train_target(cfg, tokenizer, enc, pool, val_pool, ckpt, micro, progress)
        else:
            model = LlamaForCausalLM(_text_config(cfg["drafter"], tokenizer)).float().to(build_device())
            set_generation_config(model, tokenizer)
            tc = cfg["drafter_train"]
            train["language"], val_batches = train_language(model, enc, pool, val_pool.scenes[: tc["val_scenes"]],
                                                            tc, image, name, progress, ckpt / "train.pt")
        model.requires_grad_(True)
        dtype, fp16_info = _round_fp16(model, val_batches)

        path = home / name
        _save(model, path, dtype)
        (processor if image else tokenizer).save_pretrained(path)
        n_params = sum(p.numel() for p in model.parameters())
        prefix = vd.with_image("")
        zoo = {"family": "vlm", "name": name, "micro": micro, "seed": SEED, **versions(),
               "architecture": type(model).__name__, "params": n_params, "weights_dtype": dtype,
               "load_dtype": "float32", "vocab_size": len(tokenizer), "image_size": vd.IMAGE_SIZE,
               "sees_image": image, "num_image_tokens": enc.n_image,
               "image_token_id": enc.image_id, "eos_token_id": enc.eos_id, "pad_token_id": enc.pad_id,
               "prompt_format": {"question": prefix + vd.QUESTION_PROMPT, "caption": prefix + vd.CAPTION_PROMPT,
                                 "answer": " {answer}" + EOS},
               "splits": {k: list(v) for k, v in vd.SPLITS.items()},
               "checksum_input": {"scene_seed": CHECKSUM_SCENE, "prompt": prefix + CHECKSUM_PROMPT},
               ("drafter" if image else "target"): "vlm-drafter" if image else "vlm-target"}
        write_json(path / "zoo.json", zoo)  # provisional, so that load() works
        entry = load(name, path)
        zoo["checksum"] = checksum(entry)
        write_json(path / "zoo.json", zoo)

        # held-out quality, measured on the model as saved and reloaded (on the build's device: the checksum
        # above was taken on the CPU, as the tests recompute it)
        model = entry.model.to(build_device())
        tf = teacher_forced(model, item_batches(enc, all_items(test_scenes), image))
        pairs = eval_pairs + caption_pairs
        preds = generate_answers(model, tokenizer, pairs, image, processor=processor if image else None,
                                 n_image=enc.n_image)
        m = answer_metrics(preds, pairs)
        m.update({"held_out_loss": tf["loss"], "held_out_token_accuracy": tf["token_accuracy"],
                  "held_out_by_kind": tf["by_kind"],
                  "caption_token_accuracy": tf["by_kind"].get("caption", {}).get("token_accuracy"),
                  "examples": [{"prompt": prefix + q.prompt, "answer": q.answer, "generated": p}
                               for p, (_, q) in [*zip(preds, pairs)][:: max(1, len(pairs) // 8)]],
                  "train": train, "fp16": fp16_info, "weights_dtype": dtype, "params": n_params,
                  "weights_mb": round(sum(f.stat().st_size for f in path.glob("*.safetensors")) / 2**20, 3),
                  "eval_scenes": cfg["eval_scenes"], "caption_scenes": cfg["caption_scenes"],
                  "pool_scenes": cfg["pool_scenes"], "data_seconds": round(data_seconds, 2)})
        if image:
            test_batches = item_batches(enc, all_items(test_scenes[: 8 if micro else 48]), image)
            m["layer_ablation_loss_increase"] = layer_ablation(model, test_batches)
            m["layer_ablation_base_loss"] = teacher_forced(model, test_batches)["loss"]
            m["unused_layers"] = unused_layers(m["layer_ablation_loss_increase"], m["layer_ablation_base_loss"])
            m["thresholds"] = {**THRESHOLDS, "accuracy": ACCURACY_THRESHOLD}
            m["meets_thresholds"] = (m["accuracy"] >= ACCURACY_THRESHOLD and
                                     all(m["accuracy_by_type"].get(k, 0.0) >= v for k, v in THRESHOLDS.items()))
            m["layers"] = model.config.text_config.num_hidden_layers
            m["steps"] = sum(st["steps"] for st in train.values())
            m["train_seconds"] = round(sum(st["seconds"] for st in train.values()), 2)
        m["build_seconds"] = round(time.perf_counter() - t0, 2)
        write_json(path / "metrics.json", m)
        results[name] = m
    if "vlm-drafter" in results:
        results["vlm-drafter"]["family_build_seconds"] = round(time.perf_counter() - t_start, 2)
        write_json(home / "vlm-drafter" / "metrics.json", results["vlm-drafter"])
    return results


def _train_target(cfg: dict, tokenizer, enc: Encoder, pool: ScenePool, val_pool: ScenePool, ckpt: Path,
                  micro: bool, progress: bool):
    """``vlm-target`` in three checkpointed stages (vision pretraining, shallow instruction tuning, growth
    to full depth and training on); returns (model, {stage: train info}, validation batches)."""
    full = target_config(cfg, tokenizer)
    base_cfg = target_config({**cfg, "text": {**cfg["text"], "num_hidden_layers": cfg["base_layers"]}}, tokenizer)
    model = LlavaForConditionalGeneration(base_cfg).float().to(build_device())
    set_generation_config(model, tokenizer)
    tower = model.model.vision_tower
    train = {"vision": pretrain_vision(tower, pool, val_pool, cfg["vision_train"], progress, ckpt / "vision.pt")}
    train["vision"]["projector_units_seeded"] = seed_projector(model.model.multi_modal_projector,
                                                               train["vision"].pop("head"))
    tower.requires_grad_(FULL_STAGE2_TUNES_TOWER and not micro)
    tc = cfg["target_train"]
    train["language"], val = train_language(model, enc, pool, val_pool.scenes[: tc["val_scenes"]], tc, True,
                                            f"vlm-target ({cfg['base_layers']} layers)", progress, ckpt / "base.pt")
    train["language"]["layers"] = cfg["base_layers"]
    if full.text_config.num_hidden_layers != cfg["base_layers"]:
        model = grow_language_model(model, full)
        set_generation_config(model, tokenizer)
        model.model.vision_tower.requires_grad_(FULL_STAGE2_TUNES_TOWER and not micro)
        tc = cfg["grow_train"]
        train["grow"], val = train_language(model, enc, pool, val_pool.scenes[: tc["val_scenes"]], tc, True,
                                            f"vlm-target ({full.text_config.num_hidden_layers} layers)", progress,
                                            ckpt / "grow.pt", seed=SEED + 17)
        train["grow"]["layers"] = full.text_config.num_hidden_layers
    return model, train, val


__all__ = ["NAMES", "build", "make_processor", "image_processor", "target_config", "num_image_tokens",
           "generate_answers", "answer_metrics", "checksum", "checksum_inputs", "pretrain_vision", "train_language",
           "FULL", "MICRO"]
