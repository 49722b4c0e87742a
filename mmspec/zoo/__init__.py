"""The tiny model zoo: small, genuinely trained models built offline from data every machine has.

``mmspec.zoo.load(name)`` returns a ready ``ZooEntry``; ``mmspec zoo build`` rebuilds the zoo.
Each family module (``code``, ``vlm``, ``image``) exposes ``NAMES``, ``build(home, micro, progress)``
and ``load(name, path)``. Models live in ``<zoo home>/<name>/`` with their weights (safetensors),
configs, tokenizer/processor, ``metrics.json`` and ``zoo.json`` (build facts, logits checksum).
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model_dirs import require_config
from .common import read_json, zoo_home
from .integrity import rebuild_hint, record_file_hashes, verify

FAMILIES = ("code", "vlm", "image")


@dataclass
class ZooEntry:
    name: str
    model: Any
    tokenizer: Any = None  # tokenizer, processor or VQ model, depending on the family
    config: dict = field(default_factory=dict)  # zoo.json: family, sizes, build facts
    path: Path | None = None
    extras: dict = field(default_factory=dict)


def family_module(family: str):
    if family not in FAMILIES:
        raise ValueError(f"unknown zoo family {family!r}; choose from {FAMILIES}")
    return importlib.import_module(f"{__name__}.{family}")


def family_of(name: str) -> str:
    for fam in FAMILIES:
        try:
            mod = family_module(fam)
        except ImportError:
            continue
        if name in mod.NAMES:
            return fam
    raise ValueError(f"unknown zoo model {name!r}; available: {available()}")


def available() -> list[str]:
    names = []
    for fam in FAMILIES:
        try:
            names.extend(family_module(fam).NAMES)
        except ImportError:
            pass
    return names


def load(name: str, home: str | Path | None = None) -> ZooEntry:
    """Load a zoo model by name from ``home`` (default: ``$MMSPEC_HOME`` or the checkout's ``zoo/``)."""
    root = Path(home) if home is not None else zoo_home()
    path = root / name
    if not path.is_dir():
        raise ValueError(f"zoo model {name!r} is not built in {root}; run `mmspec zoo build` (or set MMSPEC_HOME)")
    module = family_module(family_of(name))
    check_model_dir(name, path)
    try:
        return module.load(name, path)
    except Exception as exc:  # noqa: BLE001 - torn files, foreign formats: one message naming the fix
        raise ValueError(f"zoo model {name!r} in {path} cannot be loaded ({type(exc).__name__}: {exc}); "
                         f"{rebuild_hint(name)}") from exc


def check_model_dir(name: str, path: Path) -> dict:
    """Everything that can be checked before loading: zoo.json readable, recorded file hashes matching,
    the model's config file present. Returns zoo.json."""
    info = verify(name, path)
    require_config(path, f"zoo model {name!r}", ("config.json", "feature_drafter.json", "ngram.json"))
    return info


def metrics(name: str, home: str | Path | None = None) -> dict:
    root = Path(home) if home is not None else zoo_home()
    return read_json(root / name / "metrics.json")


def shipped_home() -> Path:
    """The checkout's own ``zoo/`` (what the repository ships)."""
    return Path(__file__).resolve().parents[2] / "zoo"


def build(family: str = "all", micro: bool = False, home: str | Path | None = None, progress: bool = True,
          only: list[str] | None = None, force: bool = False) -> dict:
    """Build one family or all of them (or just the models in ``only``, whose inputs must be built);
    returns {model name: metrics}. Every built model's ``zoo.json`` records its file hashes.

    A ``micro`` build (seconds-sized, nearly untrained) never replaces the shipped zoo unless ``force``:
    pass ``home`` (or set ``$MMSPEC_HOME``) to another folder."""
    root = Path(home) if home is not None else zoo_home()
    if micro and not force and root.resolve() == shipped_home().resolve():
        raise ValueError(f"a --micro build would overwrite the shipped zoo in {root} with barely trained models; "
                         f"pass --home DIR (or set MMSPEC_HOME) to build elsewhere, or --force to overwrite it")
    root.mkdir(parents=True, exist_ok=True)
    started = time.time()
    families = FAMILIES if family == "all" else (family,)
    if only:
        unknown = set(only) - set(available())
        if unknown:
            raise ValueError(f"unknown zoo models {sorted(unknown)}; available: {available()}")
        families = tuple(dict.fromkeys(family_of(n) for n in only))
    out = {}
    for fam in families:
        mod = family_module(fam)
        if only:
            out.update(mod.build(root, micro=micro, progress=progress, names=[n for n in only if n in mod.NAMES]))
        else:
            out.update(mod.build(root, micro=micro, progress=progress))
        for name in mod.NAMES:  # record hashes of what this build (re)wrote
            zoo_json = root / name / "zoo.json"
            if zoo_json.exists() and zoo_json.stat().st_mtime >= started - 1:
                record_file_hashes(root / name)
    return out


__all__ = ["ZooEntry", "load", "build", "check_model_dir", "shipped_home", "metrics", "available", "zoo_home", "FAMILIES"]
