"""Image family of the zoo: a VQ tokenizer, a LlamaGen-style class-conditional AR target with CFG, a
small AR drafter over the same tokens, and a CNN classifier that judges generated samples.

Models (``home/<name>/``):

- ``image-vq``: a stock ``diffusers.VQModel``; 32x32 RGB in [-1, 1] -> an 8x8 grid of code ids.
- ``image-target``: a stock ``transformers.LlamaForCausalLM`` over the token layout below, trained with
  class dropout so classifier-free guidance works: guided logits = uncond + s * (cond - uncond).
- ``image-drafter``: a one-layer ``LlamaForCausalLM`` over the same tokens, trained the same way.
- ``image-classifier``: a small CNN (:class:`ImageClassifier`) labelling pictures with their class.

Token layout (:class:`TokenLayout`, recorded in zoo.json and in the AR models' ``config.json`` as
``mmspec_image_layout``): code ids ``code_offset .. code_offset + codebook_size - 1`` (the VQ indices,
``code_offset = 0``), then one token per class (``class_offset + c``), then the null class (``null_id``)
used for the unconditional rows of CFG. A sequence is ``[class token] + codes in raster order``.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from diffusers import VQModel
from diffusers.utils import logging as dlog
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as tlog

from ..image_codes import LAYOUT_KEY, TokenLayout, decode_codes, generate_codes, layout_of
from ..training.loop import TrainResult, model_device, on_model, train_loop
from . import image_data as data
from . import image_dflash, image_drafters
from .common import build_device, build_dir, feature_checksum_output, logits_checksum, seed_everything
from .entry import ZooEntry
from .growth import grow_depth, layer_ablation, unused_layers
from .home import write_json
from .image_classifier import ImageClassifier
from .image_loader import BASE_NAMES, NAMES
from .image_records import SEED, dir_mb, require_built, write_records
from .streams import mean_loss


# ----------------------------------------------------------------------------------------------------------
# VQ helpers


def _as_batch(images) -> torch.Tensor:
    if isinstance(images, torch.Tensor):
        x = images.float()
        return x[None] if x.dim() == 3 else x
    return torch.stack([data.pil_to_tensor(im) for im in images])


@torch.no_grad()
def encode_images(vq, images) -> torch.Tensor:
    """Pictures ([B, 3, H, W] floats in [-1, 1], or a list of PIL images) -> code ids [B, h * w] (raster order)."""
    x = _as_batch(images).to(vq.device, vq.dtype)
    h = vq.encode(x).latents
    b, _, gh, gw = h.shape
    _, _, (_, _, idx) = vq.quantize(h)
    return idx.reshape(b, gh * gw).long()


@torch.no_grad()
def generate_images(target, vq, class_ids, cfg_scale: float = 3.0, temperature: float = 1.0, top_k: int = 0,
                    generator: torch.Generator | None = None, layout: TokenLayout | None = None,
                    return_codes: bool = False):
    """Sample pictures [B, 3, H, W] in [-1, 1] for ``class_ids`` (plain AR + CFG); see :func:`generate_codes`."""
    layout = layout or layout_of(target)
    codes = generate_codes(target, class_ids, cfg_scale, temperature, top_k, generator, layout)
    images = decode_codes(vq, codes, layout.grid)
    return (images, codes) if return_codes else images


# ----------------------------------------------------------------------------------------------------------
# build configuration


@dataclass
class Plan:
    image_size: int  # pictures are image_size x image_size; the VQ's grid is image_size / 2 ** (levels - 1)
    n_train: int
    n_val: int
    n_test: int
    # VQ
    vq_channels: tuple[int, ...]
    vq_latent: int
    codebook_size: int
    vq_batch: int
    vq_steps: int
    vq_budget: float
    vq_lr: float
    # AR target (trained at ar_base_layers, then grown to ar_layers: see _train_target) / AR drafter
    ar_hidden: int
    ar_layers: int
    ar_base_layers: int
    ar_heads: int
    ar_inter: int
    dr_hidden: int
    dr_layers: int
    dr_heads: int
    dr_inter: int
    ar_batch: int
    ar_base_steps: int  # fixed step counts (checkpointed stages must resume with the same schedule)
    ar_steps: int
    dr_steps: int
    ar_budget: float  # safety nets per stage: a stage stopped by its budget says so in metrics.json
    dr_budget: float
    ar_lr: float
    ar_grow_lr: float
    ar_eval_every: int
    # classifier
    cls_width: int
    cls_steps: int
    cls_budget: float
    n_cls_recon: int
    # evaluation
    per_class: int
    eval_every: int
    class_dropout: float = 0.1
    cfg_scale: float = 3.0


# 64 px pictures, a 4x-downsampling VQ: a 16x16 grid, 256 codes per picture (LlamaGen's count at 256 px).
# The target is 12 layers (a 4-layer base grown 3x): its CFG decode step costs >= 6x a drafter forward on a
# CPU, where per-layer overhead dominates; 5.5M parameters, 10.5 MB in fp16. The plan is the one this family's
# GPU build used (every model's zoo.json records it): VQ, classifier, target and the AR drafter on one H100 (the
# AR drafter's validation was still falling at its 1000 steps; the feature drafters are the image methods' main
# drafters, and zoo/image_drafters.py sizes them for a CPU build).
FULL = Plan(image_size=64, n_train=16000, n_val=256, n_test=512,
            vq_channels=(16, 32, 64), vq_latent=4, codebook_size=512, vq_batch=8, vq_steps=4000, vq_budget=900.0,
            vq_lr=2e-3,
            ar_hidden=192, ar_layers=12, ar_base_layers=4, ar_heads=4, ar_inter=512,
            dr_hidden=192, dr_layers=1, dr_heads=4, dr_inter=512,
            ar_batch=32, ar_base_steps=2400, ar_steps=500, dr_steps=1000, ar_budget=4 * 3600.0, dr_budget=3600.0,
            ar_lr=2e-3, ar_grow_lr=5e-4, ar_eval_every=200,
            cls_width=24, cls_steps=2000, cls_budget=150.0, n_cls_recon=2000, per_class=10, eval_every=100)

# micro: 32 px (an 8x8 grid) keeps the tests' generation loops short; the code paths are the same
MICRO = Plan(image_size=32, n_train=96, n_val=24, n_test=24,
             vq_channels=(8, 8, 16), vq_latent=4, codebook_size=256, vq_batch=4, vq_steps=8, vq_budget=1.5,
             vq_lr=2e-3,
             ar_hidden=32, ar_layers=4, ar_base_layers=2, ar_heads=2, ar_inter=64,
             dr_hidden=32, dr_layers=1, dr_heads=2, dr_inter=64,
             ar_batch=4, ar_base_steps=6, ar_steps=4, dr_steps=4, ar_budget=30.0, dr_budget=30.0,
             ar_lr=2e-3, ar_grow_lr=1e-3, ar_eval_every=3,
             cls_width=8, cls_steps=8, cls_budget=0.5, n_cls_recon=96, per_class=1, eval_every=4)


def _facts(res: TrainResult) -> dict:
    return {"train_steps": res.steps, "train_seconds": round(res.seconds, 2), "best_val_loss": res.best_val_loss,
            "stopped": res.stopped, "val_history": [[int(s), float(v)] for s, v in res.val_history]}


_T0 = [0.0]


def _log(progress: bool, msg: str) -> None:
    if progress:
        print(f"[zoo image {time.perf_counter() - _T0[0]:6.0f}s] {msg}", flush=True)


# devices ----------------------------------------------------------------------------------------------------
# Every model is created (or loaded) on the CPU exactly as on a CPU build, so its initial weights are the same
# draws, and only then moved to the build's device (``mmspec zoo build --device``). The data (pictures, code
# sequences, random draws) is made on the CPU too, so it does not depend on the device; it is moved to a
# model's device where it meets the model, and what is read back (metrics, pictures to save) comes back to
# the CPU. On a CPU build every move below is a no-op.


def _on_build_device(model):
    """``model`` (created or loaded on the CPU) moved to the device the zoo is built on."""
    return model.to(build_device())


def _sync(model) -> None:
    """Wait for ``model``'s device: CUDA runs kernels asynchronously, so a wall-clock timing of steps needs it."""
    device = model_device(model)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# fixed inputs of the recorded checksums -------------------------------------------------------------------


