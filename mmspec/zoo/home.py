"""Where the zoo lives, and its JSON records (``zoo.json``, ``metrics.json``, small configs) read and written
one way."""

from __future__ import annotations

import json
import os
from pathlib import Path


def shipped_home() -> Path:
    """The checkout's own ``zoo/`` (what the repository ships)."""
    return Path(__file__).resolve().parents[2] / "zoo"


def zoo_home() -> Path:
    """``$MMSPEC_HOME`` if set, else the ``zoo/`` folder of the repository checkout."""
    env = os.environ.get("MMSPEC_HOME")
    if env:
        return Path(env)
    return shipped_home()


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


__all__ = ["shipped_home", "zoo_home", "read_json", "write_json"]
