"""Loading the image family's shipped models: the VQ tokenizer, the class-conditional AR target and AR
drafter (each with its VQ and token layout), the classifier and the feature drafters. Building them is
:mod:`mmspec.zoo.image` / :mod:`mmspec.zoo.image_drafters`."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaForCausalLM

from ..drafters.dflash_io import load_dflash
from ..image_codes import TokenLayout
from .entry import ZooEntry, feature_drafter_entry
from .home import read_json
from .image_classifier import ImageClassifier
from .integrity import check_model_dir

BASE_NAMES = ["image-vq", "image-target", "image-drafter", "image-classifier"]
FEATURE_NAMES = ["image-eagle", "image-sar"]  # feature drafters of the guided target
DFLASH_NAMES = ["image-dflash"]  # the DFlash block drafter of the guided target
NAMES = BASE_NAMES + FEATURE_NAMES + DFLASH_NAMES


def load(name: str, path: Path) -> ZooEntry:
    """Load one image-family model from its folder (the AR models also load their VQ from ``../image-vq``)."""
    # diffusers' model classes take over a second to import: only image-family loads pay for them, not
    # `import mmspec` nor the other families' loads
    from diffusers import VQModel

    if name in FEATURE_NAMES:
        return feature_drafter_entry(name, path)
    if name in DFLASH_NAMES:
        return ZooEntry(name, load_dflash(path), config=read_json(Path(path) / "zoo.json"), path=Path(path))
    if name not in NAMES:
        raise ValueError(f"unknown image zoo model {name!r}; choose from {NAMES}")
    path = Path(path)
    cfg = read_json(path / "zoo.json")
    if name == "image-vq":
        vq = VQModel.from_pretrained(path, torch_dtype=torch.float32).eval()
        return ZooEntry(name, vq, tokenizer=None, config=cfg, path=path,
                        extras={"layout": TokenLayout.from_dict(cfg["layout"])})
    if name == "image-classifier":
        return ZooEntry(name, ImageClassifier.from_pretrained(path), config=cfg, path=path,
                        extras={"classes": list(cfg["classes"])})
    model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    vq_path = path.parent / cfg.get("vq", "image-vq")
    if vq_path.exists():
        check_model_dir(vq_path.name, vq_path)  # a damaged VQ must fail here, naming its file
    vq = VQModel.from_pretrained(vq_path, torch_dtype=torch.float32).eval() if vq_path.exists() else None
    layout = TokenLayout.from_dict(cfg["layout"])
    return ZooEntry(name, model, tokenizer=vq, config=cfg, path=path,
                    extras={"vq": vq, "layout": layout, "classes": list(cfg["layout"]["classes"])})


__all__ = ["BASE_NAMES", "FEATURE_NAMES", "DFLASH_NAMES", "NAMES", "load"]
