"""Weight-only int8 matrix products for a small drafter on a CPU (gpt-fast's int8 weight-only quantisation).

On a CPU a drafter's step waits on memory: the target's forward just before it streams tens of MB through the cache,
so each of the drafter's small products reads its weights from DRAM again (on the zoo's 2-core VM a 704 × 256
float32 product over 19 rows takes 95 µs with the weights in cache and 230 µs without). Held as int8 with one scale
per output channel, the weights are a quarter of the bytes, and ``aten._weight_int8pack_mm`` multiplies bfloat16
rows by them: 175 µs cold, conversions included. Where several products read the same rows (a layer's q / k / v, its
gate / up) their weights are stacked into one matrix, one call. Products over more than ``MAX_INT8_ROWS`` rows (a
prefill, a batch's blocks) run in float32 on the same stacked weights: there the arithmetic, not the bytes, costs.

Only drafters use this. A draft is a guess: the verifier decides what is emitted from the target's own float
forward, so greedy outputs stay bit-exact and sampling stays lossless (a drafter's q is whatever it drafts from);
what int8 changes is which drafts are proposed, about as often as bfloat16 rounding flips a top token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_OP = getattr(torch.ops.aten, "_weight_int8pack_mm", None)
# the CPU kernel reads rows in steps of 8 values: other widths crash it (measured with torch 2.14), so they keep float
ROW_MULTIPLE = 8
# products over more rows than this run in float: the kernel's arithmetic is slower than MKL's float32 one, which wins
# once the bytes are no longer most of the cost (a 704 × 256 product from a cold cache on the zoo's 2-core VM, float
# against int8: 180 / 138 µs over 19 rows, 231 / 234 over 38, 289 / 347 over 64; a drafter's prefill and a batch's
# blocks are past it)
MAX_INT8_ROWS = 32


WEIGHTS = ("float", "int8", "auto")  # what a drafter's products compute with (its ``weights`` argument)
# "auto" quantises only drafters whose matrices hold at least this many float32 bytes: int8 pays where the weights
# fall out of the cache between steps. Side by side on the zoo's 2-core CPU (16 MB of L3;
# docs/runs/2026-11-28-cpu/int8-drafter/): code-dflash's 9.1 MB 1.562x -> 1.601x (HumanEval), image-dflash's 4.5 MB
# the same cost per step (spec, LANTERN++), vlm-dflash's 2.0 MB 2.817x -> 2.794x
AUTO_INT8_BYTES = 6 << 20


def wants_int8(weights: str, device, nbytes: int, fits: bool, what: str = "this drafter") -> bool:
    """Whether a drafter asked for ``weights`` ("float", "int8" or "auto") computes with int8 products: ``nbytes``,
    its matrices' float32 bytes; ``fits``, whether the kernel takes all of them. "int8" where it cannot is a
    ValueError naming why."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    if weights == "float":
        return False
    available = int8_available(device)
    if weights == "int8" and not (fits and available):
        why = (f"its device ({torch.device(device).type}) has no int8 weight-only kernel here" if not available else
               "its matrices have rows the int8 kernel does not take (multiples of 8 values, no biases)")
        raise ValueError(f"weights='int8': {what} cannot draft with int8 weights: {why}; use weights='float' or "
                         "'auto'")
    return fits and available and (weights == "int8" or nbytes >= AUTO_INT8_BYTES)


def int8_available(device) -> bool:
    """Whether weight-only int8 products run on ``device`` here (a CPU with the aten kernel)."""
    return _OP is not None and torch.device(device).type == "cpu"


def int8_fits(in_features: int) -> bool:
    """Whether the kernel takes rows of ``in_features`` values (else the product stays float)."""
    return in_features >= ROW_MULTIPLE and in_features % ROW_MULTIPLE == 0


class Int8Weight:
    """The weights of one or more linear maps over the same input, stacked by output rows, as int8 with a bfloat16
    scale per output row (symmetric, absmax / 127); calling it on ``x [..., K]`` returns ``[..., N]`` in ``x``'s
    dtype, the bias (float) added: through the int8 kernel over at most ``MAX_INT8_ROWS`` rows, else in float."""

    def __init__(self, *weights: torch.Tensor, bias: torch.Tensor | None = None):
        w = weights[0].detach().float() if len(weights) == 1 else torch.cat([t.detach().float() for t in weights], 0)
        w = w.contiguous()
        if not int8_fits(w.shape[1]):
            raise ValueError(f"int8 weights need rows of a multiple of {ROW_MULTIPLE} values, got {w.shape[1]}")
        scale = (w.abs().amax(1) / 127.0).clamp_min(1e-12)
        self.q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
        self.scales = scale.to(torch.bfloat16)
        self.bias = None if bias is None else bias.detach().float()
        self.splits = [t.shape[0] for t in weights]
        self.weight = w  # the stacked float weights, for products over more than MAX_INT8_ROWS rows

    @property
    def out_features(self) -> int:
        return self.q.shape[0]

    def dequantized(self) -> torch.Tensor:
        """The float weights the product computes with ([N, K]): what a test compares against."""
        return self.q.float() * self.scales.float()[:, None]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] > MAX_INT8_ROWS:  # (float: see MAX_INT8_ROWS)
            y = F.linear(rows, self.weight.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype))
            return y.view(*x.shape[:-1], self.out_features)
        if rows.shape[0] == 0:
            y = x.new_zeros(0, self.out_features)
        else:
            y = _OP(rows.to(torch.bfloat16).contiguous(), self.q, self.scales).to(x.dtype)
        y = y.view(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The product over ``x`` cut back into the stacked maps' outputs."""
        return torch.split(self(x), self.splits, dim=-1)


__all__ = ["AUTO_INT8_BYTES", "MAX_INT8_ROWS", "ROW_MULTIPLE", "WEIGHTS", "wants_int8", "int8_available", "int8_fits", "Int8Weight"]
