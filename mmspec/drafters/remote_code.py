"""Checkpoints that ship their own modeling code (LLaDA, Dream, DiffuCoder): telling them apart, and saying
which file broke when that code does not run under the installed transformers.

Remote modeling files are written against the transformers of their day; under transformers 5 the public
Dream and LLaDA files fail in ways that surface deep inside transformers (a ``KeyError: 'default'`` from the
RoPE table, an ``AttributeError`` on ``all_tied_weights_keys``). :func:`explain_remote_failure` turns such an
error into a ValueError naming the checkpoint's modeling file, the line that failed where the traceback passes
through it, and the error itself.
"""

from __future__ import annotations

import contextlib
import json
import traceback
from pathlib import Path

import transformers


def auto_map(path) -> dict:
    """The ``auto_map`` of a checkpoint directory's config.json ({} when there is none)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return {}
    try:
        return dict(json.loads(config.read_text()).get("auto_map") or {})
    except (ValueError, AttributeError):
        return {}


def modeling_files(path) -> list[str]:
    """The Python files the ``auto_map`` points at (e.g. ``["configuration_dream.py", "modeling_dream.py"]``)."""
    files = []
    for ref in auto_map(path).values():
        ref = ref[0] if isinstance(ref, (list, tuple)) else ref
        if ref and "." in ref:
            name = ref.split("--")[-1].rsplit(".", 1)[0] + ".py"
            if name not in files:
                files.append(name)
    return files


def needs_trust(path) -> bool:
    return bool(auto_map(path))


def require_trust(path, trust_remote_code: bool, how: str = "trust_remote_code=True") -> None:
    """A ValueError unless the user said the checkpoint's own code may run."""
    if needs_trust(path) and not trust_remote_code:
        files = ", ".join(modeling_files(path)) or "its own Python files"
        raise ValueError(f"{path} ships its own modeling code ({files}), which runs only if you trust it: pass {how}")


def _remote_frame(exc: BaseException, files: list[str]):
    """The innermost traceback frame inside one of ``files`` (the dynamic-module copy has the same name)."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).name in files:
            found = frame
    return found


@contextlib.contextmanager
def explain_remote_failure(path, files: list[str] | None = None):
    """Re-raise errors of a remote-code checkpoint's loading or forward as a ValueError naming the file."""
    try:
        yield
    except (ImportError, AttributeError, KeyError, TypeError, NameError, RuntimeError, IndexError, ValueError) as exc:
        files = files if files is not None else modeling_files(path)
        if not files:
            raise
        frame = _remote_frame(exc, files)
        if isinstance(exc, ValueError) and frame is None:
            raise  # mmspec's own checks (and transformers') already name what is wrong
        where = (f"{Path(frame.filename).name}, line {frame.lineno} ({frame.line or frame.name})" if frame else
                 f"{' / '.join(files)} (the error was raised inside transformers while loading it)")
        raise ValueError(f"the remote modeling code of {path} does not run under transformers "
                         f"{transformers.__version__}: {where}: {type(exc).__name__}: {exc}. See the README section "
                         "'Remote-code diffusion drafters' for the known incompatibilities and their fixes") from exc


__all__ = ["auto_map", "modeling_files", "needs_trust", "require_trust", "explain_remote_failure"]
