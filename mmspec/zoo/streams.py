"""Token streams of the zoo's causal LMs (code family, diffusion drafters): a corpus as one stream, random
training windows from it, fixed held-out windows, and their next-token loss.

Streams and windows are always made on the CPU (a build's data does not depend on the device it trains on);
:func:`mean_loss` moves each chunk to the model's device, and ``train_loop`` does the same for training batches."""

from __future__ import annotations

from typing import Iterator

import torch
from transformers import PreTrainedTokenizerFast

from ..training.loop import model_device


def token_stream(tok: PreTrainedTokenizerFast, texts: list[str]) -> torch.Tensor:
    """All files concatenated, each followed by <eos>."""
    ids = tok(texts, add_special_tokens=False).input_ids
    flat = [t for doc in ids for t in doc + [tok.eos_token_id]]
    return torch.tensor(flat, dtype=torch.long)


def batches(data: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless random windows of ``seq_len + 1`` tokens from a 1-D token stream."""
    n = data.numel() - seq_len - 1
    while True:
        idx = torch.randint(0, n, (batch_size,), generator=generator)
        yield torch.stack([data[i: i + seq_len + 1] for i in idx.tolist()])


def fixed_windows(stream: torch.Tensor, n: int, seq_len: int) -> torch.Tensor:
    """Non-overlapping evaluation windows from the start of a stream (deterministic)."""
    n = max(1, min(n, (stream.numel() - 1) // seq_len))
    return torch.stack([stream[i * seq_len: i * seq_len + seq_len + 1] for i in range(n)])


def next_token_loss(model, batch: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=batch[:, :-1]).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1))


@torch.no_grad()
def mean_loss(model, windows: torch.Tensor, batch: int = 16) -> float:
    """Mean next-token loss over (CPU-made) ``windows``, run ``batch`` rows at a time on the model's device.
    The chunks' losses are read back only after all of them are queued (one host sync, not one per chunk);
    the sum is the same Python float sum, in the same order, as reading each one at once."""
    device = model_device(model)
    losses = []
    for i in range(0, windows.shape[0], batch):
        chunk = windows[i: i + batch]
        losses.append((next_token_loss(model, chunk.to(device)), chunk.shape[0]))
    total, count = 0.0, 0
    for loss, rows in losses:
        total += float(loss) * rows
        count += rows
    return total / count


__all__ = ["token_stream", "batches", "fixed_windows", "next_token_loss", "mean_loss"]
