"""What loading a zoo model returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..drafters.feature_model import FeatureDraftModel
from .home import read_json


@dataclass
class ZooEntry:
    name: str
    model: Any
    tokenizer: Any = None  # tokenizer, processor or VQ model, depending on the family
    config: dict = field(default_factory=dict)  # zoo.json: family, sizes, build facts
    path: Path | None = None
    extras: dict = field(default_factory=dict)


def feature_drafter_entry(name: str, path: Path) -> ZooEntry:
    """A zoo feature drafter (EAGLE-style, MSD, FLASH, the image family's): its network and ``zoo.json``; it
    reads the target's tokens, so it has no tokenizer of its own."""
    return ZooEntry(name=name, model=FeatureDraftModel.from_pretrained(path), tokenizer=None,
                    config=read_json(Path(path) / "zoo.json"), path=Path(path))


__all__ = ["ZooEntry", "feature_drafter_entry"]
