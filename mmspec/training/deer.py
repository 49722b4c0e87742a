"""DEER's two-stage alignment of a diffusion drafter to its AR target (Cheng et al., 2025, Sec. 3.2).

Data: the target's own greedy continuations of prefixes cut from the training corpus.

* **Stage I — continuation distillation**: cut a target continuation at a random point u, mask the rest
  (at most ``k_max`` tokens: the longest block the drafter is asked for), cross-entropy on the masked
  continuation slots. Rows are weighted by 1/t, t = the masked share of the continuation (the
  diffusion ELBO's weight).
* **Stage II — scribe refinement**: mask only the last R ~ U(1, R_max) tokens of a cut continuation and
  weight slot i (1 = right after the prefix) by α^(R−i), α = 1.01, so the first slots — the ones every
  accepted run goes through — matter most.

The attention pattern is the one the drafter runs with at inference (``"cache"`` by default: the clean
prefix causal, the block seeing everything), so the KV-cached drafter is exactly what was trained.

Devices: generations, batches and their random draws are made on the CPU (so seeded data is the same whatever
the models run on); they meet a model only on its device (:func:`~mmspec.training.loop.on_model`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoModel, AutoTokenizer

from ..drafters.remote_code import explain_remote_failure, modeling_files, needs_trust, require_trust
from ..layer_masks import attention_layout
from ..loading import load_target
from ..verifiers.tree_forward import DIRECT_CLASSES
from .artifact import cached, stage_checkpoint
from .dlm import block_agreement, block_loss, teacher_slot_logp
from .loop import TrainResult, load_checkpoint, on_model, save_checkpoint, train_loop


@dataclass
class DEERConfig:
    k_max: int = 32  # longest draft block trained for
    gen_len: int = 64  # target tokens generated per prefix
    prefix_min: int = 16
    prefix_max: int = 160
    n_train: int = 3072
    n_val: int = 128
    gen_batch: int = 64
    r_max: int = 32  # Stage II: R ~ U(1, r_max) (the paper's 96, scaled to this block length)
    alpha: float = 1.01
    batch_size: int = 16
    lr: float = 3e-4
    stage1_steps: int = 600
    stage1_budget_s: float = 600.0
    stage2_steps: int = 300
    stage2_budget_s: float = 300.0
    eval_every: int = 100
    patience: int = 3
    # which held-out figure picks the kept weights and stops a stage: "accepted" = the mean greedy-accepted length
    # of a k_max block after each validation prefix (what the alignment is for; deterministic), or "loss" = the
    # stage's own weighted loss. In the zoo's first 65k-row build the Stage I loss, whose 1/t weights let a few
    # rows dominate, stopped Stage I after 800 of 8000 steps while the accepted length was still rising.
    select: str = "accepted"
    clean_weight: float = 0.0  # beyond the paper: next-token loss on the clean prefix (see dlm.block_loss)
    distill: bool = False  # beyond the paper: KL to the target's distributions instead of CE on its tokens
    pattern: str = "cache"
    convention: str = "dream"
    seed: int = 4321


@dataclass
class Generations:
    """Target continuations: ``tokens[i, :prefix[i] + gen_len]`` (prefix then continuation)."""

    tokens: torch.Tensor  # [N, prefix_max + gen_len], right padded
    prefix: torch.Tensor  # [N]
    gen_len: int

    def __len__(self) -> int:
        return self.tokens.shape[0]


def _generation_cache(target) -> dict:
    """A preallocated K/V cache for the stock full-attention families (a growing cache re-copies every layer's K/V
    at each generated step: 64 rows x 64 tokens of a 4-layer model 10-20% slower on a CPU, same tokens); other
    models keep ``generate``'s own choice."""
    if type(target).__name__ in DIRECT_CLASSES and attention_layout(target.config).window is None:
        return {"cache_implementation": "static"}
    return {}


