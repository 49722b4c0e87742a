"""``code-dflash``: the code family's DFlash block-diffusion drafter, trained against ``code-target``.

Two Qwen3-style layers as wide as the target (256), conditioned on five of its fifteen layers (the paper's spread,
1 to N−3: 1, 4, 6, 9, 12), block size 16, mask id 2 (the tokenizer's ``<mask>``), the target's embeddings and LM
head shared (:mod:`mmspec.drafters.dflash_model`). It trains on the target's own greedy continuations — the first
``N_TRAIN`` rows of the code family's distillation set (:mod:`mmspec.zoo.code_distill`: the same draws, seed and
batches, so the rows equal those of the full set) — with the target's features computed once per row
(:func:`mmspec.training.dflash.precompute_features`) and kept under ``<home>/.build/code-dflash/``, like the
generations and the training checkpoint, so an interrupted build resumes where it stopped.

Sized for 2 CPU cores: generating a 256-row batch of 64-token continuations costs about 30 s there, the features
of 4096 rows a few minutes, and a training step at 16 rows x 8 anchors about 0.6 s.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from ..drafters.dflash import DFlashDrafter
from ..drafters.dflash_io import load_dflash, save_dflash
from ..drafters.dflash_model import DFlashDraftModel, make_config
from ..training.deer import target_generations
from ..training.dflash import DFlashTrainConfig, Responses, block_acceptance, target_responses, \
    precompute_features, train_dflash, validation_batches
from ..training.artifact import cached
from ..training.loop import load_checkpoint, model_device, on_model, save_checkpoint
from . import code_distill
from .code_data import EXTRA_PACKAGES, UNSEEN_PACKAGES, completion_prompts, completion_training_prompts, \
    ensure_tokenizer, load_corpus, package_completion_prompts
from .code_loader import load
from .common import build_device, build_dir, logits_checksum, seed_everything, versions
from .entry import ZooEntry
from .home import write_json
from .streams import token_stream

NAMES = ["code-dflash"]
SEED = 4242
MASK_ID = 2
LAYERS, BLOCK = 2, 16
N_TRAIN, N_VAL = 4096, 128
N_TRAIN2 = 8192  # stage 2: stage 1's rows and the next 4096 of the same draws
TRAIN = DFlashTrainConfig(steps=5000, budget_s=80 * 60.0, batch_size=16, anchors=8, lr=1.5e-3, warmup=100,
                          eval_every=250, patience=4, val_rows=128, kl_weight=0.0, cache_features=True)
# stage 2 continues from stage 1's kept weights with a fresh, lower cosine on twice the rows and four times the anchors
# per row: on stage 1's 4096 rows the held-out accepted length levelled off near 1.7-1.77 from step 3000 while the
# training loss kept falling, and real decoding on validation *completion prompts* reached tau 1.66 only (a 1-layer AR
# drafter trained on 20x more next-token positions: 2.37), so the first slots need more examples
TRAIN2 = dataclasses.replace(TRAIN, steps=2500, budget_s=35 * 60.0, anchors=32, lr=1e-3, warmup=50, seed=2603)
MICRO_TRAIN = dataclasses.replace(TRAIN, steps=20, budget_s=30.0, batch_size=4, anchors=4, warmup=2, eval_every=10,
                                  val_rows=8)
# stage 3 fine-tunes on the kind of prompt the code suite and HumanEval ask: the target's greedy 64-token answers
# (EOS not stopping, as the suites decode) to the training split's documented functions, cut after the docstring
# and inside the body (:func:`~mmspec.zoo.code_data.completion_training_prompts`); validation: the validation
# split's functions cut after the docstring. A drafter fine-tuned for 1200 steps on such answers (EOS-cut) lifted
# real decoding tau on the suite's prompts 2.57 -> 2.83 (whole-block chain, 12 prompts): the first two stages' rows
# are continuations of random corpus windows, another distribution
TRAIN3 = dataclasses.replace(TRAIN, steps=3000, budget_s=45 * 60.0, anchors=32, lr=6e-4, warmup=50, seed=2604)
# stage 4 goes on from stage 3's weights (its held-out figure still rising when its budget ran out: 3.07 at step 1000,
# 3.25 at 1677) on stage 3's rows and the target's answers to documented functions of installed packages, half from
# the target's own corpus packages and half from packages it never saw (HumanEval's prompts are outside anything the
# zoo trained on, and there the block drafter's tau fell to 2.1: the target's answers there are what it must
# learn). Each step runs blocks of 8, 12 or all 16 positions, so a user can run a shorter block where its forward
# costs more than its last slots earn
TRAIN4 = dataclasses.replace(TRAIN, steps=1900, budget_s=55 * 60.0, anchors=32, lr=3e-4, warmup=50, seed=2605,
                             block_choices=(8, 12, 16))
PACKAGE_PROMPTS = 1600  # per group (the corpus's packages, unseen packages)
PER_PACKAGE = 300
MICRO_TRAIN2 = dataclasses.replace(MICRO_TRAIN, steps=10, seed=2603)
MICRO_TRAIN3 = dataclasses.replace(MICRO_TRAIN, steps=10, seed=2604)
MICRO_TRAIN4 = dataclasses.replace(MICRO_TRAIN, steps=10, seed=2605, block_choices=(8, 12, 16))
MICRO_PACKAGE_PROMPTS = 6
MICRO_PACKAGES = (("packaging",), ("einops",))  # small ones: a micro build scans two packages, not thirty-five
MICRO_N_TRAIN, MICRO_N_VAL, MICRO_N_TRAIN2 = 32, 8, 48
COMPLETION_TOKENS = 64  # the suites' answer length
MAX_PROMPT = 256  # longer completion prompts are left out of the stage-3 rows (a CPU batch pads to the longest)
MICRO_COMPLETIONS = 24
TAU_BLOCK = 15  # drafts per step for the recorded decoding tau (the whole block, no confidence cut)


@torch.no_grad()
def checksum(entry: ZooEntry) -> dict:
    return logits_checksum(checksum_output(entry.model))


@torch.no_grad()
def checksum_output(net: DFlashDraftModel) -> torch.Tensor:
    """The drafter's final-normed block output on fixed synthetic context features (no target needed)."""
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(1, 6, net.fc.in_features, generator=g).to(net.device)
    x = torch.randn(1, 4, net.config.hidden_size, generator=g).to(net.device)
    ctx = net.fuse(feats)
    ccos, csin = net.rope(ctx, torch.arange(6, device=net.device)[None])
    bcos, bsin = net.rope(x, torch.arange(6, 10, device=net.device)[None])
    kv = [net.context_kv(i, ctx, ccos, csin) for i in range(len(net.layers))]
    return net.block(x, bcos, bsin, lambda i, k, v: (torch.cat([kv[i][0], k], 2), torch.cat([kv[i][1], v], 2)), None)


