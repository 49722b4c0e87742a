"""What ``mmspec.pipeline`` runs for a zoo target given no drafter: the target's default method and, per method,
the zoo model that drafts it."""

from __future__ import annotations

from ..registry import CAUSAL_METHODS

# the fastest lossless method of each zoo target in `mmspec eval` (code: the confident chain, 1.8x against DEER's
# 1.1x on the 15-layer code target; vlm: the DFlash block drafter, 2.08x / 2.17x in two `mmspec eval --suite vlm
# --repeats 2` runs of 2026-11-26 against EAGLE's 1.86x / 1.92x and MSD's 1.82x / 1.78x)
ZOO_METHOD = {"code-target": "chain", "vlm-target": "dflash"}
ZOO_DRAFTERS = {
    "code-target": {"deer": "zoo:code-deer", "diffuspec": "zoo:code-dlm", "dflash": "zoo:code-dflash", "eagle": "zoo:code-eagle",
                    **{m: "zoo:code-drafter" for m in CAUSAL_METHODS}},
    "vlm-target": {"msd": "zoo:vlm-msd", "flash": "zoo:vlm-flash", "eagle": "zoo:vlm-eagle", "dflash": "zoo:vlm-dflash",
                   **{m: "zoo:vlm-drafter" for m in CAUSAL_METHODS}},
}


def zoo_default(target, method: str | None) -> tuple[str | None, str | None]:
    """(method, drafter spec) for a target given no drafter: a zoo target's default method and its zoo drafter
    (None for methods that draft without a model); other targets keep ``method`` and get no drafter."""
    if target.zoo not in ZOO_DRAFTERS:
        return method, None
    method = method or ZOO_METHOD[target.zoo]
    return method, ZOO_DRAFTERS[target.zoo].get(method)


__all__ = ["ZOO_METHOD", "ZOO_DRAFTERS", "zoo_default"]