@torch.no_grad()
def target_generations(target, stream: torch.Tensor, n: int, cfg: DEERConfig, seed: int, pad_id: int = 0,
                       progress: bool = True, partial: Path | None = None) -> Generations:
    """``n`` greedy continuations of ``cfg.gen_len`` tokens from random windows of a token stream; each
    generation batch shares one prefix length (no padding). Prompts are drawn on the CPU and generated on the
    target's device; the generations come back to the CPU (they are data, cached with ``torch.save``).

    With ``partial`` every finished batch is saved there with the prompt generator's state, and a later call
    with the same path goes on from the first missing batch: a killed CPU run (an hour for the zoo's 16-layer
    target) loses at most one batch, and the resumed rows are the ones an uninterrupted run draws."""
    g = torch.Generator().manual_seed(seed)
    width = cfg.prefix_max + cfg.gen_len
    tokens = torch.full((n, width), pad_id, dtype=torch.long)
    prefix = torch.zeros(n, dtype=torch.long)
    done = 0
    identity = {"n": n, "seed": seed, "width": width, "gen_len": cfg.gen_len, "gen_batch": cfg.gen_batch,
                "prefix": (cfg.prefix_min, cfg.prefix_max), "stream": int(stream.numel())}
    saved = load_checkpoint(partial) if partial is not None else None
    if saved is not None:
        if saved["identity"] != identity:
            raise ValueError(f"partial generations {partial} were made with other settings "
                             f"({saved['identity']} against {identity}); delete the file to start over")
        tokens, prefix, done = saved["tokens"], saved["prefix"], saved["done"]
        g.set_state(saved["generator"])
    target.eval()
    bar = tqdm(total=n, initial=done, desc="target generations", disable=not progress)
    while done < n:
        b = min(cfg.gen_batch, n - done)
        p = int(torch.randint(cfg.prefix_min, cfg.prefix_max + 1, (1,), generator=g))
        starts = torch.randint(0, stream.numel() - p - 1, (b,), generator=g)
        ids = on_model(torch.stack([stream[s: s + p] for s in starts.tolist()]), target)
        out = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=cfg.gen_len, eos_token_id=None, pad_token_id=pad_id,
                              **_generation_cache(target))
        tokens[done: done + b, : p + cfg.gen_len] = out[:, : p + cfg.gen_len].cpu()
        prefix[done: done + b] = p
        done += b
        if partial is not None:
            save_checkpoint(partial, {"identity": identity, "tokens": tokens, "prefix": prefix, "done": done,
                                      "generator": g.get_state()})
        bar.update(b)
    bar.close()
    return Generations(tokens, prefix, cfg.gen_len)


def stage1_batch(data: Generations, idx: torch.Tensor, cfg: DEERConfig, g: torch.Generator) -> dict:
    """Cut at u ~ U(0, G-1); the next min(G-u, k_max) continuation tokens are the masked block."""
    G = data.gen_len
    u = torch.randint(0, G, (idx.numel(),), generator=g)
    R = (G - u).clamp(max=cfg.k_max)
    n_clean = data.prefix[idx] + u
    lengths = n_clean + R
    T = int(lengths.max())
    tokens = data.tokens[idx, :T]
    return {"tokens": tokens, "lengths": lengths, "n_clean": n_clean, "weights": torch.ones(idx.numel(), T),
            "row_weights": G / R.float()}  # 1/t with t = R / G


def stage2_batch(data: Generations, idx: torch.Tensor, cfg: DEERConfig, g: torch.Generator) -> dict:
    """Mask the last R ~ U(1, r_max) tokens of a cut continuation; slot i weighs α^(R−i)."""
    G, B = data.gen_len, idx.numel()
    R = torch.randint(1, min(cfg.r_max, G) + 1, (B,), generator=g)
    end = R + (torch.rand(B, generator=g) * (G - R + 1).float()).long()  # block end inside the continuation
    n_clean = data.prefix[idx] + end - R
    lengths = n_clean + R
    T = int(lengths.max())
    tokens = data.tokens[idx, :T]
    i = torch.arange(T)[None, :] - n_clean[:, None] + 1  # slot number, 1 right after the prefix
    weights = torch.where(i >= 1, cfg.alpha ** (R[:, None] - i).clamp(min=0).float(), torch.zeros(()))
    return {"tokens": tokens, "lengths": lengths, "n_clean": n_clean, "weights": weights, "row_weights": None}