def load_target_model(home: Path):
    """``code-target`` from ``home`` (float32, as the zoo loads it) on the build's device: the drafters' teacher."""
    return load("code-target", Path(home) / "code-target").model.to(build_device())


def target_data(home: Path, target, micro: bool, progress: bool = True, n_train: int | None = None):
    """(tokenizer, train, val): the target continuations the block drafter (and ``code-eagle``) train on — the first
    ``n_train`` rows (default ``N_TRAIN``) of the distillation set's draws (:mod:`mmspec.zoo.code_distill`: the same
    seed and batches, so a longer set extends a shorter one row for row), cached under ``.build/code-dflash``."""
    tok = ensure_tokenizer(home, micro)
    base = code_distill.data_config(micro)
    work = build_dir(home, "code-dflash")
    n_train = n_train or (MICRO_N_TRAIN if micro else N_TRAIN)
    out, corpus = [], None
    for split, n, seed in (("train", n_train, 2024), ("val", MICRO_N_VAL if micro else N_VAL, 2025)):
        size = "" if n in (N_TRAIN, N_VAL, MICRO_N_TRAIN, MICRO_N_VAL) else f"-{n}"
        path = work / f"generations-{split}{size}{'-micro' if micro else ''}.pt"
        saved = load_checkpoint(path)
        if saved is None:
            corpus = corpus or load_corpus(micro=micro)
            cfg = dataclasses.replace(base, n_train=n)
            data = target_generations(target, token_stream(tok, corpus.texts(split)), n, cfg, seed, progress=progress,
                                      partial=work / f"{path.stem}.partial.pt")
            save_checkpoint(path, {"value": data})
            (work / f"{path.stem}.partial.pt").unlink(missing_ok=True)
        else:
            data = saved["value"]
        out.append(data)
    return tok, out[0], out[1]


