"""Sharding an eval over processes started by ``accelerate launch`` (or ``torchrun``), and merging them back.

Each process takes a contiguous slice of the items (``PartialState.split_between_processes``), runs every
method on it (its own warm-up, its own plain-decoding baseline), and writes its per-prompt records to
``<run>/shards/<suite>.rank<k>.json``; after a barrier the main process reads all of them and writes the one
report. Files rather than collective gathers: the records stay inspectable, and nothing about them needs to
fit a backend's object size. The run directory must be visible to every process (one machine, or a shared
filesystem).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch


class Processes:
    """This process's place in a launch; a lone process when none was launched."""

    def __init__(self):
        self.state = None
        self.rank, self.world = 0, 1
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            from accelerate import PartialState  # ~0.35 s to import: paid only by a multi-process launch

            # CPU-only machines: gloo (accelerate picks nccl only when CUDA is there)
            self.state = PartialState(cpu=not torch.cuda.is_available())
            self.rank, self.world = self.state.process_index, self.state.num_processes

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def device(self) -> str | None:
        """Where this process's models go when several processes share a machine's GPUs."""
        if self.state is None or not torch.cuda.is_available():
            return None
        return str(self.state.device)

    def barrier(self) -> None:
        if self.state is not None:
            self.state.wait_for_everyone()

    def shard(self, n: int) -> list[int]:
        """This process's item indices."""
        if self.state is None:
            return list(range(n))
        with self.state.split_between_processes(list(range(n))) as part:
            return list(part)

    def start(self, out: Path) -> None:
        """The main process clears old shard files before anyone writes new ones."""
        if self.is_main:
            shutil.rmtree(out / "shards", ignore_errors=True)
        self.barrier()

    def gather(self, out: Path, name: str, records: list[dict]) -> list[list[dict]] | None:
        """Every process's records, on the main process (None elsewhere)."""
        folder = out / "shards"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.rank{self.rank}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(records))
        tmp.replace(path)
        self.barrier()
        if not self.is_main:
            return None
        shards = []
        for k in range(self.world):
            f = folder / f"{name}.rank{k}.json"
            if not f.exists():
                raise ValueError(f"process {k} wrote no records for {name} ({f} missing)")
            shards.append(json.loads(f.read_text()))
        return shards


__all__ = ["Processes"]
