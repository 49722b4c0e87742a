"""The tiny model zoo: small, genuinely trained models built offline from data every machine has.

``mmspec.zoo.load(name)`` returns a ready ``ZooEntry``; ``mmspec zoo build`` (:mod:`mmspec.zoo.builder`)
rebuilds the zoo. This package's face is library code: loading a shipped model needs only the per-family
loaders (``code_loader``, ``vlm_loader``, ``image_loader``), never the modules that build the models.
Models live in ``<zoo home>/<name>/`` with their weights (safetensors), configs, tokenizer/processor,
``metrics.json`` and ``zoo.json`` (build facts, logits checksum, file hashes).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch

from . import code_loader, image_loader, vlm_loader
from .entry import ZooEntry
from .home import read_json, shipped_home, zoo_home
from .integrity import check_model_dir, rebuild_hint

LOADERS = {"code": code_loader, "vlm": vlm_loader, "image": image_loader}
FAMILIES = tuple(LOADERS)
_device: str | None = None  # where load() puts models when its caller names no device (None: the CPU)


def use_device(device: str | None) -> None:
    """Make every later :func:`load` without a ``device`` place its models on ``device`` (``mmspec bench
    --device cuda``): a suite's drafters load lazily from many factories, and each must land where the target
    is. None: the CPU, the loaders' own place."""
    global _device
    if device is not None:
        try:  # a bad or absent device fails here, naming it, not mid-benchmark
            torch.empty(0, device=device)
        except (RuntimeError, AssertionError) as exc:  # AssertionError: torch built without CUDA
            raise ValueError(f"device {device!r} cannot be used here ({exc})") from None
    _device = device


@contextmanager
def placed_on(device: str | None):
    """:func:`use_device` for the length of a ``with`` block (``mmspec eval --device``: the code and VLM suites' zoo
    models on the GPU, the image suite's where ``--image-device`` says); the earlier placement comes back after."""
    before = _device
    use_device(device)
    try:
        yield
    finally:
        use_device(before)


def family_names(family: str) -> list[str]:
    """The models of one family, in build order."""
    if family not in LOADERS:
        raise ValueError(f"unknown zoo family {family!r}; choose from {FAMILIES}")
    return list(LOADERS[family].NAMES)


def family_of(name: str) -> str:
    for fam, loader in LOADERS.items():
        if name in loader.NAMES:
            return fam
    raise ValueError(f"unknown zoo model {name!r}; available: {available()}")


def available() -> list[str]:
    return [name for loader in LOADERS.values() for name in loader.NAMES]


def load(name: str, home: str | Path | None = None, device: str | None = None) -> ZooEntry:
    """Load a zoo model by name from ``home`` (default: ``$MMSPEC_HOME`` or the checkout's ``zoo/``) onto
    ``device`` (default: the one :func:`use_device` set, else the CPU)."""
    root = Path(home) if home is not None else zoo_home()
    path = root / name
    if not path.is_dir():
        raise ValueError(f"zoo model {name!r} is not built in {root}; run `mmspec zoo build` (or set MMSPEC_HOME)")
    loader = LOADERS[family_of(name)]
    check_model_dir(name, path)
    try:
        entry = loader.load(name, path)
    except Exception as exc:  # noqa: BLE001 - torn files, foreign formats: one message naming the fix
        raise ValueError(f"zoo model {name!r} in {path} cannot be loaded ({type(exc).__name__}: {exc}); "
                         f"{rebuild_hint(name)}") from exc
    return _placed(entry, device if device is not None else _device)


def _placed(entry: ZooEntry, device: str | None) -> ZooEntry:
    """``entry`` with its model (and an image model's VQ) on ``device``; the classifier judges on the CPU."""
    if device is None or entry.name == "image-classifier":
        return entry
    for part in (entry.model, entry.extras.get("vq")):
        if hasattr(part, "to"):
            part.to(device)
    return entry


def metrics(name: str, home: str | Path | None = None) -> dict:
    root = Path(home) if home is not None else zoo_home()
    return read_json(root / name / "metrics.json")


__all__ = ["ZooEntry", "load", "use_device", "placed_on", "check_model_dir", "shipped_home", "metrics", "available",
           "family_names", "family_of", "zoo_home", "FAMILIES"]
