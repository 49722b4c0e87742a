"""Attention masks per layer type, for models that mix sliding-window and full-attention layers.

Gemma2, Gemma3, Cohere2, GPT-OSS and Qwen2/Qwen3 configs with ``layer_types`` run some layers over the
whole context and others over the last ``sliding_window`` positions only. Their modeling code takes, in
place of one mask, a dict ``{"full_attention": mask, "sliding_attention": mask}`` and gives each layer the
mask of its type (the same door ``generate`` uses with ``create_masks_for_generate``). mmspec builds both
from the one tree mask: the sliding one is the full one cut to keys whose position is within the window of
the query's position (transformers' ``sliding_window_overlay``: ``key > query - window``).

``SpecKVCache`` keeps every layer's whole K/V (a sliding layer just never looks past its window), so no
cache layer is "sliding" in transformers' sense: each reports the full length from ``get_mask_sizes``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FULL = "full_attention"
SLIDING = "sliding_attention"


@dataclass(frozen=True)
class AttentionLayout:
    """How a model's attention layers see the past: ``window`` (None = unlimited) and, when the layers
    differ, each layer's type (``layer_types``; None when every layer is alike)."""

    window: int | None = None
    layer_types: tuple[str, ...] | None = None

    @property
    def mixed(self) -> bool:
        return self.layer_types is not None


def attention_layout(config) -> AttentionLayout:
    """The layout a text config describes (a multimodal config's text part is read the same way)."""
    window = getattr(config, "sliding_window", None)
    if window is None or getattr(config, "use_sliding_window", True) is False:
        return AttentionLayout(None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types is None or set(layer_types) == {SLIDING}:
        return AttentionLayout(int(window))
    if SLIDING not in layer_types:
        return AttentionLayout(None)
    return AttentionLayout(int(window), tuple(layer_types))


def window_cut(mask: torch.BoolTensor, key_positions: torch.LongTensor, query_positions: torch.LongTensor,
               window: int) -> torch.BoolTensor:
    """``mask`` [B, T, S] restricted to keys within ``window`` positions of each query (``key > query - window``);
    ``key_positions`` [B, S], ``query_positions`` [B, T]."""
    return mask & (key_positions[:, None, :] > query_positions[:, :, None] - window)


def masks_by_type(mask: torch.BoolTensor, key_positions: torch.LongTensor, query_positions: torch.LongTensor,
                  layout: AttentionLayout):
    """The mask(s) a forward takes: one tensor for uniform models (cut by the window if every layer slides),
    or the ``{layer type: mask}`` dict for mixed ones."""
    if layout.window is None:
        return mask
    cut = window_cut(mask, key_positions, query_positions, layout.window)
    if not layout.mixed:
        return cut
    return {FULL: mask, SLIDING: cut}


def map_masks(masks, fn):
    """Apply ``fn`` to a mask or to every mask of a ``{layer type: mask}`` dict."""
    if isinstance(masks, dict):
        return {kind: fn(m) for kind, m in masks.items()}
    return fn(masks)


def layer_mask(masks, config, layer_idx: int):
    """The mask layer ``layer_idx`` takes, for code that calls decoder layers one by one."""
    if isinstance(masks, dict):
        return masks[config.layer_types[layer_idx]]
    return masks
