"""A run directory written all at once: the run writes into a hidden sibling and is renamed into place
when it has finished, so ``--out DIR`` always describes exactly one run.

A run that fails part-way leaves any earlier run in ``DIR`` untouched; a run that succeeds moves an earlier
run aside to ``DIR.prev-<timestamp>`` (and says so) instead of mixing its files with the new ones.

Every command that writes a folder of results (``mmspec eval``, ``image``, ``bench``, ``demo``) goes through
:class:`RunDirectory`; the one-process commands through :func:`run_folder`.
"""

from __future__ import annotations

import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

# what says a directory holds an mmspec run: eval's, image's, bench's (each suite's) and demo's own files
RUN_MARKERS = ("config.yaml", "results.json", "report.md",  # mmspec eval
               "stats.json",  # mmspec image
               "bench.json", "image_bench.json", "kernels_bench.json",  # mmspec bench
               "load.json", "code.json", "vlm.json", "image.json")  # mmspec demo


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
            raise ValueError(f"--out {f} is a non-empty directory that holds no mmspec run (none of "
                             f"{', '.join(RUN_MARKERS)}); choose a new or empty --out so nothing in it is replaced")

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


@contextmanager
def run_folder(out: str | Path, command: str) -> Iterator[RunDirectory]:
    """``with run_folder(args.out, "image") as run:`` write everything into ``run.staging`` (record and print
    ``run.final`` paths: the folder's name once it is in place). Checked and opened on entry (a file or a foreign
    non-empty ``out`` is refused before any work); on success the run is renamed into place and an earlier run
    moved aside, with a line saying where; on any exception the staging folder is removed and ``out`` stays as it
    was. A run that wrote nothing replaces nothing."""
    run = RunDirectory(out)
    run.open()
    try:
        yield run
    except BaseException:
        run.discard()
        raise
    if not any(run.staging.iterdir()):
        run.discard()
        return
    moved = run.commit()
    if moved is not None:
        print(f"mmspec {command}: the earlier run in {run.final} was moved to {moved}", file=sys.stderr)


__all__ = ["RunDirectory", "RUN_MARKERS", "run_folder"]
