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


def device_name(device) -> str:
    """``device`` as a report names it: "cpu", or "cuda:0 (NVIDIA H200)" so a GPU figure names its card."""
    device = torch.device(device)
    if device.type != "cuda":
        return device.type
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


class TokenClock:
    """A streamer (HF's ``put`` / ``end`` protocol) that only notes when tokens arrive: the first ``put`` is the
    prompt, each later one a step's committed tokens. Its ``put`` gets tensors already copied to the host, so the
    arrival times include the device's work. One call per clock."""

    def __init__(self):
        self.start = time.perf_counter()
        self.arrivals: list[tuple[float, int]] = []  # (seconds since start, tokens in this put), prompt excluded
        self._prompt_seen = False

    def put(self, value) -> None:
        now = time.perf_counter() - self.start
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.arrivals.append((now, int(value.numel())))

    def end(self) -> None:
        pass

    def latency(self) -> tuple[float | None, float | None]:
        """(time to first token, time per output token after it) in seconds; None where undefined (no token; a
        single token has no TPOT)."""
        if not self.arrivals:
            return None, None
        first, last = self.arrivals[0][0], self.arrivals[-1][0]
        later = sum(n for _, n in self.arrivals) - 1  # tokens after the first one
        return first, (last - first) / later if later > 0 else None


__all__ = ["timed", "synchronize", "TokenClock"]
