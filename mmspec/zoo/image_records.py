"""How the image family's builders record a built model (``metrics.json`` with its size on disk, ``zoo.json``
with the family's facts) and check that the models a build starts from are there."""

from __future__ import annotations

from pathlib import Path

import diffusers

from .common import versions as common_versions
from .home import write_json
from .integrity import check_model_dir

FAMILY = "image"
SEED = 1234  # the family's seed, recorded in every model's zoo.json


def versions() -> dict:
    return {**common_versions(), "diffusers": diffusers.__version__}


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2 ** 20


def write_records(home: Path, name: str, metrics: dict, facts: dict, micro: bool) -> dict:
    """Write ``metrics.json`` (with ``weights_mb``) and ``zoo.json`` (the family's facts, then ``facts``) of a
    model saved in ``home/name``; returns the metrics written."""
    path = home / name
    metrics = dict(metrics, weights_mb=round(dir_mb(path), 3))
    write_json(path / "metrics.json", metrics)
    write_json(path / "zoo.json", {"family": FAMILY, "name": name, "micro": micro, "seed": SEED, **versions(),
                                   **facts})
    return metrics


def require_built(home: Path, name: str, wanted: str) -> Path:
    """``home/name``, checked like a load would; a ValueError naming the missing input when building ``wanted``
    needs it."""
    path = home / name
    if not (path / "zoo.json").exists():
        raise ValueError(f"building {wanted} needs {name} in {home}; build it first (`mmspec zoo build --only "
                         f"{name}`) or build the image family as a whole")
    check_model_dir(name, path)
    return path


__all__ = ["FAMILY", "SEED", "versions", "dir_mb", "write_records", "require_built"]
