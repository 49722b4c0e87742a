"""An experiment, not shipped: the target's products over a few rows on a CPU, computed as W·xᵀ instead of x·Wᵀ.

A verification forward multiplies every weight matrix of the target by a few rows: the nodes of a short chain or
tree, a lookup branch, a small batch's plain step. ``nn.Linear`` asks MKL for x·Wᵀ, and for 2–10 rows MKL takes a path
that costs much more than the one-row product (on the zoo's 2-core VM the code target's 105 matrices, 44 MB, take
6.2 ms over one row, 8.2 ms over two and 9.5 ms over eight). Asked for W·xᵀ (the weights as the left operand, the
few rows as the narrow right one) the same products take 4.9 ms over two rows and 6.6 over eight; from about 12 rows
on the two orders cost the same (``products.py`` here). In decoding the gain mostly vanished (``ab_limits.py``):
the EAGLE chain of 8 +3%, ``dflash-lookup-cut`` none, so mmspec does not swap anything.

The product is the same sum over the same terms; MKL may add them in another order, so a logit can move in its last
bit, as it already does between the one-row product of plain decoding and the many-row one of any verification.
Greedy outputs are tested bit for bit against plain decoding like every other path.

:func:`few_row_products` swaps the forward of a model's ``nn.Linear`` modules (float32 weights on a CPU, nothing
already wrapping them) for the duration of a call and restores them after; products over one row, over more than
``MAX_ROWS`` rows, with gradients, or of any other dtype or device run ``F.linear`` as before.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

ENV_VAR = "MMSPEC_FEW_ROWS"  # "0" turns the swap off (the stock x·Wᵀ everywhere)
# W·xᵀ was faster over 2..MAX_ROWS rows on the zoo's 2-core VM, and over 16 (9.4 against 10.7 ms for the code
# target's matrices) though not over 12-15 (MKL's path for those is slower): those are padded to PAD_ROWS with zeros
MAX_ROWS = 11
PAD_ROWS = 16


def enabled() -> bool:
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def few_row_linear(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``module(x)``, as W·xᵀ when ``x`` holds 2 to ``PAD_ROWS`` rows without gradients (more than ``MAX_ROWS``
    padded to ``PAD_ROWS`` with zero rows, whose products are dropped)."""
    width = x.shape[-1]
    rows = x.numel() // width if width else 0
    if not 2 <= rows <= PAD_ROWS or x.dtype != module.weight.dtype or torch.is_grad_enabled():
        return F.linear(x, module.weight, module.bias)
    flat = x.reshape(rows, width)
    if rows > MAX_ROWS:
        flat = torch.cat([flat, flat.new_zeros(PAD_ROWS - rows, width)])
    y = torch.mm(module.weight, flat.t())[:, :rows].t().contiguous()
    if module.bias is not None:
        y += module.bias
    return y.view(*x.shape[:-1], module.out_features)


def _swappable(module: nn.Module) -> bool:
    return (type(module) is nn.Linear and "forward" not in module.__dict__  # (accelerate's hooks live there)
            and module.weight.device.type == "cpu" and module.weight.dtype == torch.float32)


@contextmanager
def few_row_products(model: nn.Module):
    """Within the block, ``model``'s float32 CPU ``nn.Linear`` modules compute few-row products as W·xᵀ
    (:func:`few_row_linear`). Re-entrant: a nested block leaves the modules the outer one swapped to it."""
    swapped = [m for m in model.modules() if _swappable(m)] if enabled() and isinstance(model, nn.Module) else []
    for m in swapped:
        m.forward = partial(few_row_linear, m)
    try:
        yield
    finally:
        for m in swapped:
            m.__dict__.pop("forward", None)
