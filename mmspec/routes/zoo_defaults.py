"""What ``mmspec.pipeline`` runs for a zoo target given no drafter: the target's default method (per kind of call:
greedy, and sampling where it differs), the settings a zoo method runs with when the caller gives none, and, per
method, the zoo model that drafts it."""

from __future__ import annotations

from ..registry import CAUSAL_METHODS, DFLASH_LOOKUP_CUT

# the fastest lossless method of each zoo target in `mmspec eval`. code, greedy: the DFlash DDTree with a prompt-lookup
# branch (2.53-3.03x in three `mmspec eval --suite code --repeats 2` runs of 2026-11-26, against EAGLE's 2.00-2.29x and
# the confident AR chain's 1.93-2.19x), where a lookup continuation of 4 tokens or more after a match of 2 tokens or
# more is verified alone and the tree stops at prefixes below 3% (DFLASH_LOOKUP_CUT). Under the adaptive policy that
# trailed the plain grafted tree while any match sent a step alone (2.21-2.24x against 2.34-2.49x at one row,
# docs/runs/2026-11-27-cpu/code-sweep-16..20.md); since lone steps need a two-token match (ALONE_MATCH) it leads at
# every batch size that drafts (two `mmspec bench --suite code --prompts 16` sweeps of 2026-11-28: 2.56 / 2.64x against
# 2.37 / 2.44x at one row, 2.12 / 2.20x against 2.02 / 2.05x at two, 1.50x against 1.49x at four,
# docs/runs/2026-11-28-cpu/default-sweep-{1,2}); code, sampling: the EAGLE-style feature drafter's chain (code-eagle),
# ahead of the confident AR chain in every `mmspec eval --suite code --do-sample --temperature 1.0 --repeats 2` run:
# 0.96x / 0.95x (2026-11-26), 1.14x / 1.02x and 1.04x / 1.01x (2026-11-28, docs/runs/2026-11-28-cpu/
# code-sampling-t1-3, -4), the DFlash trees 0.89-0.93x (independent draws from each slot's q rarely make a chain the
# target keeps).
# vlm: the DFlash block drafter (2.08x / 2.17x in two `mmspec eval --suite vlm --repeats 2` runs of 2026-11-26
# against EAGLE's 1.86x / 1.92x and MSD's 1.82x / 1.78x)
ZOO_METHOD = {"code-target": "dflash", "vlm-target": "dflash"}
ZOO_SAMPLING_METHOD = {"code-target": "eagle"}  # a sampling call's method where it is not ZOO_METHOD's
# (target, method): the settings the zoo's drafter runs with when the caller sets none of the method's shape
ZOO_SETTINGS = {("code-target", "dflash"): DFLASH_LOOKUP_CUT}
ZOO_DRAFTERS = {
    "code-target": {"deer": "zoo:code-deer", "diffuspec": "zoo:code-dlm", "dflash": "zoo:code-dflash", "eagle": "zoo:code-eagle",
                    **{m: "zoo:code-drafter" for m in CAUSAL_METHODS}},
    "vlm-target": {"msd": "zoo:vlm-msd", "flash": "zoo:vlm-flash", "eagle": "zoo:vlm-eagle", "dflash": "zoo:vlm-dflash",
                   **{m: "zoo:vlm-drafter" for m in CAUSAL_METHODS}},
}
SHAPE_OPTIONS = ("num_tokens", "tree", "tree_nodes", "lookup", "block")  # what decides a drafter's draft shape


def zoo_default(target, method: str | None) -> tuple[str | None, str | None]:
    """(method, drafter spec) for a target given no drafter: a zoo target's default method and its zoo drafter
    (None for methods that draft without a model); other targets keep ``method`` and get no drafter."""
    if target.zoo not in ZOO_DRAFTERS:
        return method, None
    method = method or ZOO_METHOD[target.zoo]
    return method, ZOO_DRAFTERS[target.zoo].get(method)


def zoo_settings(target, method: str, options: dict) -> dict:
    """``options`` with the zoo's tuned settings of ``method`` on ``target`` filled in where the caller set none, when
    the caller set none of the options that shape its drafts (e.g. the code target's ``dflash``: a DDTree of 16 nodes
    with a prompt-lookup branch of 12, not the whole block's chain; a caller's own ``lookup_alone`` or ``tree_cut``
    is kept)."""
    tuned = ZOO_SETTINGS.get((target.zoo, method))
    if tuned is None or any(options.get(k) is not None for k in SHAPE_OPTIONS):
        return options
    return {**options, **{k: v for k, v in tuned.items() if options.get(k) is None}}


def zoo_sampling_method(target, drafter, method: str | None, given: list[str]) -> str | None:
    """The method a sampling call runs when the caller named neither a drafter nor a method and set no option
    but ``adaptive`` (``given``: the options set): the zoo target's own sampling default, else None (the
    pipeline's method serves every call)."""
    if drafter is not None or method is not None or set(given) - {"adaptive"}:
        return None
    return ZOO_SAMPLING_METHOD.get(target.zoo)


__all__ = ["ZOO_METHOD", "ZOO_SAMPLING_METHOD", "ZOO_SETTINGS", "ZOO_DRAFTERS", "SHAPE_OPTIONS", "zoo_default",
           "zoo_settings", "zoo_sampling_method"]