def cached_features(work: Path, name: str, target, net, data, progress: bool,
                    inputs=None) -> tuple[torch.Tensor, float]:
    """The target's features of the drafter's layers over every row of ``data`` (``inputs``: the rows' other
    forward inputs, :func:`~mmspec.training.dflash.precompute_features`), cached as ``name``, and their seconds."""
    saved = load_checkpoint(work / name)
    if saved is not None:
        return saved["value"], saved["seconds"]
    t0 = time.perf_counter()
    features = precompute_features(target, net, data, progress=progress, inputs=inputs)
    save_checkpoint(work / name, {"value": features, "seconds": time.perf_counter() - t0})
    return features, time.perf_counter() - t0


def completion_data(home: Path, target, tok, micro: bool, progress: bool = True) -> tuple[Responses, Responses]:
    """(train, val) rows of stage 3: the target's greedy answers to completion prompts (train: the training split's
    functions cut after the docstring and inside the body; val: the validation split's, cut after the docstring),
    cached under ``.build/code-dflash`` with each finished batch saved (a killed build resumes)."""
    corpus = load_corpus(micro=micro)
    work = build_dir(home, "code-dflash")
    tag = "-micro" if micro else ""
    texts = {"train": completion_training_prompts(corpus, "train", seed=SEED),
             "val": [p.prompt for p in completion_prompts(corpus, "val", min_body_lines=2, max_body_lines=120)]}
    if micro:  # a micro corpus may hold few functions: the rows only have to exist
        texts = {"train": texts["train"][:MICRO_COMPLETIONS] or ["def f(x):\n    return x"] * 4,
                 "val": texts["val"][:MICRO_N_VAL] or texts["train"][-2:] or ["def g(y):\n    return y"] * 2}
    return tuple(answered(work / f"completions-{split}{tag}", target, tok, texts[split], micro, progress)
                 for split in ("train", "val"))


def answered(stem: Path, target, tok, texts: list[str], micro: bool, progress: bool) -> Responses:
    """The target's greedy answers (the suites' length, EOS not stopping) to the ``texts`` of at most ``MAX_PROMPT``
    tokens, cached as ``<stem>.pt`` with each finished batch saved to ``<stem>.partial.pt`` (a killed build
    resumes)."""
    prompts = [ids for ids in tok(texts, add_special_tokens=False).input_ids if 0 < len(ids) <= MAX_PROMPT]
    partial = stem.with_name(stem.name + ".partial.pt")
    pad = tok.pad_token_id or 0

    def answer():
        answers = target_responses(target, prompts, code_distill.MICRO_TAU_TOKENS if micro else COMPLETION_TOKENS,
                                   None, pad, partial=partial, progress=progress)
        return Responses.from_rows(list(zip(prompts, answers)), pad)

    out = cached(stem.with_name(stem.name + ".pt"), answer)
    partial.unlink(missing_ok=True)
    return out