def image_size_of(model) -> int:
    """The picture size a VQ (``config.sample_size``) or classifier (``config["image_size"]``) was built for;
    models from before the size was recorded are 32 px."""
    size = model.config.get("image_size" if isinstance(model, ImageClassifier) else "sample_size")
    return int(size or data.IMAGE_SIZE)


def checksum_images(n: int = 4, size: int = data.IMAGE_SIZE) -> torch.Tensor:
    """The first ``n`` test pictures: the fixed input of the VQ and classifier checksums."""
    return data.make_dataset("test", n, size=size)[0]


def checksum_tokens(layout: TokenLayout) -> torch.Tensor:
    """A fixed [2, seq_len] token batch (class 0 and the null class, then a code pattern)."""
    codes = (torch.arange(layout.num_codes) * 7 + 3) % layout.codebook_size
    rows = [torch.cat([layout.class_tokens([c]), layout.codes_to_tokens(codes)]) for c in (0, -1)]
    return torch.stack(rows)


@torch.no_grad()
def checksum_output(name: str, model, layout: TokenLayout | None = None) -> torch.Tensor:
    """The output a zoo.json checksum fingerprints, for model ``name``."""
    if name in image_drafters.NAMES:
        return feature_checksum_output(model)
    if name in image_dflash.NAMES:
        return image_dflash.checksum_output(model)
    if name == "image-vq":
        return model(on_model(checksum_images(size=image_size_of(model)), model)).sample
    if name == "image-classifier":
        return model(on_model(checksum_images(size=image_size_of(model)), model))
    return model(input_ids=on_model(checksum_tokens(layout or layout_of(model)), model)).logits


