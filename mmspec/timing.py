"""Wall-clock timing of the decoding loop's phases, through one helper."""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch


@contextmanager
def timed(record, *fields: str):
    """Add the seconds the block takes to each of ``record``'s float ``fields`` (e.g. a GenerationStats's
    ``"draft_time"``), also when the block raises."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - t0
        for name in fields:
            setattr(record, name, getattr(record, name) + elapsed)


def synchronize(device=None) -> None:
    """Wait until the GPU has run the work queued so far (no-op on a CPU): kernels run asynchronously, so a clock
    read without it can miss them. ``device``: a device or None (every CUDA device this process has used)."""
    if device is not None and torch.device(device).type != "cuda":
        return
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize(device)


__all__ = ["timed", "synchronize"]
