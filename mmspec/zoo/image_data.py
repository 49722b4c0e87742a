"""Image data of the zoo: class-conditional pictures drawn procedurally with PIL.

Every picture is a pure function of one integer seed: the seed picks the class (``seed % NUM_CLASSES``,
so any run of consecutive seeds is class-balanced) and drives all the jitter (position, size, rotation,
foreground and background colours, background gradient, stripe phase). Train / val / test are
disjoint seed ranges (``SPLITS``), so held-out pictures are never seen in training.

The classes mix shape, colour and texture, so that a class-conditional generator has to get all three
right (e.g. "blue square" vs "blue stripes square", "red circle" vs "red ring")."""

from __future__ import annotations

import math
import random

import numpy as np
import torch
from PIL import Image, ImageChops, ImageDraw

IMAGE_SIZE = 32
_SUPERSAMPLE = 4  # drawn at 4x and box-downsampled: anti-aliased edges

# name -> (shape, texture, colour name)
CLASS_SPECS: list[tuple[str, str, str, str]] = [
    ("red circle", "circle", "solid", "red"),
    ("green circle", "circle", "solid", "green"),
    ("blue square", "square", "solid", "blue"),
    ("yellow square", "square", "solid", "yellow"),
    ("magenta triangle", "triangle", "solid", "magenta"),
    ("cyan triangle", "triangle", "solid", "cyan"),
    ("red ring", "ring", "solid", "red"),
    ("orange cross", "cross", "solid", "orange"),
    ("blue stripes square", "square", "hstripes", "blue"),
    ("green checker square", "square", "checker", "green"),
    ("yellow vstripes circle", "circle", "vstripes", "yellow"),
    ("white diamond", "diamond", "solid", "white"),
]
CLASSES: list[str] = [c[0] for c in CLASS_SPECS]
NUM_CLASSES = len(CLASSES)

COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 200, 60),
    "blue": (50, 90, 235),
    "yellow": (235, 215, 40),
    "magenta": (215, 50, 210),
    "cyan": (40, 210, 220),
    "orange": (245, 140, 30),
    "white": (235, 235, 235),
}

# disjoint seed ranges; a split's i-th picture has seed start + i
SPLITS: dict[str, tuple[int, int]] = {
    "train": (0, 1_000_000),
    "val": (1_000_000, 1_100_000),
    "test": (2_000_000, 2_100_000),
}


def split_seeds(split: str, n: int, start: int = 0) -> range:
    """Seeds of pictures ``start .. start + n - 1`` of a split."""
    lo, hi = SPLITS[split]
    if start < 0 or lo + start + n > hi:
        raise ValueError(f"split {split!r} holds {hi - lo} pictures; asked for {start}..{start + n}")
    return range(lo + start, lo + start + n)


def split_of_seed(seed: int) -> str:
    for name, (lo, hi) in SPLITS.items():
        if lo <= seed < hi:
            return name
    raise ValueError(f"seed {seed} lies in no split")


def class_of_seed(seed: int) -> int:
    return seed % NUM_CLASSES


def _jitter_colour(rgb: tuple[int, int, int], rng: random.Random, amount: int = 22) -> tuple[int, int, int]:
    return tuple(max(0, min(255, c + rng.randint(-amount, amount))) for c in rgb)


def _background(rng: random.Random, size: int) -> Image.Image:
    """A dark background: a random dim colour with a gentle linear gradient in a random direction."""
    base = [rng.randint(10, 70) for _ in range(3)]
    tilt = [rng.randint(-25, 25) for _ in range(3)]
    angle = rng.uniform(0, 2 * math.pi)
    dx, dy = math.cos(angle), math.sin(angle)
    coords = np.arange(size, dtype=np.float32) / (size - 1) - 0.5
    ramp = coords[None, :] * dx + coords[:, None] * dy  # [H, W] in about [-0.7, 0.7]
    arr = np.stack([b + t * ramp for b, t in zip(base, tilt)], axis=-1)
    return Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), "RGB")


def _shape_mask(shape: str, cx: float, cy: float, r: float, rot: float, size: int) -> Image.Image:
    """An 'L' mask (255 inside) of a shape centred at (cx, cy) with half-size r, at ``size`` pixels."""
    mask = Image.new("L", (size, size), 0)
    d = ImageDraw.Draw(mask)

    def poly(points):
        c, s = math.cos(rot), math.sin(rot)
        d.polygon([(cx + x * c - y * s, cy + x * s + y * c) for x, y in points], fill=255)

    if shape == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=255)
    elif shape == "ring":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=255)
        ri = r * 0.55
        d.ellipse([cx - ri, cy - ri, cx + ri, cy + ri], fill=0)
    elif shape == "square":
        poly([(-r, -r), (r, -r), (r, r), (-r, r)])
    elif shape == "triangle":
        poly([(0, -r * 1.1), (r * 1.05, r * 0.8), (-r * 1.05, r * 0.8)])
    elif shape == "diamond":
        poly([(0, -r * 1.2), (r * 0.85, 0), (0, r * 1.2), (-r * 0.85, 0)])
    elif shape == "cross":
        w = r * 0.38
        poly([(-r, -w), (r, -w), (r, w), (-r, w)])
        poly([(-w, -r), (w, -r), (w, r), (-w, r)])
    else:
        raise ValueError(shape)
    return mask