def package_data(home: Path, target, tok, micro: bool, progress: bool = True) -> Responses:
    """Stage 4's new rows: the target's greedy answers to documented functions of installed packages
    (:func:`~mmspec.zoo.code_data.package_completion_prompts`), ``PACKAGE_PROMPTS`` from the corpus's packages and as
    many from packages outside it, cached like :func:`completion_data`'s."""
    work = build_dir(home, "code-dflash")
    tag = "-micro" if micro else ""
    n = MICRO_PACKAGE_PROMPTS if micro else PACKAGE_PROMPTS
    seen, unseen = MICRO_PACKAGES if micro else (EXTRA_PACKAGES, UNSEEN_PACKAGES)
    texts = (package_completion_prompts(seen, n, seed=SEED, per_package=PER_PACKAGE)
             + package_completion_prompts(unseen, n, seed=SEED + 1, per_package=PER_PACKAGE))
    return answered(work / f"completions-packages{tag}", target, tok, texts, micro, progress)


def ship(net: DFlashDraftModel, tok, home: Path, name: str, family: str, micro: bool, seed: int,
         target) -> tuple[Path, dict, DFlashDraftModel]:
    """Write a zoo DFlash drafter (float16 weights, as the zoo ships its models; tokenizer; ``zoo.json`` without its
    checksum yet) and load it back on the target's device: (directory, zoo.json fields, the drafter as shipped),
    which is what the build then measures."""
    out = home / name
    save_dflash(net, out, dtype=torch.float16)
    tok.save_pretrained(out)
    info = {"family": family, "name": name, "micro": micro, "seed": seed, "distilled_from": f"{family}-target",
            "method": "dflash", **versions()}
    write_json(out / "zoo.json", info)
    return out, info, load_dflash(out).to(model_device(target))


def as_shipped(net: DFlashDraftModel) -> None:
    """Round the weights to float16 and back, as the zoo ships them: the next stage starts from what a user of an
    earlier zoo has (and a build resumed from a shipped drafter is the build that trains it)."""
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(p.half().float())


