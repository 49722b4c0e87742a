"""Which implementation of a kernel runs: the Triton version or the torch reference.

CUDA tensors go to Triton, anything else to the torch reference. ``MMSPEC_KERNELS`` overrides that:
``auto`` (default), ``torch`` (always the reference) or ``triton`` (always Triton; CPU tensors then need
the Triton interpreter, ``TRITON_INTERPRET=1``, which is how the tests run the kernels without a GPU).

The Triton modules are imported lazily, on the first call that needs them. ``TRITON_INTERPRET`` must be
set before Python starts: triton decides when its own library is imported (which torch and diffusers
already do) whether ``@triton.jit`` functions are compiled or interpreted.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from functools import lru_cache

import torch

ENV_VAR = "MMSPEC_KERNELS"
MODES = ("auto", "triton", "torch")


def requested_mode() -> str:
    """The value of ``MMSPEC_KERNELS`` (``auto`` when unset)."""
    mode = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"{ENV_VAR}={mode!r} is not one of {', '.join(MODES)}")
    return mode


def interpreting() -> bool:
    """True when Triton kernels run in the (CPU, numpy-based) interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


@lru_cache(maxsize=None)
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def backend_for_device(device: torch.device | str) -> str:
    """``"triton"`` or ``"torch"``: the implementation used for tensors on ``device``."""
    mode = requested_mode()
    if mode == "torch":
        return "torch"
    on_cuda = torch.device(device).type == "cuda"
    if mode == "triton":
        if not triton_available():
            raise RuntimeError(f"{ENV_VAR}=triton but the triton package is not installed")
        if not on_cuda and not interpreting():
            raise RuntimeError(
                f"{ENV_VAR}=triton with tensors on {torch.device(device)}: Triton runs CPU tensors only in its "
                "interpreter; set TRITON_INTERPRET=1 (slow, for tests) or use CUDA tensors"
            )
        return "triton"
    return "triton" if on_cuda and triton_available() else "torch"


def backend_for(*tensors: torch.Tensor) -> str:
    """The implementation for a kernel call on ``tensors`` (Triton only when all of them are on CUDA)."""
    devices = {t.device for t in tensors}
    if len(devices) == 1:
        return backend_for_device(next(iter(devices)))
    return "torch" if requested_mode() != "triton" else backend_for_device("cpu")


def triton_module(name: str):
    """``mmspec.kernels.<name>``, a module of ``@triton.jit`` kernels (imported on first use)."""
    return importlib.import_module(f"{__package__}.{name}")
