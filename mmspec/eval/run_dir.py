"""A run directory written all at once: the run writes into a hidden sibling and is renamed into place
when it has finished, so ``--out DIR`` always describes exactly one run.

A run that fails part-way leaves any earlier run in ``DIR`` untouched; a run that succeeds moves an earlier
run aside to ``DIR.prev-<timestamp>`` (and says so) instead of mixing its files with the new ones.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

RUN_MARKERS = ("config.yaml", "results.json", "report.md")  # what says a directory holds an mmspec run


class RunDirectory:
    def __init__(self, final: str | Path):
        self.final = Path(final).absolute()
        if not self.final.name:
            raise ValueError(f"--out {final!r} names no directory")
        self.staging = self.final.parent / f".{self.final.name}.partial"

    def check(self) -> None:
        """Refuse what would lose or mix data: an existing file, or a non-empty directory that is no run."""
        f = self.final
        if f.exists() and not f.is_dir():
            raise ValueError(f"--out {f} exists and is a file, not a run directory; choose another --out")
        if f.is_dir() and any(f.iterdir()) and not any((f / m).exists() for m in RUN_MARKERS):
            raise ValueError(f"--out {f} is a non-empty directory that holds no mmspec run (no config.yaml or "
                             f"results.json); choose a new or empty --out so nothing in it is replaced")

    def open(self) -> Path:
        """Check, then create an empty staging directory (main process only); returns it."""
        self.check()
        try:
            shutil.rmtree(self.staging, ignore_errors=True)  # a torn earlier attempt
            self.staging.mkdir(parents=True)
        except OSError as exc:
            raise ValueError(f"cannot create the run directory next to {self.final} ({exc.strerror or exc}); "
                             f"choose a writable --out") from None
        return self.staging

    def commit(self) -> Path | None:
        """Move an earlier run aside (returned) and rename the finished run into place."""
        moved = None
        if self.final.is_dir() and any(self.final.iterdir()):
            moved = self.final.with_name(f"{self.final.name}.prev-{time.strftime('%Y%m%d-%H%M%S')}")
            n = 1
            while moved.exists():
                moved, n = moved.with_name(f"{moved.name.split('~')[0]}~{n}"), n + 1
            self.final.rename(moved)
        elif self.final.is_dir():
            self.final.rmdir()
        self.staging.rename(self.final)
        return moved

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


__all__ = ["RunDirectory", "RUN_MARKERS"]
