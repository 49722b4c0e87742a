"""The image family's judge: a small CNN that labels pictures with their class (``image-classifier``), which
the zoo's build and the image benchmarks use to score generated samples."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
from safetensors.torch import load_file, save_file

from .home import read_json, write_json

UNRECORDED_IMAGE_SIZE = 32  # the picture size of classifiers saved before it was recorded in config.json


class ImageClassifier(nn.Module):
    """A small CNN: three conv stages, global average pooling, a linear head. Input in [-1, 1]."""

    def __init__(self, num_classes: int, width: int = 32, image_size: int = UNRECORDED_IMAGE_SIZE):
        super().__init__()
        # image_size: the pictures it was trained on (the conv net runs on any size; it judges that one well)
        self.config = {"num_classes": num_classes, "width": width, "image_size": image_size}
        w = width
        self.features = nn.Sequential(
            nn.Conv2d(3, w, 3, padding=1), nn.ReLU(),
            nn.Conv2d(w, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(2 * w, 2 * w, 3, padding=1), nn.ReLU(),
        )
        self.head = nn.Linear(2 * w, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self(x).argmax(-1)

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        # from any device: the file holds fp16 CPU tensors either way
        save_file({k: v.detach().half().cpu().contiguous() for k, v in self.state_dict().items()},
                  str(path / "model.safetensors"))
        write_json(path / "config.json", {"architecture": "ImageClassifier", **self.config})

    @classmethod
    def from_pretrained(cls, path: Path) -> "ImageClassifier":
        cfg = read_json(Path(path) / "config.json")
        model = cls(num_classes=cfg["num_classes"], width=cfg["width"],
                    image_size=cfg.get("image_size", UNRECORDED_IMAGE_SIZE))
        state = {k: v.float() for k, v in load_file(str(Path(path) / "model.safetensors")).items()}
        model.load_state_dict(state)
        return model.eval()


__all__ = ["ImageClassifier", "UNRECORDED_IMAGE_SIZE"]