def checksum(entry: ZooEntry) -> dict:
    """``logits_checksum`` of a loaded entry's fingerprint output (the hook every zoo family provides)."""
    return logits_checksum(checksum_output(entry.name, entry.model, entry.extras.get("layout")))


# ----------------------------------------------------------------------------------------------------------
# training pieces


def _fit_steps(model, batch, loss_fn, budget: float, cap: int, floor: int = 8) -> int:
    """How many optimiser steps fit in ``budget`` seconds, timed on a throwaway copy of ``model`` (so the
    cosine schedule of ``train_loop`` decays within the budget instead of being cut off mid-way)."""
    probe = copy.deepcopy(model)
    probe.train()
    opt = torch.optim.AdamW(probe.parameters(), lr=1e-8)
    batch = on_model(batch, probe)
    times = []
    for _ in range(6):
        _sync(probe)
        t = time.perf_counter()
        loss = loss_fn(probe, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _sync(probe)
        times.append(time.perf_counter() - t)
    del probe, opt
    per = sorted(times[1:])[2]  # median of 5 (the first step warms up allocations; the median shrugs off load spikes)
    # ~7% headroom for the periodic validation passes
    return max(floor, min(cap, int(0.93 * budget / max(per, 1e-6))))


def _make_vq(plan: Plan):
    n = len(plan.vq_channels)
    return VQModel(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * n,
                   up_block_types=("UpDecoderBlock2D",) * n, block_out_channels=plan.vq_channels, layers_per_block=1,
                   latent_channels=plan.vq_latent, vq_embed_dim=plan.vq_latent, num_vq_embeddings=plan.codebook_size,
                   norm_num_groups=min(8, plan.vq_channels[0]), sample_size=plan.image_size,
                   mid_block_add_attention=False)


def _psnr(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-picture PSNR in dB of pictures in [-1, 1] (peak-to-peak 2)."""
    mse = (x.clamp(-1, 1) - y).pow(2).flatten(1).mean(1).clamp_min(1e-10)
    return 10 * torch.log10(4.0 / mse)


@torch.no_grad()
def _reconstruct(vq, x: torch.Tensor, bs: int = 256) -> torch.Tensor:
    """VQ reconstructions of CPU pictures ``x``, run on the VQ's device and returned on the CPU (they are data:
    the classifier's training pictures, PSNR against ``x``, saved grids)."""
    return torch.cat([vq(on_model(x[i:i + bs], vq)).sample.clamp(-1, 1).cpu() for i in range(0, len(x), bs)])


def _train_vq(plan: Plan, train_x: torch.Tensor, val_x: torch.Tensor, progress: bool):
    g = seed_everything(SEED)
    vq = _on_build_device(_make_vq(plan))
    k = plan.codebook_size
    usage = torch.zeros(k, device=model_device(vq))  # counted where the codes are: no host sync per step

    def plain_loss(model, x):
        out = model(x)
        return (out.sample - x).pow(2).mean() + (out.sample - x).abs().mean() + out.commit_loss.mean()

    steps = _fit_steps(vq, train_x[:plan.vq_batch], plain_loss, plan.vq_budget, plan.vq_steps)
    restart_until = steps // 2
    restart_every = max(plan.eval_every, 1)

    def next_batch(step: int) -> torch.Tensor:
        # codebook restarts: codes unused since the last check are moved onto random encoder outputs
        if step and step % restart_every == 0 and step <= restart_until:
            dead = (usage == 0).nonzero().flatten()
            if len(dead):
                with torch.no_grad():
                    pick = torch.randint(0, len(train_x), (64,), generator=g)
                    z = vq.encode(on_model(train_x[pick], vq)).latents.permute(0, 2, 3, 1).reshape(-1, plan.vq_latent)
                    z = z[on_model(torch.randint(0, len(z), (len(dead),), generator=g), vq)]
                    vq.quantize.embedding.weight.data[dead] = z + 0.01 * on_model(torch.randn(z.shape, generator=g), vq)
            usage.zero_()
        return train_x[torch.randint(0, len(train_x), (plan.vq_batch,), generator=g)]

    def loss_fn(model, x: torch.Tensor) -> torch.Tensor:
        h = model.encode(x).latents
        quant, commit_loss, (_, _, idx) = model.quantize(h)
        usage.index_add_(0, idx.flatten(), torch.ones(idx.numel(), device=idx.device))
        rec = model.decoder(model.post_quant_conv(quant))
        return (rec - x).pow(2).mean() + (rec - x).abs().mean() + commit_loss

    def val_loss() -> float:
        return float((_reconstruct(vq, val_x) - val_x).pow(2).mean())

    res = train_loop(vq, next_batch, val_loss, loss_fn, max_steps=steps, budget_s=plan.vq_budget,
                     lr=plan.vq_lr, warmup=min(50, steps // 4), eval_every=plan.eval_every, patience=4,
                     weight_decay=0.0, desc="image-vq", progress=progress)
    return vq, res


def _llama_config(layout: TokenLayout, hidden: int, layers: int, heads: int, inter: int):
    cfg = LlamaConfig(vocab_size=layout.vocab_size, hidden_size=hidden, intermediate_size=inter,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                      max_position_embeddings=layout.seq_len + 16, rope_theta=10000.0, tie_word_embeddings=False,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    setattr(cfg, LAYOUT_KEY, layout.to_dict(data.CLASSES))
    return cfg


def _make_llama(plan: Plan, layout: TokenLayout, hidden: int, layers: int, heads: int, inter: int):
    """A fresh AR model on the CPU (its initial weights are the same draws whatever the build's device)."""
    torch.manual_seed(SEED)
    return LlamaForCausalLM(_llama_config(layout, hidden, layers, heads, inter))


def _sequences(layout: TokenLayout, codes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.cat([layout.class_tokens(labels)[:, None], layout.codes_to_tokens(codes)], dim=1)


def _ar_loss(model, seqs: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
    """Mean cross-entropy (nats per code) of predicting each code from the class token and earlier codes."""
    logits = model(input_ids=seqs[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), seqs[:, 1:].reshape(-1))


@torch.no_grad()
def _eval_ar_loss(model, seqs: torch.Tensor, layout: TokenLayout, bs: int = 256) -> float:
    total = 0.0
    for i in range(0, len(seqs), bs):
        chunk = seqs[i:i + bs]
        total += float(_ar_loss(model, on_model(chunk, model), layout)) * len(chunk)
    return total / max(1, len(seqs))


def _train_ar(plan: Plan, model, layout: TokenLayout, train_seqs: torch.Tensor, val_seqs: torch.Tensor, *,
              steps: int, budget: float, lr: float, desc: str, progress: bool, checkpoint: Path, seed: int):
    """Next-code training with class dropout (the dropped rows learn the unconditional model CFG needs);
    fixed ``steps``, checkpointed to ``checkpoint`` so an interrupted build resumes there."""
    loss = lambda m, s: _ar_loss(m, s, layout)  # noqa: E731
    g = seed_everything(seed)

    def next_batch(step: int) -> torch.Tensor:
        seqs = train_seqs[torch.randint(0, len(train_seqs), (plan.ar_batch,), generator=g)].clone()
        drop = torch.rand(len(seqs), generator=g) < plan.class_dropout
        seqs[drop, 0] = layout.null_id  # class dropout: these rows learn the unconditional model
        return seqs

    return train_loop(model, next_batch, lambda: _eval_ar_loss(model, val_seqs, layout), loss, max_steps=steps,
                      budget_s=budget, lr=lr, warmup=min(100, max(1, steps // 10)), eval_every=plan.ar_eval_every,
                      patience=4, desc=desc, progress=progress, checkpoint=checkpoint, generators=(g,))


def _train_target(plan: Plan, home: Path, layout: TokenLayout, train_seqs, val_seqs, progress: bool):
    """image-target in two checkpointed stages (``<home>/.build/image-target/{base,grow}.pt``): a shallow
    base trained from scratch, then grown to full depth (:func:`~mmspec.zoo.growth.grow_depth`, mode ``"split"``:
    every layer in use from the first step, the base's function kept to first order) and trained on. The base's steps are ~3x cheaper than the
    deep model's, so most of the tokens are seen at the base's cost."""
    dims = (plan.ar_hidden, plan.ar_heads, plan.ar_inter)
    model = _on_build_device(_make_llama(plan, layout, dims[0], plan.ar_base_layers, dims[1], dims[2]))
    stages = {}
    for stage in ("base", "grow"):
        if stage == "grow":  # the grown model is made on the CPU (like the base): moved to the build's device
            grown = grow_depth(model, _llama_config(layout, dims[0], plan.ar_layers, dims[1], dims[2]), mode="split")
            model = _on_build_device(grown)
        n = model.config.num_hidden_layers
        stages[stage] = _train_ar(
            plan, model, layout, train_seqs, val_seqs, steps=plan.ar_base_steps if stage == "base" else plan.ar_steps,
            budget=plan.ar_budget, lr=plan.ar_lr if stage == "base" else plan.ar_grow_lr,
            desc=f"image-target ({stage}, {n} layers)", progress=progress,
            checkpoint=stage_dir(home, "image-target") / f"{stage}.pt", seed=SEED + (1 if stage == "base" else 17))
    return model, stages


def _train_classifier(plan: Plan, train_x, train_y, val_x, val_y, recon_fn, progress: bool):
    """Trained on real pictures and (half the time) their VQ reconstructions, with light noise: the pictures
    it has to judge later are VQ decodes."""
    g = seed_everything(SEED + 2)
    model = _on_build_device(ImageClassifier(data.NUM_CLASSES, plan.cls_width, plan.image_size))
    bs = 64 if len(train_x) >= 64 else len(train_x)
    val_recon = recon_fn(val_x)
    val_x, val_y, val_recon = on_model((val_x, val_y, val_recon), model)  # moved once, read at every validation

    def loss_fn(m, batch):
        x, y = batch
        return F.cross_entropy(m(x), y)

    steps = _fit_steps(model, (train_x[:bs], train_y[:bs]), loss_fn, plan.cls_budget, plan.cls_steps)

    def next_batch(step: int):
        idx = torch.randint(0, len(train_x), (bs,), generator=g)
        x = train_x[idx]
        use_rec = torch.rand(bs, generator=g) < 0.5
        x = torch.where(use_rec[:, None, None, None], recon_fn.cached[idx], x)
        x = x + 0.04 * torch.randn(x.shape, generator=g)
        return x, train_y[idx]

    def val_loss() -> float:
        return 0.5 * (float(F.cross_entropy(model(val_x), val_y)) + float(F.cross_entropy(model(val_recon), val_y)))

    res = train_loop(model, next_batch, val_loss, loss_fn, max_steps=steps, budget_s=plan.cls_budget,
                     lr=3e-3, warmup=min(50, steps // 4), eval_every=plan.eval_every, patience=4,
                     desc="image-classifier", progress=progress)
    return model, res


@torch.no_grad()
def _accuracy(model, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((model(on_model(x, model)).argmax(-1).cpu() == y).float().mean()) if len(y) else 0.0


@torch.no_grad()
def _fidelity(ar, vq, classifier, layout: TokenLayout, per_class: int, cfg_scale: float, seed: int):
    """Share of generated samples (``per_class`` per class) the classifier labels with their class."""
    class_ids = torch.arange(layout.num_classes).repeat_interleave(per_class)
    gen = torch.Generator().manual_seed(seed)
    images = generate_images(ar, vq, class_ids, cfg_scale=cfg_scale, temperature=1.0, top_k=0, generator=gen,
                             layout=layout)
    # sampled on the models' device(s) from the CPU generator ``gen``; the pictures come back as data
    pred = classifier.predict(on_model(images, classifier)).cpu()
    images = images.cpu()
    hit = (pred == class_ids).float()
    per = {data.CLASSES[c]: float(hit[class_ids == c].mean()) for c in range(layout.num_classes)}
    return float(hit.mean()), per, images


@torch.no_grad()
def _agreement(drafter, target, seqs: torch.Tensor, bs: int = 256) -> float:
    """Share of held-out positions where drafter and target agree on the most likely next token."""
    hits = total = 0
    for i in range(0, len(seqs), bs):
        s = on_model(seqs[i:i + bs, :-1], drafter)
        a = drafter(input_ids=s).logits.argmax(-1)
        b = target(input_ids=on_model(s, target)).logits.argmax(-1)
        hits += int((a == b).sum())
        total += a.numel()
    return hits / max(1, total)


def _init_from(drafter, target) -> bool:
    """Start the drafter from the target's embeddings, first layers, final norm and head (same width only)."""
    if drafter.config.hidden_size != target.config.hidden_size or \
            drafter.config.intermediate_size != target.config.intermediate_size:
        return False
    with torch.no_grad():
        drafter.model.embed_tokens.load_state_dict(target.model.embed_tokens.state_dict())
        drafter.model.norm.load_state_dict(target.model.norm.state_dict())
        drafter.lm_head.load_state_dict(target.lm_head.state_dict())
        for i, layer in enumerate(drafter.model.layers):
            layer.load_state_dict(target.model.layers[i].state_dict())
    return True


def _save_llama_fp16(model, path: Path):
    """Save ``model`` (on any device) in fp16; returns the saved weights loaded back on the CPU in fp32."""
    model.half().save_pretrained(path, safe_serialization=True)
    model.float()
    return LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


# ----------------------------------------------------------------------------------------------------------
# build / load


BUILD_ORDER = ["image-vq", "image-classifier", "image-target", "image-drafter"]  # each needs the ones before


def build(home: Path, micro: bool = False, progress: bool = True, names: list[str] | None = None) -> dict[str, dict]:
    """Train the image family (or the models in ``names``) into ``home/<name>/``; returns {name: metrics}.
    Models not asked for but needed (``BUILD_ORDER``: the VQ, then the classifier, the target, the AR
    drafter; the feature drafters need the target) are loaded from ``home``. ``image-target`` and
    ``image-drafter`` train in checkpointed stages under ``home/.build/``: ``--only image-target`` again
    after an interruption resumes where it stopped."""
    home = Path(home)
    names = names or NAMES
    base = [n for n in BASE_NAMES if n in names]
    out = _build_base(home, micro, progress, base) if base else {}
    extra = [n for n in image_drafters.NAMES if n in names]
    if extra:
        out.update(image_drafters.build(home, micro, progress, extra))
    if any(n in names for n in image_dflash.NAMES):
        out.update(image_dflash.build(home, micro, progress))
    return out


def stage_dir(home: Path, name: str) -> Path:
    """Where ``name``'s training checkpoints live while it is being built (never shipped)."""
    return build_dir(home, name)


def _bind_checkpoints(home: Path, names: list[str], vq_checksum: dict, progress: bool) -> None:
    """Checkpoints of models trained on the VQ's codes are only valid for that VQ: each stage folder records
    the VQ checksum it was started with, and a folder from another VQ is cleared (a rebuilt VQ restarts them)."""
    for name in names:
        folder = stage_dir(home, name)
        stamp = folder / "inputs.json"
        want = {"image-vq": vq_checksum}
        if stamp.exists() and json.loads(stamp.read_text()) != json.loads(json.dumps(want)):
            _log(progress, f"{name}: checkpoints in {folder} were trained on another image-vq; starting over")
            shutil.rmtree(folder)
        if not stamp.exists():
            write_json(stamp, want)


def _build_base(home: Path, micro: bool, progress: bool, names: list[str]) -> dict[str, dict]:
    threads = torch.get_num_threads()
    bars = (tlog.is_progress_bar_enabled(), dlog.is_progress_bar_enabled())
    torch.set_num_threads(1)
    if not progress:
        tlog.disable_progress_bar()
        dlog.disable_progress_bar()
    try:
        return _build(Path(home), micro, progress, names)
    finally:
        torch.set_num_threads(threads)
        if bars[0]:
            tlog.enable_progress_bar()
        if bars[1]:
            dlog.enable_progress_bar()


def _build(home: Path, micro: bool, progress: bool, names: list[str]) -> dict[str, dict]:
    plan = MICRO if micro else FULL
    t0 = _T0[0] = time.perf_counter()
    out: dict[str, dict] = {}
    plan_facts = {"plan": asdict(plan)}
    last = max(BUILD_ORDER.index(n) for n in names)
    for dep in BUILD_ORDER[:last]:
        if dep not in names:
            require_built(home, dep, BUILD_ORDER[last])

    size = plan.image_size
    if "image-vq" not in names:  # pictures at the size the existing VQ was built for
        size = image_size_of(VQModel.from_pretrained(home / "image-vq", torch_dtype=torch.float32))
    train_x, train_y = data.make_dataset("train", plan.n_train, size=size)
    val_x, val_y = data.make_dataset("val", plan.n_val, size=size)
    test_x, test_y = data.make_dataset("test", plan.n_test, size=size)
    _log(progress, f"data: {plan.n_train}/{plan.n_val}/{plan.n_test} pictures of {size} px in "
                   f"{time.perf_counter() - t0:.1f}s")

    # --- VQ ---------------------------------------------------------------------------------------------
    path = home / "image-vq"
    if "image-vq" in names:
        vq, res = _train_vq(plan, train_x, val_x[:256], progress)
        vq.half().save_pretrained(path, safe_serialization=True)
    vq = VQModel.from_pretrained(path, torch_dtype=torch.float32).eval()  # evaluate what was saved
    vq_checksum = logits_checksum(checksum_output("image-vq", vq))  # on the CPU, as a load reproduces it
    vq = _on_build_device(vq)
    test_rec = _reconstruct(vq, test_x)
    test_codes = encode_images(vq, test_x).cpu()
    layout = TokenLayout(codebook_size=vq.config.num_vq_embeddings, num_classes=data.NUM_CLASSES,
                         grid=int(test_codes.shape[1] ** 0.5))
    if "image-vq" in names:
        usage = torch.bincount(test_codes.flatten(), minlength=layout.codebook_size)
        m = {"psnr_test_db": float(_psnr(test_rec, test_x).mean()),
             "psnr_val_db": float(_psnr(_reconstruct(vq, val_x), val_x).mean()),
             "codebook_used_test": int((usage > 0).sum()), "codebook_size": layout.codebook_size,
             "image_size": size, "grid": layout.grid, "params": sum(p.numel() for p in vq.parameters()),
             **_facts(res)}
        data.image_grid(torch.cat([test_x[:24], test_rec[:24]]), nrow=12).save(path / "reconstructions.png")
        m = write_records(home, "image-vq", m, {"checksum": vq_checksum, "layout": layout.to_dict(data.CLASSES),
                                                "image_size": size, **plan_facts}, micro)
        out["image-vq"] = m
        _log(progress, f"image-vq: PSNR {m['psnr_test_db']:.2f} dB, {m['codebook_used_test']} codes used, "
                       f"{layout.grid}x{layout.grid} grid")
    _bind_checkpoints(home, ["image-target", "image-drafter"], vq_checksum, progress)
    if last == 0:
        return out

    # --- classifier -------------------------------------------------------------------------------------
    path = home / "image-classifier"
    if "image-classifier" in names:
        def recon_fn(x):
            return _reconstruct(vq, x)

        n_rec = min(len(train_x), plan.n_cls_recon)
        recon_fn.cached = _reconstruct(vq, train_x[:n_rec])
        classifier, res = _train_classifier(plan, train_x[:n_rec], train_y[:n_rec], val_x, val_y, recon_fn,
                                            progress)
        classifier.save(path)
    classifier = ImageClassifier.from_pretrained(path)
    cls_checksum = logits_checksum(checksum_output("image-classifier", classifier))  # on the CPU, like a load
    classifier = _on_build_device(classifier)
    if "image-classifier" in names:
        m = {"accuracy_test": _accuracy(classifier, test_x, test_y),
             "accuracy_test_vq_reconstructions": _accuracy(classifier, test_rec, test_y), "image_size": size,
             "params": sum(p.numel() for p in classifier.parameters()), **_facts(res)}
        m = write_records(home, "image-classifier", m,
                          {"checksum": cls_checksum, "classes": list(data.CLASSES), "image_size": size,
                           **plan_facts}, micro)
        out["image-classifier"] = m
        _log(progress, f"image-classifier: accuracy {m['accuracy_test']:.3f}")
    if last == 1:
        return out

    # --- AR target and drafter --------------------------------------------------------------------------
    def encode_all(x: torch.Tensor, bs: int = 256) -> torch.Tensor:  # codes on the VQ's device, kept on the CPU
        return torch.cat([encode_images(vq, x[i:i + bs]).cpu() for i in range(0, len(x), bs)])

    train_seqs = _sequences(layout, encode_all(train_x), train_y)
    val_seqs = _sequences(layout, encode_all(val_x), val_y)
    test_seqs = _sequences(layout, test_codes, test_y)
    target = None
    if "image-target" in names:
        model, stages = _train_target(plan, home, layout, train_seqs, val_seqs, progress)
        target = _save_ar(home, "image-target", model, layout, plan, stages, vq, classifier, test_seqs, val_seqs,
                          None, "random (base), then grow_depth (split)", micro, out, progress)
    if "image-drafter" in names:
        target = target or _on_build_device(_load_ar(home / "image-target"))
        model = _make_llama(plan, layout, plan.dr_hidden, plan.dr_layers, plan.dr_heads, plan.dr_inter)
        init = "random"
        if _init_from(model, target):
            init = f"target's embeddings, first {plan.dr_layers} layer(s), final norm and head"
        model = _on_build_device(model)
        res = _train_ar(plan, model, layout, train_seqs, val_seqs, steps=plan.dr_steps, budget=plan.dr_budget,
                        lr=plan.ar_lr, desc="image-drafter", progress=progress,
                        checkpoint=stage_dir(home, "image-drafter") / "train.pt", seed=SEED + 1)
        _save_ar(home, "image-drafter", model, layout, plan, {"train": res}, vq, classifier, test_seqs, val_seqs,
                 target, init, micro, out, progress)

    _log(progress, f"built in {time.perf_counter() - t0:.0f}s, "
                   f"{sum(dir_mb(home / n) for n in NAMES if (home / n).exists()):.1f} MB")
    return out


def _load_ar(path: Path):
    return LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _save_ar(home: Path, name: str, model, layout: TokenLayout, plan: Plan, stages: dict, vq, classifier,
             test_seqs, val_seqs, target, init: str, micro: bool, out: dict, progress: bool):
    """Save an AR model in fp16 and measure the shipped weights: losses, class fidelity with and without
    CFG, per-stage steps / tokens / seconds, and (deep target) each layer's ablation."""
    path = home / name
    model = _save_llama_fp16(model, path)
    checksum_ = logits_checksum(checksum_output(name, model, layout))  # on the CPU, as a load reproduces it
    model = _on_build_device(model)
    fid, per, images = _fidelity(model, vq, classifier, layout, plan.per_class, plan.cfg_scale, SEED + 7)
    fid1, _, _ = _fidelity(model, vq, classifier, layout, plan.per_class, 1.0, SEED + 7)
    data.image_grid(images, nrow=plan.per_class).save(path / "samples.png")
    res = list(stages.values())[-1]
    tokens_per_step = plan.ar_batch * (layout.seq_len - 1)
    m = {"test_loss": _eval_ar_loss(model, test_seqs, layout), "val_loss": _eval_ar_loss(model, val_seqs, layout),
         "class_fidelity": fid, "class_fidelity_per_class": per, "class_fidelity_no_cfg": fid1,
         "fidelity_setup": {"per_class": plan.per_class, "cfg_scale": plan.cfg_scale, "temperature": 1.0,
                            "top_k": 0, "seed": SEED + 7, "judge": "image-classifier"},
         "layers": model.config.num_hidden_layers, "hidden": model.config.hidden_size,
         "params": sum(p.numel() for p in model.parameters()), **_facts(res),
         "stages": {k: {"steps": r.steps, "tokens": r.steps * tokens_per_step, "seconds": round(r.seconds, 2),
                        "best_val_loss": r.best_val_loss, "stopped": r.stopped} for k, r in stages.items()}}
    m["train_steps"] = sum(r.steps for r in stages.values())
    m["train_tokens"] = m["train_steps"] * tokens_per_step
    m["train_seconds"] = round(sum(r.seconds for r in stages.values()), 2)
    if len(stages) > 1:
        ablation_seqs = on_model(test_seqs[: 8 if micro else 64], model)
        m["layer_ablation_loss_increase"] = layer_ablation(model, ablation_seqs)
        m["layer_ablation_base_loss"] = mean_loss(model, ablation_seqs)
        m["unused_layers"] = unused_layers(m["layer_ablation_loss_increase"], m["layer_ablation_base_loss"])
    if target is not None:
        m["greedy_agreement_with_target_test"] = _agreement(model, target, test_seqs)
    m = write_records(home, name, m, {"checksum": checksum_,
                                      "layout": layout.to_dict(data.CLASSES), "vq": "image-vq", "init": init,
                                      "plan": asdict(plan)}, micro)
    out[name] = m
    _log(progress, f"{name}: test loss {m['test_loss']:.3f}, class fidelity {fid:.3f} (no CFG {fid1:.3f})")
    return model


__all__ = ["NAMES", "encode_images", "generate_images", "checksum", "checksum_output", "build", "BASE_NAMES"]
