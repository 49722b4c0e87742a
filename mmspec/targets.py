"""What a target is once loaded, and which route it takes: read off the model's class and config, never named
by the caller (a stock Janus model, a visual AR generator over VQ codes, a LLaVA-class VLM, or a causal LM)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .image_codes import LAYOUT_KEY
from .vision import image_token_id

ROUTES = ("text", "vlm", "image", "janus")


def detect_route(model) -> str:
    """``text``, ``vlm``, ``image`` or ``janus``: a stock ``JanusForConditionalGeneration`` is Janus; a config
    carrying ``mmspec_image_layout`` an image generator; an image placeholder id or a vision tower a VLM; any
    other model that generates text a causal LM."""
    name = type(model).__name__
    if name == "JanusForConditionalGeneration":
        return "janus"
    cfg = getattr(model, "config", None)
    if cfg is None:
        raise ValueError(f"cannot inspect the target: a {name} has no config (pass a Hugging Face model)")
    if getattr(cfg, LAYOUT_KEY, None) is not None:
        return "image"
    if image_token_id(model) is not None or getattr(cfg, "vision_config", None) is not None:
        return "vlm"
    can_generate = getattr(model, "can_generate", lambda: hasattr(model, "generate"))()
    if can_generate and model.get_output_embeddings() is not None:
        return "text"
    raise ValueError(f"cannot tell what a {name} generates: mmspec takes causal LMs, LLaVA-class VLMs, visual AR "
                     "generators (config.mmspec_image_layout) and Janus models")


@dataclass
class Target:
    """A loaded target: the model, what turns inputs into ids (tokenizer / processor / VQ), where it came from."""
    model: Any
    tokenizer: Any = None
    name: str = "given"
    zoo: str | None = None  # zoo model name when loaded from the zoo
    extras: dict = field(default_factory=dict)

    @property
    def route(self) -> str:
        return detect_route(self.model)


__all__ = ["ROUTES", "Target", "detect_route"]
