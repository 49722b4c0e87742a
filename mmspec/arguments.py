"""Keyword checks for the public ``generate`` methods: a misspelt or foreign option (``foo=1``,
``num_beams=2``) is an error naming it, never silently dropped or passed on."""

from __future__ import annotations

import inspect


def accepted_names(func) -> list[str]:
    """The named parameters of ``func`` (``self`` and ``*args`` / ``**kwargs`` left out)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in inspect.signature(func).parameters.values() if p.kind in kinds and p.name != "self"]


def reject_unknown(kwargs: dict, func, where: str = "generate") -> None:
    """Raise one ValueError naming every key of ``kwargs`` that ``func`` does not take."""
    names = accepted_names(func)
    unknown = sorted(k for k in kwargs if k not in names)
    if unknown:
        raise ValueError(f"{where} got unknown keyword argument(s) {unknown}; it takes {names}")


__all__ = ["reject_unknown", "accepted_names"]
