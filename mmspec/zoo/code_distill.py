"""What the code family's drafters learn from and how their build measures them.

* :func:`target_data` — the distillation set: ``code-target``'s own greedy continuations of prefixes cut from
  the training modules (and a validation set from the validation modules), generated once in batches and kept
  under ``<home>/.build/code-distill/`` so an interrupted build does not redo it. Every drafter of the family
  trains on it: the AR drafter (next-token cross-entropy on the continuations), DiffuSpec's diffusion LM (the
  MDLM objective on whole rows) and DEER's Stages I and II.
* :func:`decode_tau` — τ (new tokens per target forward) of a drafter on held-out *validation* completion
  prompts, decoding greedily through the real engine: the figure each drafter's metrics record before and after
  its training stages (the bench suites use the test split).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from ..generator import SpeculativeGenerator
from ..training.artifact import cached
from ..training.deer import DEERConfig, Generations, target_generations
from .code_data import completion_prompts, load_corpus
from .home import read_json, write_json

GEN_LEN = 64  # target tokens per prefix
# 16k continuations (1M target tokens), generated in batches of 256, each batch saved as it finishes
# (target_generations(partial=...)), sized for 2 CPU cores (not yet timed on the 16-layer target). A GPU build made
# 65k rows (about 2 minutes on one H100); at 12k rows that build's DEER drafter had stalled (first-slot hit 37%),
# but its stages had also been stopped early by a loss-based rule (now selected on accepted length).
FULL = dict(n_train=16384, n_val=256, gen_len=GEN_LEN, prefix_min=16, prefix_max=160, gen_batch=256)
MICRO = dict(n_train=32, n_val=8, gen_len=16, prefix_min=8, prefix_max=24, gen_batch=16)
TAU_PROMPTS, TAU_TOKENS = 16, 64
MICRO_TAU_PROMPTS, MICRO_TAU_TOKENS = 2, 12


def data_config(micro: bool) -> DEERConfig:
    return DEERConfig(**(MICRO if micro else FULL))


def target_data(home: Path, target, streams: dict, micro: bool, progress: bool = True,
                seed: int = 2024) -> tuple[Generations, Generations]:
    """(train, val) target generations, cached in the build directory."""
    cfg = data_config(micro)
    work = Path(home) / ".build" / "code-distill"
    path = work / ("generations-micro.pt" if micro else "generations.pt")
    _check_target_stamp(Path(home), work)

    def make(split: str, n: int, split_seed: int) -> Generations:
        return target_generations(target, streams[split], n, cfg, split_seed, progress=progress,
                                  partial=work / f"{path.stem}-{split}.partial.pt")

    value = cached(path, lambda: (make("train", cfg.n_train, seed), make("val", cfg.n_val, seed + 1)))
    for split in ("train", "val"):  # the finished set is cached whole: the per-batch files are no longer needed
        (work / f"{path.stem}-{split}.partial.pt").unlink(missing_ok=True)
    return value


def _check_target_stamp(home: Path, work: Path) -> None:
    """The distillation set and every drafter checkpoint after it are the work of one ``code-target``: its
    checksum (zoo.json) is stamped beside them, and a rebuilt target finds them refused instead of silently
    distilling the old target's outputs into drafters for the new one."""
    zoo_json = home / "code-target" / "zoo.json"
    if not zoo_json.exists():
        return
    now = read_json(zoo_json).get("checksum")
    stamp = work / "target.json"
    if stamp.exists():
        then = read_json(stamp)
        if then != now:
            raise ValueError(f"{work} holds target generations of another code-target (checksum {then}, the "
                             f"target in {home / 'code-target'} now has {now}): delete {work} and the drafters' "
                             f"checkpoints under {home / '.build'} (all but code-target) to rebuild the drafters "
                             "against this target")
        return
    write_json(stamp, now)


def row_mask(data: Generations) -> torch.BoolTensor:
    """[N, width]: which positions of ``data.tokens`` hold the row (prefix then continuation; right padding
    after)."""
    col = torch.arange(data.tokens.shape[1])[None, :]
    return col < (data.prefix + data.gen_len)[:, None]


def continuation_mask(data: Generations) -> torch.BoolTensor:
    """[N, width]: the target-generated positions."""
    col = torch.arange(data.tokens.shape[1])[None, :]
    return (col >= data.prefix[:, None]) & row_mask(data)


def tau_prompts(tokenizer, micro: bool) -> list[torch.Tensor]:
    limit = MICRO_TAU_PROMPTS if micro else TAU_PROMPTS
    prompts = completion_prompts(load_corpus(micro=micro), "val", limit=limit)
    if not prompts:  # a micro corpus may hold no validation function: fall back to training ones
        prompts = completion_prompts(load_corpus(micro=micro), "train", limit=limit)
    return [tokenizer(p.prompt, return_tensors="pt", add_special_tokens=False).input_ids for p in prompts]


@torch.no_grad()
def decode_tau(target, make_drafter: Callable[[], object], prompts: list[torch.Tensor], micro: bool) -> float:
    """Σ new tokens / Σ target forwards over the prompts (greedy, exactly ``TAU_TOKENS`` tokens each)."""
    gen = SpeculativeGenerator(target, make_drafter())
    new = forwards = 0
    for ids in prompts:
        out = gen.generate(ids, max_new_tokens=MICRO_TAU_TOKENS if micro else TAU_TOKENS, eos_token_id=[])
        new += out.stats.new_tokens
        forwards += out.stats.target_forwards
    return new / max(forwards, 1)


__all__ = ["target_data", "row_mask", "continuation_mask", "tau_prompts", "decode_tau",
           "data_config", "GEN_LEN"]