def _texture_mask(texture: str, rng: random.Random, size: int, scale: int) -> Image.Image | None:
    """Where the foreground colour shows inside the shape (None: everywhere)."""
    if texture == "solid":
        return None
    period = 6 * scale if texture != "checker" else 12 * scale
    phase = rng.randrange(period)
    mask = Image.new("L", (size, size), 0)
    d = ImageDraw.Draw(mask)
    half = period // 2
    if texture == "hstripes":
        for y in range(-period + phase, size, period):
            d.rectangle([0, y, size, y + half - 1], fill=255)
    elif texture == "vstripes":
        for x in range(-period + phase, size, period):
            d.rectangle([x, 0, x + half - 1, size], fill=255)
    elif texture == "checker":
        for i, y in enumerate(range(-period + phase, size, half)):
            for j, x in enumerate(range(-period + phase, size, half)):
                if (i + j) % 2 == 0:
                    d.rectangle([x, y, x + half - 1, y + half - 1], fill=255)
    else:
        raise ValueError(texture)
    return mask


def draw(class_id: int, seed: int, size: int = IMAGE_SIZE) -> Image.Image:
    """The picture of class ``class_id`` whose jitter is drawn from ``seed`` (RGB, ``size`` x ``size``)."""
    if not 0 <= class_id < NUM_CLASSES:
        raise ValueError(f"class id {class_id} out of range 0..{NUM_CLASSES - 1}")
    _, shape, texture, colour = CLASS_SPECS[class_id]
    rng = random.Random(f"mmspec-image-{seed}-{class_id}")
    big = size * _SUPERSAMPLE
    img = _background(rng, size).resize((big, big), Image.BILINEAR)
    r = rng.uniform(0.24, 0.36) * big  # half-size: shapes span about 50-70% of the picture
    margin = r * 1.15
    cx = rng.uniform(margin, big - margin)
    cy = rng.uniform(margin, big - margin)
    rot = rng.uniform(-0.35, 0.35) if shape in ("square", "triangle", "cross") else 0.0
    fg = _jitter_colour(COLOURS[colour], rng)
    mask = _shape_mask(shape, cx, cy, r, rot, big)
    tex = _texture_mask(texture, rng, big, _SUPERSAMPLE)
    if tex is not None:
        # the gaps of a texture are a light tint of the background, so the texture stays visible
        gap = tuple(min(255, c // 3 + 10) for c in fg)
        img.paste(Image.new("RGB", (big, big), gap), (0, 0), mask)
        mask = ImageChops.multiply(mask, tex)
    img.paste(Image.new("RGB", (big, big), fg), (0, 0), mask)
    return img.resize((size, size), Image.BOX)


def example(seed: int, size: int = IMAGE_SIZE) -> tuple[Image.Image, int]:
    """(picture, class id) of one seed; the class is ``seed % NUM_CLASSES``."""
    c = class_of_seed(seed)
    return draw(c, seed, size), c


def pil_to_tensor(img: Image.Image) -> torch.Tensor:
    """PIL RGB -> float tensor [3, H, W] in [-1, 1] (the VQ model's range)."""
    arr = torch.from_numpy(np.asarray(img.convert("RGB"), dtype=np.uint8).copy())
    return arr.permute(2, 0, 1).float() / 127.5 - 1.0


def tensor_to_pil(x: torch.Tensor) -> Image.Image:
    """Float tensor [3, H, W] in [-1, 1] (on any device) -> PIL RGB."""
    arr = ((x.detach().cpu().float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 0).contiguous()
    return Image.fromarray(arr.numpy(), "RGB")


def make_dataset(split: str, n: int, start: int = 0, size: int = IMAGE_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` pictures of a split as (images [n, 3, size, size] float in [-1, 1], labels [n] long)."""
    imgs, labels = [], []
    for seed in split_seeds(split, n, start):
        img, c = example(seed, size)
        imgs.append(pil_to_tensor(img))
        labels.append(c)
    if not imgs:
        return torch.zeros(0, 3, size, size), torch.zeros(0, dtype=torch.long)
    return torch.stack(imgs), torch.tensor(labels, dtype=torch.long)


def image_grid(images: torch.Tensor, nrow: int, pad: int = 2, scale: int = 1) -> Image.Image:
    """Tile images [N, 3, H, W] in [-1, 1] into one PIL picture with ``nrow`` pictures per row."""
    n, _, h, w = images.shape
    ncol = nrow
    nrows = max(1, math.ceil(n / ncol))
    grid = Image.new("RGB", (ncol * (w + pad) + pad, nrows * (h + pad) + pad), (128, 128, 128))
    for i in range(n):
        r, c = divmod(i, ncol)
        grid.paste(tensor_to_pil(images[i]), (pad + c * (w + pad), pad + r * (h + pad)))
    if scale != 1:
        grid = grid.resize((grid.size[0] * scale, grid.size[1] * scale), Image.NEAREST)
    return grid


__all__ = ["CLASSES", "CLASS_SPECS", "NUM_CLASSES", "IMAGE_SIZE", "SPLITS", "split_seeds", "split_of_seed",
           "class_of_seed", "draw", "example", "pil_to_tensor", "tensor_to_pil", "make_dataset", "image_grid"]