def eval_blocks(data: Generations, k: int) -> dict:
    """Fixed evaluation blocks: for every row, the first k continuation tokens after its prefix."""
    n_clean = data.prefix.clone()
    lengths = n_clean + k
    T = int(lengths.max())
    return {"tokens": data.tokens[:, :T], "lengths": lengths, "n_clean": n_clean}


def agreement(model, data: Generations, k: int, mask_id: int, cfg: DEERConfig) -> dict:
    """Mean greedy-accepted length of a k-block drafted right after each held-out prefix."""
    b = on_model(eval_blocks(data, k), model)
    model.eval()
    return block_agreement(model, b["tokens"], b["lengths"], b["n_clean"], mask_id, cfg.convention, cfg.pattern)


def train_stage(model, stage: int, train: Generations, val: Generations, mask_id: int, cfg: DEERConfig,
                progress: bool = True, teacher=None, checkpoint=None, checkpoint_every_s: float = 300.0
                ) -> TrainResult:
    """One stage of training; with ``checkpoint`` (a file) it resumes from and saves to it."""
    if cfg.select not in ("accepted", "loss"):
        raise ValueError(f"DEERConfig.select must be 'accepted' or 'loss', got {cfg.select!r}")
    make = stage1_batch if stage == 1 else stage2_batch
    g = torch.Generator().manual_seed(cfg.seed + stage)

    def loss_fn(m, batch):
        soft = teacher_slot_logp(teacher, batch["tokens"], batch["lengths"]) if cfg.distill else None
        return block_loss(m, batch["tokens"], batch["lengths"], batch["n_clean"], batch["weights"], mask_id,
                          cfg.convention, cfg.pattern, row_weights=batch["row_weights"],
                          clean_weight=cfg.clean_weight, teacher_logp=soft)

    def next_batch(step: int) -> dict:
        idx = torch.randint(0, len(train), (cfg.batch_size,), generator=g)
        return make(train, idx, cfg, g)

    if cfg.select == "accepted":
        val_loss = accepted_selector(model, val, cfg.k_max, mask_id, cfg)
    else:
        vg = torch.Generator().manual_seed(cfg.seed + 100 + stage)
        # drawn on the CPU, moved to the model's device once (they are evaluated every ``eval_every`` steps)
        val_batches = [on_model(make(val, torch.arange(i, min(i + 32, len(val))), cfg, vg), model)
                       for i in range(0, len(val), 32)]

        def val_loss() -> float:
            losses = [loss_fn(model, b) for b in val_batches]  # all queued before the first read-back
            return sum(float(x) for x in losses) / len(val_batches)

    steps = cfg.stage1_steps if stage == 1 else cfg.stage2_steps
    budget = cfg.stage1_budget_s if stage == 1 else cfg.stage2_budget_s
    return train_loop(model, next_batch, val_loss, loss_fn, max_steps=steps, budget_s=budget, lr=cfg.lr,
                      warmup=min(50, steps // 5), eval_every=cfg.eval_every, patience=cfg.patience,
                      desc=f"deer stage {'I' * stage}", progress=progress, checkpoint=checkpoint,
                      checkpoint_every_s=checkpoint_every_s, generators=(g,))


def accepted_selector(model, data: Generations, k: int, mask_id: int, cfg: DEERConfig) -> Callable[[], float]:
    """A ``train_loop`` validation function that keeps the weights with the longest held-out accepted run: minus
    :func:`agreement`'s mean accepted length (``train_loop`` keeps the lowest value)."""
    return lambda: -agreement(model, data, k, mask_id, cfg)["accepted"]


def accepted_record(res: TrainResult, k: int) -> dict:
    """What a run selected by :func:`accepted_selector` records: the figure named, lengths stored positive."""
    return {"selected_on": f"held-out accepted length, k = {k}", "best_val_accepted": -res.best_val_loss,
            "val_history": [(step, -v) for step, v in res.val_history]}


def stage_report(res: TrainResult, cfg: DEERConfig) -> dict:
    """A stage's training record, with its validation figure."""
    record = {"steps": res.steps, "seconds": res.seconds, "stopped": res.stopped}
    if cfg.select == "accepted":
        return {**record, **accepted_record(res, cfg.k_max)}
    return {**record, "best_val_loss": res.best_val_loss, "val_history": res.val_history}


def align(dlm_model, target, train_stream: torch.Tensor, val_stream: torch.Tensor, mask_id: int,
          cfg: DEERConfig | None = None, stages: tuple[int, ...] = (1, 2), progress: bool = True,
          on_stage=None, checkpoint=None, checkpoint_every_s: float = 300.0) -> dict:
    """Run DEER's alignment in place on ``dlm_model``; returns the report (data, per-stage training,
    greedy block agreement at k = 8 and 16 on held-out target generations before and after each stage).
    ``on_stage(stage, model)`` is called after each stage (e.g. to save a Stage-I-only checkpoint).
    ``checkpoint``: a directory for the generations and per-stage checkpoints (a killed run resumes there)."""
    cfg = cfg or DEERConfig()
    t0 = time.perf_counter()
    data = cached(None if checkpoint is None else checkpoint / "generations.pt", lambda: (
        target_generations(target, train_stream, cfg.n_train, cfg, cfg.seed, progress=progress),
        target_generations(target, val_stream, cfg.n_val, cfg, cfg.seed + 1, progress=progress)))
    train, val = data
    report = {"config": asdict(cfg), "generation_seconds": time.perf_counter() - t0,
              "agreement": {"before": {k: agreement(dlm_model, val, k, mask_id, cfg) for k in (8, 16)}}}
    for stage in stages:
        res = train_stage(dlm_model, stage, train, val, mask_id, cfg, progress, teacher=target,
                          checkpoint=stage_checkpoint(checkpoint, stage), checkpoint_every_s=checkpoint_every_s)
        report[f"stage{stage}"] = stage_report(res, cfg)
        report["agreement"][f"after_stage{stage}"] = {k: agreement(dlm_model, val, k, mask_id, cfg) for k in (8, 16)}
        if on_stage is not None:
            on_stage(stage, dlm_model)
    return report


def load_dlm(spec: str, trust_remote_code: bool = False):
    """(model, tokenizer) of the diffusion LM to align: as ``load_target``, except that a checkpoint shipping its
    own modeling code (LLaDA, Dream) loads through ``AutoModel`` when the user trusts it (``--trust-remote-code``),
    with errors of that code naming its file."""
    if not (Path(spec).is_dir() and needs_trust(spec)):
        try:
            dlm = load_target(spec)
        except ValueError as err:  # load_target speaks of a "target": this is the diffusion LM to align
            raise ValueError(f"--dlm: {str(err).replace('target ', 'diffusion LM ', 1)}") from None
        return dlm.model, dlm.tokenizer
    require_trust(spec, trust_remote_code, "--trust-remote-code")
    with explain_remote_failure(spec):
        model = AutoModel.from_pretrained(spec, trust_remote_code=True, local_files_only=True).eval()
    model._mmspec_remote = (str(spec), modeling_files(spec))
    try:
        tok = AutoTokenizer.from_pretrained(spec, trust_remote_code=True, local_files_only=True)
    except (OSError, ValueError):
        tok = None
    return model, tok


__all__ = ["DEERConfig", "Generations", "target_generations", "stage1_batch", "stage2_batch", "train_stage",
           "accepted_selector", "accepted_record", "stage_report",
           "agreement", "align", "load_dlm"]
