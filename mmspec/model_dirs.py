"""Checks on a local model directory before any loader sees it.

Without ``config.json`` transformers' explicit model classes build a default-sized model (a 7B Llama:
tens of GB of memory, the process killed) instead of failing, and the Auto classes fail with a message
about the Hub. Every place mmspec loads a directory asks here first.
"""

from __future__ import annotations

from pathlib import Path


def require_config(path, what: str = "model", config_names: tuple[str, ...] = ("config.json",)) -> Path:
    """``path`` as a Path if it is a directory holding one of ``config_names``; else one clear ValueError.
    Paths that are not local directories pass through (a Hub id resolved from the local cache)."""
    p = Path(path)
    if p.is_dir() and not any((p / name).is_file() for name in config_names):
        wanted = " or ".join(config_names)
        raise ValueError(f"{what} directory {p} has no {wanted}: it is not a saved model (save it with "
                         f"save_pretrained, or point to the directory that holds {config_names[0]})")
    return p


__all__ = ["require_config"]
