"""Training examples of the VLM family's scenes: pictures as pixel tensors, a pool of scenes rendered once,
token ids of prompts and answers, and right-padded batches. Shared by the target's recipe
(:mod:`mmspec.zoo.vlm`), the feature drafters' (:mod:`mmspec.zoo.vlm_drafters`) and ``mmspec train`` against the
zoo target.

Everything here is made on the CPU, also in a ``--device cuda`` build: a build's data does not depend on the
device, and whoever feeds a model moves its batch to the model's device (``training.loop.to_device``)."""

from __future__ import annotations

import numpy as np
import torch

from . import vlm_data as vd
from .code_data import EOS, IMAGE


def pixel_tensor(images) -> torch.Tensor:
    """The processor's ``pixel_values`` ((x / 255 - 0.5) / 0.5), computed directly from PIL images."""
    return to_pixels(torch.from_numpy(np.stack([np.asarray(im.convert("RGB")) for im in images])).permute(0, 3, 1, 2))


def to_pixels(uint8: torch.Tensor) -> torch.Tensor:
    return uint8.float() / 127.5 - 1.0


class ScenePool:
    """Scenes ``start .. start + n - 1`` of a split with their pictures (uint8, NCHW) rendered once."""

    def __init__(self, split: str, n: int, start: int = 0):
        self.split = split
        self.scenes = vd.scenes(split, n, start)
        self.images = torch.from_numpy(np.stack([np.asarray(sc.image()) for sc in self.scenes])).permute(0, 3, 1, 2)
        self.cells = torch.tensor([vd.cell_labels(sc) for sc in self.scenes], dtype=torch.long)  # (n, 9, 3)

    def __len__(self) -> int:
        return len(self.scenes)


class Encoder:
    """Token ids of prompts and answers (cached) and labelled sequences."""

    def __init__(self, tokenizer, n_image_tokens: int):
        self.tok = tokenizer
        self.n_image = n_image_tokens
        self.image_id = tokenizer.convert_tokens_to_ids(IMAGE)
        self.eos_id = tokenizer.convert_tokens_to_ids(EOS)
        self.pad_id = tokenizer.pad_token_id
        self._cache: dict[str, list[int]] = {}

    def ids(self, text: str) -> list[int]:
        out = self._cache.get(text)
        if out is None:
            out = self._cache[text] = self.tok(text, add_special_tokens=False).input_ids
        return out

    def prompt_ids(self, q: vd.Question) -> list[int]:
        """Identical to the processor's ids for ``with_image(q.prompt)``: the expanded placeholders, then the
        text. Target and drafter read the same ids; only the target gets the picture."""
        return self.prompt_text_ids(q.prompt)

    def prompt_text_ids(self, prompt: str) -> list[int]:
        return [self.image_id] * self.n_image + self.ids("\n" + prompt)

    def answer_ids(self, answer: str) -> list[int]:
        return self.ids(" " + answer) + [self.eos_id]

    def sequence(self, q: vd.Question) -> tuple[list[int], list[int]]:
        """``prompt answer <eos>`` with labels -100 except on the answer and its ``<eos>``."""
        p, a = self.prompt_ids(q), self.answer_ids(q.answer)
        return p + a, [-100] * len(p) + a


def collate(seqs: list[tuple[list[int], list[int]]], pad_id: int) -> dict:
    """Right padding (positions stay 0..n-1 for every row)."""
    n = max(len(s[0]) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    labels = torch.full((len(seqs), n), -100, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, (s, lab) in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        labels[i, : len(s)] = torch.tensor(lab)
        mask[i, : len(s)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


__all__ = ["pixel_tensor", "to_pixels", "ScenePool", "Encoder", "collate"]
