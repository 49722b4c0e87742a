"""Tiny random-weight models the tests share. Their weights are sharpened (std 0.2 on every matrix): at the
default 0.02 init the logits are so flat that a wrong position, mask or cache entry still gives the same greedy
tokens, and an exactness test would pass by accident."""

import torch

from mmspec.tiny import tiny_model

VOCAB = 96


def sharpen(model, seed=0):
    """Redraw every matrix of ``model`` from N(0, 0.2) with its own generator (torch's global RNG untouched)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


def text_pair(arch="llama"):
    """A target (2 layers, seed 0) and a weaker drafter (1 layer, seed 1) of one architecture, sharing a
    ``VOCAB``-token vocabulary."""
    return (sharpen(tiny_model(arch, seed=0, vocab_size=VOCAB), seed=0),
            sharpen(tiny_model(arch, seed=1, vocab_size=VOCAB, num_layers=1), seed=1))
