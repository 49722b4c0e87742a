"""What the engine needs to know about LLaVA-class targets, read from stock configs and modules.

LLaVA (``LlavaForConditionalGeneration``) replaces every image placeholder id in ``input_ids`` by one
projected image embedding, in row-major order. Feature drafters (MSD) read those embeddings: we take them
from the projector's output with a forward hook during the target's own prefill, so nothing is computed
twice and no modeling code is copied.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch


def image_token_id(model) -> int | None:
    cfg = model.config
    for name in ("image_token_id", "image_token_index"):
        value = getattr(cfg, name, None)
        if value is not None:
            return int(value)
    return None


def tokens_per_image(model) -> int | None:
    """Placeholders one image expands to (LLaVA-1.5 layout: one per patch, plus CLS with the "full"
    feature strategy); None when the config does not say (e.g. dynamic-resolution models)."""
    cfg = model.config
    vision = getattr(cfg, "vision_config", None)
    if vision is None or getattr(cfg, "image_grid_pinpoints", None):
        return None
    size, patch = getattr(vision, "image_size", None), getattr(vision, "patch_size", None)
    if not size or not patch:
        return None
    n = (size // patch) ** 2
    if getattr(cfg, "vision_feature_select_strategy", "default") == "full":
        n += 1
    return n


def projector(model):
    """The module whose output the model scatters into the image positions (None for text-only models):
    LLaVA's ``multi_modal_projector``, or the whole vision tower where it ends in the merged image embeddings
    (Qwen2-VL / Qwen2.5-VL ``visual``: its ``pooler_output``, already in placeholder order)."""
    inner = getattr(model, "model", model)
    found = getattr(inner, "multi_modal_projector", None) or getattr(model, "multi_modal_projector", None)
    if found is None and getattr(inner, "get_rope_index", None) is not None:
        found = getattr(inner, "visual", None)
    return found


def check_image_tokens(model, input_ids: torch.LongTensor, pixel_values) -> None:
    """Placeholders and images must match before anything runs (a clear error instead of a shape error
    deep inside the model)."""
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
    per_image = tokens_per_image(model)
    if pixel_values is not None and per_image is not None and isinstance(pixel_values, torch.Tensor):
        n_images = pixel_values.shape[0]
        if count != n_images * per_image:
            raise ValueError(
                f"number of image tokens ({count}) does not match the images: {n_images} image(s) × "
                f"{per_image} tokens per image = {n_images * per_image}"
            )


@dataclass
class CapturedImages:
    embeds: torch.Tensor | None = None  # [n_image_tokens, H]


@contextmanager
def capture_image_embeds(model, enabled: bool = True):
    """Record the projector's output (flattened to [n_tokens, H]) while the block runs."""
    box = CapturedImages()
    proj = projector(model) if enabled else None
    if proj is None:
        yield box
        return

    def hook(module, args, output):
        pooled = getattr(output, "pooler_output", None)
        out = pooled if pooled is not None else output[0] if isinstance(output, (tuple, list)) else output
        flat = out.reshape(-1, out.shape[-1])
        box.embeds = flat if box.embeds is None else torch.cat([box.embeds, flat])

    handle = proj.register_forward_hook(hook)
    try:
        yield box
    finally:
        handle.remove()


__all__ = ["image_token_id", "tokens_per_image", "projector", "check_image_tokens", "capture_image_embeds",
           "CapturedImages"]