def build(home: Path, micro: bool = False, progress: bool = True, names: list[str] | None = None) -> dict:
    """Data (cached), features (cached), three checkpointed training stages (corpus continuations: the first
    ``N_TRAIN`` rows, then ``N_TRAIN2``; then answers to completion prompts), each kept in ``.build`` once done, then
    the shipped drafter measured: held-out block acceptance (stage 3's validation rows, before and after that stage)
    and τ of real decoding on validation prompts."""
    home = Path(home)
    t0 = time.perf_counter()
    target = load_target_model(home)
    work = build_dir(home, "code-dflash")
    seed_everything(SEED)
    cfg = make_config(target.config, num_layers=LAYERS, block_size=BLOCK, mask_token_id=MASK_ID)
    net = DFlashDraftModel(cfg).to(build_device())
    micro_tag = "-micro" if micro else ""
    plan = ((MICRO_TRAIN if micro else TRAIN, MICRO_N_TRAIN if micro else N_TRAIN, "train.pt"),
            (MICRO_TRAIN2 if micro else TRAIN2, MICRO_N_TRAIN2 if micro else N_TRAIN2, "train2.pt"),
            (MICRO_TRAIN3 if micro else TRAIN3, "completions", "train3.pt"),
            (MICRO_TRAIN4 if micro else TRAIN4, "packages", "train4.pt"))
    stages, feature_seconds = {}, 0.0
    for stage, (cfg_s, n_rows, ckpt) in enumerate(plan, 1):
        done = load_checkpoint(work / f"stage{stage}{micro_tag}.pt")  # a finished stage: its report and weights
        if done is not None:
            if done.get("state") is not None:  # (an earlier stage may keep its report only: a later one has weights)
                net.load_state_dict(done["state"])
            stages[stage] = done["report"]
            continue
        if isinstance(n_rows, int):  # stages 1-2: continuations of corpus windows
            tok, train, val = target_data(home, target, micro, progress, n_rows)
            name = f"features-{n_rows}{micro_tag}.pt"
        else:  # stage 3: answers to completion prompts; stage 4: those and answers to installed packages' functions
            tok = ensure_tokenizer(home, micro)
            train, val = completion_data(home, target, tok, micro, progress)
            if n_rows == "packages":
                train = Responses.from_rows(train.rows() + package_data(home, target, tok, micro, progress).rows(),
                                            tok.pad_token_id or 0)
            name = f"features-{n_rows}{micro_tag}.pt"
        features, secs = cached_features(work, name, target, net, train, progress)
        feature_seconds += secs
        stages[stage] = train_dflash(net, target, train, val, cfg_s, progress=progress, checkpoint=work / ckpt,
                                     features=features)
        stages[stage]["train_rows"] = len(train)
        stages[stage]["feature_seconds"] = secs
        del features
        as_shipped(net)
        save_checkpoint(work / f"stage{stage}{micro_tag}.pt", {"state": net.state_dict(), "report": stages[stage]})
    tok = ensure_tokenizer(home, micro)
    train, val = completion_data(home, target, tok, micro, progress)
    report = {"stages": stages, "steps": sum(r["steps"] for r in stages.values()),
              "seconds": sum(r["seconds"] for r in stages.values()),
              "tokens_seen": sum(r["tokens_seen"] for r in stages.values()),
              "blocks_seen": sum(r["blocks_seen"] for r in stages.values()),
              "heldout_before": stages[len(plan)]["heldout_before"], "heldout_after": stages[len(plan)]["heldout_after"],
              "heldout_set": "stages 3-4's validation rows: the target's answers to the validation split's completion "
                             "prompts", "feature_seconds": feature_seconds}
    # its draft vocabulary: every id of the target's answers to stage 3's training prompts (FR-Spec; the LM head over
    # the block's slots then costs those rows, the verifier keeps every id, and the grafted lookup branch drafts any id
    # of the context). Side by side on 24 HumanEval prompts (2026-11-28, docs/runs/2026-11-28-cpu/code-vocab/):
    # dflash-lookup-cut faster at the same tau
    net.config.dflash_config["draft_vocab"] = train.answer_ids()
    out, info, shipped = ship(net, tok, home, "code-dflash", "code", micro, SEED, target)
    metrics = {"layers": LAYERS, "hidden": cfg.hidden_size, "block_size": BLOCK,
               "draft_vocab_ids": len(shipped.draft_vocab),
               "target_layer_ids": shipped.target_layer_ids,
               "params": sum(p.numel() for p in shipped.parameters()),
               "train_rows": stages[len(plan)]["train_rows"], "val_rows": len(val), **report,
               "heldout_shipped": block_acceptance(shipped, target, [on_model(b, shipped) for b in
                                                                     validation_batches(val, plan[-1][0], BLOCK)]),
               "tau_decode": _decode_tau(target, shipped, tok, micro)}
    metrics["wall_seconds"] = time.perf_counter() - t0
    write_json(out / "metrics.json", metrics)
    info["checksum"] = checksum(ZooEntry("code-dflash", shipped.cpu(), tok, info, out))
    write_json(out / "zoo.json", info)
    return {"code-dflash": metrics}


def _decode_tau(target, net, tok, micro: bool) -> dict:
    """τ of real greedy decoding through the engine on held-out validation prompts (not teacher-forced)."""
    prompts = code_distill.tau_prompts(tok, micro)
    return {f"chain{k}": code_distill.decode_tau(target, lambda k=k: DFlashDrafter(net, target, num_tokens=k),
                                                 prompts, micro)
            for k in (TAU_BLOCK, 8)}


__all__ = ["NAMES", "build", "checksum", "ship", "cached_features", "target_data", "load_target_model"]
