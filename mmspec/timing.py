"""Wall-clock timing of the decoding loop's phases, through one helper."""

from __future__ import annotations

import time
from contextlib import contextmanager


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


__all__ = ["timed"]
