"""What ``mmspec train ...`` leaves behind, and how a killed run comes back.

* The output is one self-describing directory: the weights plus ``mmspec.json`` (kind, method, logits
  convention, mask id, target identity, the settings it was trained with), so ``mmspec.pipeline``, the
  generators and ``mmspec eval`` use it with the right method without being told.
* It is written atomically: everything goes to a hidden sibling directory that is renamed into place at the
  end, so ``--out`` holds either the previous drafter or the new one, never half of one.
* While training, ``<out>.ckpt/`` holds the run's settings, its expensive data (target generations) and one
  :func:`~mmspec.training.loop.train_loop` checkpoint per stage; ``--resume`` continues from them and they are
  removed once the output is in place.
* That folder is created only when training starts (:func:`begin_run`, after every check of the command), so a
  command refused on its arguments, data or target leaves nothing behind; and a folder holding no checkpoint yet
  (a run that failed before saving one) is no run to resume: the next run replaces it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable

from ..loading import RECORD
from ..verifiers.tree_forward import text_config
from ..zoo import zoo_home
from .loop import load_checkpoint, save_checkpoint

FORMAT = 1


def checkpoint_dir(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".ckpt")


SETTINGS = "run.json"  # the run's settings, written when training starts; every other file is a checkpoint


def has_checkpoints(ckpt: str | Path) -> bool:
    """Whether ``ckpt`` holds anything a resumed run would continue from (anything but the run's settings)."""
    ckpt = Path(ckpt)
    return ckpt.is_dir() and any(f.name != SETTINGS for f in ckpt.iterdir())


def prepare_run(out: str | Path, resume: bool, settings: dict) -> Path:
    """Check ``--out`` and the checkpoints before any work; returns the checkpoint directory, which is not
    created here (:func:`begin_run` creates it when training starts).

    ``settings`` (JSON-able) are recorded with the checkpoints: resuming with other settings would mix two
    runs, so it is refused naming what differs. A checkpoint directory without checkpoints (a run that failed
    before saving any) does not block a fresh run."""
    out = Path(out)
    if out.exists() and not (out.is_dir() and ((out / RECORD).exists() or not any(out.iterdir()))):
        raise ValueError(f"--out {out} exists and is not the output of an earlier `mmspec train`: choose a new "
                         "directory (an earlier training output there is replaced only when the new one is complete)")
    ckpt = checkpoint_dir(out)
    saved = ckpt / SETTINGS
    settings = json.loads(json.dumps(settings, default=str))
    if ckpt.exists() and not ckpt.is_dir():
        raise ValueError(f"{ckpt} (where the checkpoints of --out {out} go) is a file: move it away")
    if has_checkpoints(ckpt) and not resume:
        raise ValueError(f"{ckpt} holds the checkpoints of an interrupted run into {out}: pass --resume to continue "
                         "it, or delete that directory to start over")
    if resume and has_checkpoints(ckpt) and saved.exists():
        before = json.loads(saved.read_text())
        differ = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
        if differ:
            raise ValueError(f"--resume: the checkpoints in {ckpt} were written with other settings "
                             f"({', '.join(f'{k}: {before.get(k)!r} then, {settings.get(k)!r} now' for k in differ)})")
    parent = ckpt.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        raise ValueError(f"cannot write checkpoints next to --out ({ckpt}): {parent} is not writable")
    return ckpt


def begin_run(ckpt: str | Path, settings: dict) -> Path:
    """Training starts: create ``ckpt`` (replacing one that holds no checkpoint) and record ``settings`` there.
    Call it after every check of the command, right before the first work worth resuming."""
    ckpt = Path(ckpt)
    settings = json.loads(json.dumps(settings, default=str))
    try:
        if ckpt.is_dir() and not has_checkpoints(ckpt):
            shutil.rmtree(ckpt)  # a run that never saved a checkpoint: nothing to continue
        ckpt.mkdir(parents=True, exist_ok=True)
        (ckpt / SETTINGS).write_text(json.dumps(settings, indent=2, sort_keys=True))
    except OSError as err:
        raise ValueError(f"cannot write checkpoints next to --out ({ckpt}): {err.strerror or err}") from None
    return ckpt


def cached(path: Path | None, make: Callable[[], object]):
    """``make()``, kept in ``path`` (torch.save, atomic) so a resumed run does not redo it."""
    if path is None:
        return make()
    saved = load_checkpoint(path)
    if saved is not None:
        return saved["value"]
    value = make()
    save_checkpoint(path, {"value": value})
    return value


def write_artifact(out: str | Path, save: Callable[[Path], None], record: dict) -> Path:
    """``save(dir)`` writes the weights; ``record`` becomes ``mmspec.json``. The directory appears at ``out``
    complete or not at all; an earlier training output there is replaced. The checkpoints go afterwards."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.partial")
    old = out.with_name(f".{out.name}.old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save(tmp)
    (tmp / RECORD).write_text(json.dumps({"format": FORMAT, **record}, indent=2, default=str) + "\n")
    if out.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)
    shutil.rmtree(checkpoint_dir(out), ignore_errors=True)
    return out


def target_identity(spec: str, model) -> dict:
    """Enough to tell later which target a drafter was trained against."""
    cfg = text_config(model)
    ident = {"spec": str(spec), "class": type(model).__name__, "vocab_size": int(cfg.vocab_size),
             "hidden_size": int(getattr(cfg, "hidden_size", 0) or 0),
             "num_hidden_layers": int(getattr(cfg, "num_hidden_layers", 0) or 0)}
    if str(spec).startswith("zoo:"):
        zoo_json = zoo_home() / str(spec).split(":", 1)[1] / "zoo.json"
        if zoo_json.exists():
            ident["zoo_checksum"] = json.loads(zoo_json.read_text()).get("checksum", {}).get("sum")
    return ident


def stage_checkpoint(ckpt: Path | None, stage: int) -> Path | None:
    return None if ckpt is None else Path(ckpt) / f"stage{stage}.pt"


__all__ = ["checkpoint_dir", "has_checkpoints", "prepare_run", "begin_run", "cached", "write_artifact", "target_identity", "stage_checkpoint"]
