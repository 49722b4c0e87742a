"""What the engine needs to know about VLM targets, read from stock configs and modules.

LLaVA (``LlavaForConditionalGeneration``) and its relatives replace every image placeholder id in
``input_ids`` by one projected image embedding, in row-major order. How many placeholders the images fill is
asked of the family's config or modules (patch grid, pooling, pixel shuffle, tiles, M-RoPE grids), so a
mismatched prompt is refused before any forward. Feature drafters (MSD) read those embeddings: we take them
from the projector's output with a forward hook during the target's own prefill, so nothing is computed
twice and no modeling code is copied.
"""

from __future__ import annotations

import inspect
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

from .families import uses_mrope


def image_token_id(model) -> int | None:
    cfg = model.config
    for name in ("image_token_id", "image_token_index"):
        value = getattr(cfg, name, None)
        if value is not None:
            return int(value)
    return None


def tokens_per_image(model) -> int | None:
    """Placeholders one image expands to when that is fixed by the config: ``mm_tokens_per_image`` (Gemma3's
    pooled patches), Idefics3 / SmolVLM's pixel-shuffled patches per image tile, or the LLaVA-1.5 layout (one
    per patch, plus CLS with the "full" feature strategy); None when it depends on the image (LLaVA-NeXT tiles,
    Qwen2-VL grids: see :func:`expected_image_tokens`) or the config does not say."""
    cfg = model.config
    if getattr(cfg, "mm_tokens_per_image", None):
        return int(cfg.mm_tokens_per_image)
    vision = getattr(cfg, "vision_config", None)
    if vision is None or getattr(cfg, "image_grid_pinpoints", None) or uses_mrope(model):
        return None
    size, patch = getattr(vision, "image_size", None), getattr(vision, "patch_size", None)
    if not size or not patch:
        return None
    n = (size // patch) ** 2
    if getattr(cfg, "scale_factor", None):  # Idefics3 / SmolVLM: pixel shuffle merges scale_factor² patches
        return n // int(cfg.scale_factor) ** 2
    if getattr(cfg, "vision_feature_select_strategy", "default") == "full":
        n += 1
    return n


def _real_images(pixel_values: torch.Tensor) -> int:
    """Images in a 5-D ``[batch, images, C, H, W]`` batch that are not all-zero padding (the test Idefics3
    itself applies), or the first dimension of a 4-D one."""
    if pixel_values.dim() != 5:
        return pixel_values.shape[0]
    flat = pixel_values.reshape(-1, *pixel_values.shape[2:])
    return int((flat != 0).flatten(1).any(1).sum())


def _llava_next_tokens(model, image_sizes: torch.Tensor) -> int | None:
    """LLaVA-NeXT: placeholders for images of these sizes, asked of the model's own ``pack_image_features``
    on stand-in features (one value per patch), so tiles, unpadding and row newlines are counted its way."""
    cfg = model.config
    inner = getattr(model, "model", model)
    if getattr(cfg, "vision_feature_select_strategy", "default") != "default" or \
            not hasattr(inner, "pack_image_features"):
        return None
    side = cfg.vision_config.image_size // cfg.vision_config.patch_size
    stand_ins = [torch.zeros(image_size_to_num_patches(size, cfg.image_grid_pinpoints, cfg.vision_config.image_size),
                             side * side, 1) for size in image_sizes.tolist()]
    _, lengths = inner.pack_image_features(stand_ins, image_sizes, "default", image_newline=torch.zeros(1))
    return int(sum(int(n) for n in lengths))


def expected_image_tokens(model, prefill_inputs: dict) -> int | None:
    """How many image placeholders the images in ``prefill_inputs`` fill, asked of the model's config and
    modules (None where the family is not known to mmspec: the model's own check then applies)."""
    pixel_values = prefill_inputs.get("pixel_values")
    if not isinstance(pixel_values, torch.Tensor):
        return None
    grid = prefill_inputs.get("image_grid_thw")
    if grid is not None and uses_mrope(model):  # Qwen2-VL family: merged patches of each image's grid
        merge = getattr(model.config.vision_config, "spatial_merge_size", 1)
        return int(grid.prod(-1).sum()) // merge ** 2
    sizes = prefill_inputs.get("image_sizes")
    if sizes is not None and getattr(model.config, "image_grid_pinpoints", None):
        return _llava_next_tokens(model, sizes)
    per_image = tokens_per_image(model)
    return None if per_image is None else _real_images(pixel_values) * per_image


def projector(model):
    """The module whose output the model scatters into the image positions (None for text-only models):
    LLaVA's ``multi_modal_projector``, or the whole vision tower where it ends in the merged image embeddings
    (Qwen2-VL / Qwen2.5-VL ``visual``: its ``pooler_output``, already in placeholder order)."""
    inner = getattr(model, "model", model)
    found = getattr(inner, "multi_modal_projector", None) or getattr(model, "multi_modal_projector", None)
    if found is None and getattr(inner, "get_rope_index", None) is not None:
        found = getattr(inner, "visual", None)
    return found


def check_image_tokens(model, input_ids: torch.LongTensor, prefill_inputs: dict) -> None:
    """Placeholders and images must match before anything runs (a clear error instead of a shape error
    deep inside the model)."""
    pixel_values = prefill_inputs.get("pixel_values")
    image_id = image_token_id(model)
    if image_id is None:
        if pixel_values is not None:
            raise ValueError("pixel_values given but the target model takes no images")
        return
    count = int((input_ids == image_id).sum())
    if count and pixel_values is None:
        raise ValueError("input_ids contain image tokens but pixel_values is missing")
    if not count and pixel_values is not None:
        raise ValueError("pixel_values given but input_ids contain no image token")
    if pixel_values is None:
        return
    needed = {"image_sizes": bool(getattr(model.config, "image_grid_pinpoints", None)),  # LLaVA-NeXT tiles
              "image_grid_thw": uses_mrope(model)}  # Qwen2-VL family
    for name, needs in needed.items():
        if needs and prefill_inputs.get(name) is None:
            raise ValueError(f"this target needs the processor's {name} next to pixel_values "
                             "(pass every output of its processor)")
    expected = expected_image_tokens(model, prefill_inputs)
    if expected is not None and count != expected:
        raise ValueError(f"number of image tokens ({count}) does not match the images, which fill {expected} "
                         "placeholders (the prompt must come from the target's processor with these images)")


def _forward_parameters(model) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def forward_inputs(model, processor_outputs: dict) -> dict:
    """The processor outputs the model's forward takes (``pixel_values``, ``image_sizes``, ``image_grid_thw``,
    ``mm_token_type_ids``, ``pixel_attention_mask``, ``token_type_ids``, ...), without ``input_ids``,
    ``attention_mask`` and ``labels`` (PaliGemma's processor returns them): what the prefill forwards besides
    the prompt."""
    accepted = _forward_parameters(model)
    return {k: v for k, v in processor_outputs.items()
            if k in accepted and k not in ("input_ids", "attention_mask", "labels") and v is not None}


@dataclass
class CapturedImages:
    embeds: torch.Tensor | None = None  # [n_image_tokens, H]


@contextmanager
def capture_image_embeds(model, enabled: bool = True):
    """Record the projector's output (flattened to [n_tokens, H]) while the block runs, in this thread only (a
    concurrent call on the same model records its own)."""
    box = CapturedImages()
    proj = projector(model) if enabled else None
    if proj is None:
        yield box
        return
    owner = threading.get_ident()

    def hook(module, args, output):
        if threading.get_ident() != owner:
            return
        pooled = getattr(output, "pooler_output", None)
        out = pooled if pooled is not None else output[0] if isinstance(output, (tuple, list)) else output
        flat = out.reshape(-1, out.shape[-1])
        box.embeds = flat if box.embeds is None else torch.cat([box.embeds, flat])

    handle = proj.register_forward_hook(hook)
    try:
        yield box
    finally:
        handle.remove()


PICTURE_FORMS = ("a PIL image, a numpy array or torch tensor (H x W x C or C x H x W with 1, 3 or 4 channels, or "
                 "H x W; integers 0..255 or floats in [0, 1]), a picture file's path, or a list of those")


def _array_picture(value, what: str) -> Image.Image:
    """A numpy array or torch tensor as the PIL image it holds. Layout: HWC or CHW, told apart by which end has 1,
    3 or 4 channels (both: HWC for numpy, as ``np.asarray(picture)`` gives; CHW for torch, as torchvision gives);
    2-D is grayscale. Values: integers 0..255, or floats in [0, 1] (taken at 8 bits, as a processor's PIL
    path takes them)."""
    is_torch = isinstance(value, torch.Tensor)
    a = value.detach().cpu() if is_torch else value
    if is_torch and a.dtype in (torch.float16, torch.bfloat16):
        a = a.float()
    a = a.numpy() if is_torch else np.asarray(a)
    kind = a.dtype.kind
    if kind not in "uif":
        raise ValueError(f"{what}: a {a.dtype} array is not a picture; give {PICTURE_FORMS}")
    if a.ndim == 3:
        first, last = a.shape[0] in (1, 3, 4), a.shape[-1] in (1, 3, 4)
        if first and (is_torch or not last):
            a = a.transpose(1, 2, 0)
        elif not last:
            raise ValueError(f"{what}: an array of shape {tuple(a.shape)} has no channel axis of 1, 3 or 4 at "
                             f"either end; give {PICTURE_FORMS}")
        if a.shape[-1] == 1:
            a = a[..., 0]
    elif a.ndim != 2:
        raise ValueError(f"{what}: an array of shape {tuple(a.shape)} is not one picture; give {PICTURE_FORMS}")
    if a.size == 0:
        raise ValueError(f"{what}: an empty array of shape {tuple(a.shape)} is not a picture")
    if kind == "f":
        if not np.isfinite(a).all() or a.min() < 0 or a.max() > 1:
            raise ValueError(f"{what}: a float picture holds values in [0, 1], got values in [{a.min()}, {a.max()}] "
                             "(for 0..255 pass integers, e.g. uint8)")
        a = np.rint(a.astype(np.float64) * 255)
    elif a.min() < 0 or a.max() > 255:
        raise ValueError(f"{what}: an integer picture holds values 0..255, got values in [{a.min()}, {a.max()}]")
    a = np.ascontiguousarray(a.astype(np.uint8))
    return Image.fromarray(a)  # uint8 H x W (L), H x W x 3 (RGB) or H x W x 4 (RGBA)


def as_picture(value, what: str = "picture") -> Image.Image:
    """One picture in any form users have (:data:`PICTURE_FORMS`) as a PIL image, which every processor takes
    the same way; anything else is a ValueError naming the accepted forms."""
    if isinstance(value, Image.Image):
        return value
    if isinstance(value, (str, Path)):
        if not Path(value).is_file():
            raise ValueError(f"{what}: {str(value)!r} is not a picture file; give {PICTURE_FORMS}")
        from PIL import ImageOps  # noqa: PLC0415

        with Image.open(value) as opened:
            return ImageOps.exif_transpose(opened).convert("RGB")
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return _array_picture(value, what)
    raise ValueError(f"{what}: a {type(value).__name__} is not a picture; give {PICTURE_FORMS}")


def _is_picture(value) -> bool:
    """One picture (not a list of them): a PIL image, a path, or an array of 2 or 3 dimensions."""
    if isinstance(value, (Image.Image, str, Path)):
        return True
    return isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim in (2, 3)


def _listing(value):
    """A list / tuple, or a 4-D array or tensor (a stack of pictures), as a list; None when ``value`` is neither."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim == 4:
        return list(value)
    return None


def picture_rows(images, n_prompts: int) -> list[list[Image.Image]]:
    """Each prompt's pictures as PIL images. ``images``: one entry per prompt (a picture, a list of pictures, or
    None), a 4-D array or tensor counting as the list of its pictures; a single picture with a single prompt
    needs no list. None: no pictures."""
    if images is None:
        return [[] for _ in range(n_prompts)]
    if _is_picture(images):
        if n_prompts != 1:
            raise ValueError(f"one picture for {n_prompts} prompts: give images as a list with one entry per prompt "
                             "(a picture, a list of pictures, or None)")
        images = [images]
    entries = _listing(images)
    if entries is None:
        raise ValueError(f"images: a {type(images).__name__} is neither a picture nor a list with one entry per "
                         f"prompt; each entry takes {PICTURE_FORMS}")
    if len(entries) != n_prompts:
        raise ValueError(f"{len(entries)} image entries for {n_prompts} prompt(s): images has one entry per prompt "
                         "(a picture, a list of pictures for a prompt with several placeholders, or None)")
    rows = []
    for i, entry in enumerate(entries):
        if entry is None:
            rows.append([])
            continue
        pictures = _listing(entry)
        pictures = [entry] if pictures is None else pictures
        rows.append([as_picture(p, f"image {j} of prompt {i}") for j, p in enumerate(pictures)])
    return rows


__all__ = ["PICTURE_FORMS", "as_picture", "picture_rows", "image_token_id", "tokens_per_image", "expected_image_tokens",
           "forward_inputs", "projector",
           "check_image_tokens", "capture_image_embeds", "CapturedImages"]
