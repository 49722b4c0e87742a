"""``mmspec zoo build``: trains the zoo's families (or chosen models) and records every built model's file hashes.

Each family's builder module (``code``, ``vlm``, ``image``) exposes ``NAMES``, ``build(home, micro, progress,
names)`` and ``checksum(entry)`` (the logits fingerprint recorded in ``zoo.json``).
"""

from __future__ import annotations

import time
from pathlib import Path

from . import FAMILIES, available, code, family_of, image, vlm
from .common import building_on
from .entry import ZooEntry
from .home import shipped_home, zoo_home
from .integrity import record_file_hashes

BUILDERS = {"code": code, "vlm": vlm, "image": image}


def family_module(family: str):
    """The builder module of one family."""
    if family not in BUILDERS:
        raise ValueError(f"unknown zoo family {family!r}; choose from {FAMILIES}")
    return BUILDERS[family]


def checksum(entry: ZooEntry) -> dict:
    """Recompute the fingerprint a model's ``zoo.json`` records (its family's logits of a fixed input)."""
    return family_module(family_of(entry.name)).checksum(entry)


def build(family: str = "all", micro: bool = False, home: str | Path | None = None, progress: bool = True,
          only: list[str] | None = None, force: bool = False, device: str | None = None) -> dict:
    """Build one family or all of them (or just the models in ``only``, whose inputs must be built);
    returns {model name: metrics}. Every built model's ``zoo.json`` records its file hashes.

    A ``micro`` build (seconds-sized, nearly untrained) never replaces the shipped zoo unless ``force``:
    pass ``home`` (or set ``$MMSPEC_HOME``) to another folder. ``device`` ("cuda") trains on a GPU; data,
    checkpoints and the shipped files are the same kind either way, and a build resumes on either device."""
    root = Path(home) if home is not None else zoo_home()
    if micro and not force and root.resolve() == shipped_home().resolve():
        raise ValueError(f"a --micro build would overwrite the shipped zoo in {root} with barely trained models; "
                         f"pass --home DIR (or set MMSPEC_HOME) to build elsewhere, or --force to overwrite it")
    started = time.time()
    families = FAMILIES if family == "all" else (family,)
    if only:
        unknown = set(only) - set(available())
        if unknown:
            raise ValueError(f"unknown zoo models {sorted(unknown)}; available: {available()}")
        families = tuple(dict.fromkeys(family_of(n) for n in only))
    out = {}
    with building_on(device):  # an absent device is refused before anything is written
        root.mkdir(parents=True, exist_ok=True)
        for fam in families:
            out.update(_build_family(family_module(fam), root, micro, progress, only, started))
    return out


def _build_family(mod, root: Path, micro: bool, progress: bool, only: list[str] | None, started: float) -> dict:
    names = [n for n in only if n in mod.NAMES] if only else None
    out = mod.build(root, micro=micro, progress=progress, names=names)
    for name in mod.NAMES:  # record hashes of what this build (re)wrote
        zoo_json = root / name / "zoo.json"
        if zoo_json.exists() and zoo_json.stat().st_mtime >= started - 1:
            record_file_hashes(root / name)
    return out


__all__ = ["BUILDERS", "family_module", "checksum", "build"]
