"""Shared plumbing of the zoo's builders: seeding, stable hash buckets, where a model's training checkpoints
live while it is built, the library versions a build records, and the logits fingerprints in ``zoo.json``."""

from __future__ import annotations

import contextlib
import hashlib
import platform
import random
from pathlib import Path

import torch
import transformers


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's and torch's global RNGs (a build is reproducible as a whole) and return a generator for
    the build's own draws."""
    random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


_BUILD_DEVICE = torch.device("cpu")


def build_device() -> torch.device:
    """The device the zoo's models are trained on (``mmspec zoo build --device``; CPU by default). Data is
    made on the CPU either way, so a build's data does not depend on the device."""
    return _BUILD_DEVICE


@contextlib.contextmanager
def building_on(device: str | torch.device | None):
    """Train inside the block on ``device``: a named but absent device is a ValueError, not a silent CPU run."""
    global _BUILD_DEVICE
    dev = torch.device(device or "cpu")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: no CUDA device is available here; build on the CPU (the default)")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {device}: zoo builds run on 'cpu' or 'cuda'")
    previous, _BUILD_DEVICE = _BUILD_DEVICE, dev
    # fp32 as on the CPU: cuDNN would otherwise run the VQ's and classifier's convolutions in TF32
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield dev
    finally:
        _BUILD_DEVICE = previous
        torch.backends.cudnn.allow_tf32 = tf32


def stable_bucket(key: str, buckets: int = 100) -> int:
    """Deterministic hash bucket (Python's hash() is salted per process)."""
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % buckets


def build_dir(home: Path, name: str) -> Path:
    """Where a model's training checkpoints live while it is being built (never shipped)."""
    return Path(home) / ".build" / name


def versions() -> dict:
    """The versions a built model records in its ``zoo.json``."""
    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__}


def logits_checksum(logits: torch.Tensor) -> dict:
    """A compact fingerprint of a forward pass, recorded at build time and checked by the tests."""
    x = logits.detach().double()
    return {"sum": float(x.sum()), "abs_sum": float(x.abs().sum()), "first": [float(v) for v in x.flatten()[:8]]}


@torch.no_grad()
def feature_checksum_output(net) -> torch.Tensor:
    """A feature drafter's fingerprint output: its feature heads on a fixed synthetic input (sequence of 6)."""
    net = net.eval()
    H = net.config.hidden_size
    g = torch.Generator().manual_seed(0)
    tokens, feats = torch.randn(1, 6, H, generator=g), torch.randn(1, 6, H, generator=g)
    h = net.body(inputs_embeds=net.fuse(tokens, feats)).last_hidden_state
    return net.heads(h)


__all__ = ["build_device", "building_on", "seed_everything", "stable_bucket", "build_dir", "versions", "logits_checksum", "feature_checksum_output"]
