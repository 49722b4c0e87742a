"""Loading the vision-language family's shipped models: ``vlm-target`` (LLaVA + its processor), the text-only
``vlm-drafter`` and the feature drafters. Building them is :mod:`mmspec.zoo.vlm` / :mod:`mmspec.zoo.vlm_drafters`."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaForCausalLM, LlavaForConditionalGeneration, LlavaProcessor, PreTrainedTokenizerFast

from ..drafters.dflash_io import load_dflash
from .entry import ZooEntry, feature_drafter_entry
from .home import read_json

BASE_NAMES = ["vlm-target", "vlm-drafter"]
FEATURE_NAMES = ["vlm-eagle", "vlm-msd", "vlm-flash"]  # EAGLE-style, MSD, FLASH
DFLASH_NAMES = ["vlm-dflash", "vlm-dflash-c"]  # the DFlash block drafter; the same with compressed pictures
NAMES = BASE_NAMES + FEATURE_NAMES + DFLASH_NAMES


def set_generation_config(model, tokenizer) -> None:
    """Greedy, stopping at the tokenizer's ``<eos>``, no BOS: how the family's models are trained and measured."""
    gc = model.generation_config
    gc.pad_token_id = tokenizer.pad_token_id
    gc.eos_token_id = tokenizer.eos_token_id
    gc.bos_token_id = None
    gc.do_sample = False


def load(name: str, path: Path) -> ZooEntry:
    """``vlm-target``: model + ``LlavaProcessor`` (``extras['tokenizer']`` is its tokenizer);
    ``vlm-drafter``: model + tokenizer. Weights load as float32, the model in eval mode."""
    if name in FEATURE_NAMES:
        return feature_drafter_entry(name, path)
    if name in DFLASH_NAMES:
        return ZooEntry(name, load_dflash(path), PreTrainedTokenizerFast.from_pretrained(path),
                        read_json(Path(path) / "zoo.json"), Path(path))
    if name not in NAMES:
        raise ValueError(f"unknown vlm zoo model {name!r}; choose from {NAMES}")
    path = Path(path)
    config = read_json(path / "zoo.json")
    if name == "vlm-target":
        model = LlavaForConditionalGeneration.from_pretrained(path, dtype=torch.float32)
        processor = LlavaProcessor.from_pretrained(path)
        tokenizer = processor.tokenizer
    else:
        model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32)
        processor = tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    model.eval()
    set_generation_config(model, tokenizer)
    extras = {"tokenizer": tokenizer, "image_token_id": config.get("image_token_id"),
              "num_image_tokens": config.get("num_image_tokens"), "prompt_format": config.get("prompt_format")}
    return ZooEntry(name=name, model=model, tokenizer=processor, config=config, path=path, extras=extras)


__all__ = ["BASE_NAMES", "FEATURE_NAMES", "DFLASH_NAMES", "NAMES", "load", "set_generation_config"]
