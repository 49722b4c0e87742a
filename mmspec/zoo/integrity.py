"""Zoo file integrity: a sha256 per file recorded in ``zoo.json`` (``files``) and checked on load.

A flipped bit in a weight file must not load and generate silently, and a truncated or missing file
must fail with the file's name and the fix, not a raw ``SafetensorError`` from deep inside a loader.
Hashes are memoised per (path, size, mtime) so loading the same model twice hashes it once (the most recent
``HASH_MEMO_SIZE`` files: a long-lived process rebuilding models does not grow it without end).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from functools import lru_cache
from pathlib import Path

from ..model_dirs import require_config

FILES_KEY = "files"
_UNHASHED_NAMES = {"zoo.json", "metrics.json"}  # zoo.json holds the hashes; metrics are a report, never loaded
_UNHASHED_SUFFIXES = {".png", ".md", ".pt", ".tmp"}  # pictures, notes, training checkpoints, torn writes
HASH_MEMO_SIZE = 1024  # more than the files of every zoo model together


def rebuild_hint(name: str) -> str:
    return f"rebuild it with `mmspec zoo build --only {name}` (or restore the file from the repository)"


def hashed_files(path: Path) -> list[Path]:
    """The files of a model directory that loading reads (everything but zoo.json, metrics and pictures)."""
    return sorted(p for p in Path(path).iterdir()
                  if p.is_file() and p.name not in _UNHASHED_NAMES and p.suffix not in _UNHASHED_SUFFIXES)


def sha256(path: Path) -> str:
    st = path.stat()
    return _sha256(str(path.resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=HASH_MEMO_SIZE)
def _sha256(resolved: str, size: int, mtime_ns: int) -> str:
    """The file's digest; size and mtime are part of the key, so a rewritten file is hashed again."""
    h = hashlib.sha256()
    with open(resolved, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_hashes(path: Path) -> dict[str, dict]:
    """{file name: {"sha256", "bytes"}} for :func:`hashed_files`."""
    return {p.name: {"sha256": sha256(p), "bytes": p.stat().st_size} for p in hashed_files(path)}


def record_file_hashes(path: Path) -> dict:
    """Add the file hashes of ``path`` to its ``zoo.json`` (every other key untouched); returns the record."""
    zoo_json = Path(path) / "zoo.json"
    info = json.loads(zoo_json.read_text())
    info[FILES_KEY] = file_hashes(path)
    zoo_json.write_text(json.dumps(info, indent=2) + "\n")  # key order kept: the diff shows only the hashes
    return info


def read_zoo_json(name: str, path: Path) -> dict:
    """``zoo.json`` as a dict, or one ValueError naming the file and the fix."""
    zoo_json = Path(path) / "zoo.json"
    try:
        info = json.loads(zoo_json.read_text())
    except FileNotFoundError:
        raise ValueError(f"zoo model {name!r}: {zoo_json} is missing; {rebuild_hint(name)}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"zoo model {name!r}: {zoo_json} is not valid JSON ({exc}); {rebuild_hint(name)}") from None
    if not isinstance(info, dict):
        raise ValueError(f"zoo model {name!r}: {zoo_json} is not a JSON object; {rebuild_hint(name)}")
    return info


def problems(path: Path, info: dict) -> list[str]:
    """What differs between the files of ``path`` and the hashes recorded in ``info`` (empty: all match)."""
    out = []
    recorded = info.get(FILES_KEY)
    if not isinstance(recorded, dict):
        return out
    for fname, want in sorted(recorded.items()):
        f = Path(path) / fname
        if not f.is_file():
            out.append(f"{f} is missing")
        elif f.stat().st_size != want.get("bytes"):
            out.append(f"{f} has {f.stat().st_size} bytes, {want.get('bytes')} recorded (truncated or replaced)")
        elif sha256(f) != want.get("sha256"):
            out.append(f"{f} differs from its recorded sha256 (corrupt or modified)")
    return out


def verify(name: str, path: Path) -> dict:
    """Check a zoo model directory before loading it; returns its zoo.json. Raises one ValueError
    naming every bad file and the fix."""
    info = read_zoo_json(name, path)
    bad = problems(path, info)
    if bad:
        raise ValueError(f"zoo model {name!r} is damaged: " + "; ".join(bad) + f". {rebuild_hint(name)}")
    return info


def check_model_dir(name: str, path: Path) -> dict:
    """Everything that can be checked before loading: zoo.json readable, recorded file hashes matching,
    the model's config file present. Returns zoo.json."""
    info = verify(name, path)
    require_config(path, f"zoo model {name!r}", ("config.json", "feature_drafter.json", "ngram.json"))
    return info


def changed_since_commit(home: Path) -> set[str]:
    """Models of a zoo folder inside a git checkout whose files differ from the committed (shipped) ones, e.g.
    rebuilt in place; empty when ``home`` is not tracked by git or git is not there."""
    home = Path(home).resolve()
    try:
        top = subprocess.run(["git", "-C", str(home), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=10)
        if top.returncode:
            return set()
        root = Path(top.stdout.strip()).resolve()
        out = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all", "--",
                              str(home)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return set()
    if out.returncode:
        return set()
    names = set()
    for line in out.stdout.splitlines():
        rel = Path(line[3:].split(" -> ")[-1].strip('"'))
        try:
            names.add((root / rel).resolve().relative_to(home).parts[0])
        except (ValueError, IndexError):
            continue
    return names


def status(name: str, path: Path, changed: bool = False) -> str:
    """One short line for ``zoo list`` / ``demo``: 'ok', 'micro build ...', 'damaged: FILE', 'differs from the
    committed model' (``changed``: see :func:`changed_since_commit`), 'no file hashes recorded'."""
    try:
        info = read_zoo_json(name, path)
    except ValueError:
        return "damaged: zoo.json unreadable"
    bad = problems(path, info)
    if bad:
        return "damaged: " + ", ".join(b.split(" ")[0].rsplit("/", 1)[-1] for b in bad)
    if info.get("micro"):
        return "micro build (not the shipped model)"
    if changed:
        return "differs from the committed (shipped) model"
    return "ok" if FILES_KEY in info else "no file hashes recorded"


__all__ = ["check_model_dir", "changed_since_commit", "FILES_KEY", "file_hashes", "record_file_hashes", "read_zoo_json", "verify", "problems", "status",
           "rebuild_hint", "hashed_files"]
