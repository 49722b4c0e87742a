"""``vlm-dflash`` and ``vlm-dflash-c``: the DFlash block-diffusion drafter (:mod:`mmspec.drafters.dflash_model`) for ``vlm-target``.

The text family's drafter, unchanged, on a LLaVA-class target: its context is the target's fused features at every
verified position — the picture's 144 placeholder positions included, so the block reads what the target made of
the image — and its block ``[last token, MASK × 15]`` drafts the answer's next 15 tokens in one forward. Two
Qwen3-style layers as wide as the target's language model (128), five of its sixteen layers (the paper's spread,
1 to N−3), the target's embeddings and LM head shared.

``vlm-dflash-c``: the same drafter (stage 1's weights) with ``VISUAL_QUERIES`` nested learned queries, trained
further (stage 2) with each picture in its context compressed to 1, 2, 4 or 8 entries (FLASH's latent compression,
:meth:`~mmspec.drafters.dflash_model.DFlashDraftModel.compress_context`): it decodes with ``compress_to`` of those.

Data: the target's own greedy answers (stopping at ``<eos>``, as the VLM suite decodes) to captions and questions
of the training scenes (half captions, as the feature drafters train), with their pictures; the target's features
over each row (picture included) are computed once and kept under ``<home>/.build/vlm-dflash/<target>/`` with the
answers and the training checkpoint, so an interrupted build resumes. Validation: scenes the target did not
validate on (as the feature drafters'); the shipped drafter's τ of real decoding on them is recorded.
"""

from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path

import torch

from ..drafters.dflash import DFlashDrafter
from ..drafters.dflash_model import DFlashDraftModel, make_config
from ..generator import SpeculativeGenerator
from ..training.dflash import DFlashTrainConfig, Responses, block_acceptance, target_responses, \
    tau_of, train_dflash, validation_batches
from ..training.artifact import cached
from ..training.loop import load_checkpoint, on_model, save_checkpoint
from ..verifiers.tree_forward import text_config
from . import vlm_data as vd
from .code_data import ensure_tokenizer
from .code_dflash import as_shipped, cached_features, checksum, ship
from .common import build_device, build_dir, seed_everything
from .entry import ZooEntry
from .home import write_json
from .vlm_drafters import CAPTION_FRACTION, target_fingerprint
from .vlm_examples import Encoder, ScenePool, to_pixels
from .vlm_loader import load

NAMES = ["vlm-dflash", "vlm-dflash-c"]  # the paper's drafter; the same, taught compressed pictures
SEED = 4343
LAYERS, BLOCK = 2, 16
ANSWER_TOKENS, MICRO_ANSWER_TOKENS = 48, 8  # the VLM suite's budget
N_TRAIN, N_VAL, N_TAU = 4096, 64, 16
MICRO_N_TRAIN, MICRO_N_VAL, MICRO_N_TAU = 24, 8, 2
TRAIN = DFlashTrainConfig(steps=3000, budget_s=40 * 60.0, batch_size=16, anchors=16, lr=1.5e-3, warmup=100,
                          eval_every=250, patience=4, val_rows=N_VAL, kl_weight=0.0, cache_features=True, seed=4343)
MICRO_TRAIN = dataclasses.replace(TRAIN, steps=10, budget_s=30.0, batch_size=4, anchors=4, warmup=2, eval_every=5,
                                  val_rows=MICRO_N_VAL)
VISUAL_QUERIES = 8
COMPRESS_SETTINGS = (1, 2, 4, 8)  # entries per picture in the context
# vlm-dflash-c: stage 1's drafter (vlm-dflash), every weight trained further on pictures compressed to 1, 2, 4 or 8
# entries. Training the queries alone, the layers frozen, reached a held-out accepted length of 1.6 only (the layers
# read 144 positions' features, not a few mixtures of them); training every weight on the full and compressed
# contexts together cost the full context tau 7.54 -> 7.24: so the paper's drafter stays as it was, and the
# compressing one is its own entry
TRAIN2 = dataclasses.replace(TRAIN, steps=1500, budget_s=20 * 60.0, lr=6e-4, warmup=50, seed=4344,
                             compress_choices=COMPRESS_SETTINGS)
MICRO_TRAIN2 = dataclasses.replace(MICRO_TRAIN, steps=6, seed=4344, compress_choices=COMPRESS_SETTINGS)
# vlm-dflash ships stage 1's drafter grown to blocks of LONG_BLOCK (stage 3): the target's captions run 11-33 tokens
# with <eos> (two objects 11-22, three objects 26-33; the questions' answers 2-5), so a block of 16 — 15 drafts and
# the bonus after the prefill's first token — leaves most captions a second verification, often for their last
# token or their <eos> alone. The grown block trains on blocks of 16, 24 and 32 (so it drafts either), its slot
# weights decaying half as fast (the paper's gamma = 7 is for B = 16)
LONG_BLOCK = 32
TRAIN3 = dataclasses.replace(TRAIN, steps=4000, budget_s=55 * 60.0, lr=1e-3, warmup=50, seed=4345, gamma=14.0,
                             block_choices=(16, 24, LONG_BLOCK))
MICRO_TRAIN3 = dataclasses.replace(MICRO_TRAIN, steps=6, seed=4345, gamma=14.0, block_choices=(16, LONG_BLOCK))
TAU_COMPRESS = (1, 4, 8)  # compressed settings whose decoding tau the metrics record


def mask_token_id(tokenizer) -> int:
    """The tokenizer's ``<mask>`` (the zoo's tokenizers have one; the target never emits it)."""
    mask = tokenizer.convert_tokens_to_ids("<mask>")
    if mask is None or mask == tokenizer.unk_token_id:
        raise ValueError("the zoo tokenizer has no <mask> token for the block drafter")
    return int(mask)


def scene_rows(enc: Encoder, pool: ScenePool, seed: int) -> list[tuple[list[int], int]]:
    """(prompt ids, scene index) per scene of ``pool``: its caption or one of its questions (half captions)."""
    rng = random.Random(seed)
    rows = []
    for i, scene in enumerate(pool.scenes):
        item = vd.Question("caption", "", scene.caption) if rng.random() < CAPTION_FRACTION else \
            rng.choice(scene.questions)
        rows.append((enc.prompt_ids(item), i))
    return rows


def answered(target, enc: Encoder, pool: ScenePool, rows, work: Path, name: str, progress: bool,
             micro: bool = False) -> tuple[Responses, torch.LongTensor]:
    """(rows with the target's greedy answers, each row's scene index in ``pool``), cached as ``name`` (each
    finished batch saved on the way). A micro target, barely trained, may answer ``<eos>`` at once: its answers
    run to the budget instead, so that the rows exist."""
    def answer():
        prompts = [p for p, _ in rows]
        answers = target_responses(target, prompts, MICRO_ANSWER_TOKENS if micro else ANSWER_TOKENS,
                                   None if micro else enc.eos_id, enc.pad_id, partial=work / f"{name}.partial.pt",
                                   progress=progress, inputs=lambda idx, ids: {
                                       "pixel_values": to_pixels(pool.images[[rows[i][1] for i in idx]])})
        kept = [i for i, a in enumerate(answers) if len(a) >= 2]  # a one-token answer has no label to draft
        return (Responses.from_rows([(prompts[i], answers[i]) for i in kept], enc.pad_id),
                torch.tensor([rows[i][1] for i in kept]))

    data, scenes = cached(work / f"{name}.pt", answer)
    (work / f"{name}.partial.pt").unlink(missing_ok=True)
    return data, scenes


def features_of(target, net, data: Responses, scenes: torch.LongTensor, pool: ScenePool, work: Path, name: str,
                progress: bool):
    """The drafter's layers of the target over every row, its picture in (cached as ``name``), and their seconds."""
    return cached_features(work, name, target, net, data, progress,
                           inputs=lambda idx, ids: {"pixel_values": to_pixels(pool.images[scenes[idx]])})


@torch.no_grad()
def decode_tau(target, net, enc: Encoder, pool: ScenePool, n: int, **drafter_kw) -> float:
    """τ of real decoding (new tokens / target forwards after the prefill), stopping at ``<eos>`` as the suite
    does, on the first ``n`` scenes of ``pool`` (captions and questions alternating)."""
    gen = SpeculativeGenerator(target, DFlashDrafter(net, target, **drafter_kw))

    def answer(i: int, scene):
        item = vd.Question("caption", "", scene.caption) if i % 2 == 0 else scene.questions[i % len(scene.questions)]
        ids = on_model(torch.tensor([enc.prompt_ids(item)]), target)
        return gen.generate(ids, pixel_values=on_model(to_pixels(pool.images[i: i + 1]), target),
                            max_new_tokens=ANSWER_TOKENS, eos_token_id=enc.eos_id).stats

    return tau_of(answer(i, scene) for i, scene in enumerate(pool.scenes[:n]))


def build(home: Path, micro: bool = False, progress: bool = True, names: list[str] | None = None) -> dict:
    """``vlm-dflash`` (stage 1) and/or ``vlm-dflash-c`` (stage 1's weights, then stage 2 with compressed pictures),
    from the same cached answers, features and stage-1 checkpoint."""
    names = [n for n in (names or NAMES) if n in NAMES]
    home = Path(home)
    t0 = time.perf_counter()
    entry = load("vlm-target", home / "vlm-target")
    target = entry.model.to(build_device())
    tok = ensure_tokenizer(home, micro)
    enc = Encoder(tok, target.config.image_seq_length)
    work = build_dir(home, "vlm-dflash") / target_fingerprint(entry.config)
    work.mkdir(parents=True, exist_ok=True)
    pool = ScenePool("train", MICRO_N_TRAIN if micro else N_TRAIN)
    val_pool = ScenePool("val", MICRO_N_VAL if micro else N_VAL, start=5000)  # as the feature drafters validate
    train, train_scenes = answered(target, enc, pool, scene_rows(enc, pool, SEED), work, "answers-train", progress,
                                    micro)
    val, val_scenes = answered(target, enc, val_pool, scene_rows(enc, val_pool, SEED + 1), work, "answers-val",
                               progress, micro)
    seed_everything(SEED)

    def config(block: int, **kw):  # the zoo's drafter shape at a block size
        return make_config(text_config(target), num_layers=LAYERS, block_size=block, mask_token_id=mask_token_id(tok),
                           **kw)

    net = DFlashDraftModel(config(BLOCK)).to(build_device())
    features, feature_seconds = features_of(target, net, train, train_scenes, pool, work, "features-train.pt",
                                            progress)
    val_features, _ = features_of(target, net, val, val_scenes, val_pool, work, "features-val.pt", progress)
    tag = "-micro" if micro else ""

    def stage(n: int, model: DFlashDraftModel, run_cfg: DFlashTrainConfig) -> dict:
        """A checkpointed training stage of ``model`` (its kept weights rounded as shipped); its report."""
        done = load_checkpoint(work / f"stage{n}{tag}.pt")
        if done is not None:
            model.load_state_dict(done["state"])
            return done["report"]
        ckpt = work / ("train.pt" if n == 1 else f"train{n}.pt")
        report = train_dflash(model, target, train, val, run_cfg, progress=progress, checkpoint=ckpt,
                              features=features, val_features=val_features, image_token_id=enc.image_id)
        as_shipped(model)
        save_checkpoint(work / f"stage{n}{tag}.pt", {"state": model.state_dict(), "report": report})
        return report

    plan = (MICRO_TRAIN, MICRO_TRAIN2, MICRO_TRAIN3) if micro else (TRAIN, TRAIN2, TRAIN3)
    first = stage(1, net, plan[0])
    common = {"train_rows": len(train), "val_rows": len(val), "num_image_tokens": enc.n_image,
              "answer_tokens_mean": float((train.lengths - train.prefix).float().mean()),
              "feature_seconds": feature_seconds}
    out = {}
    if "vlm-dflash" in names:
        lnet = DFlashDraftModel(config(LONG_BLOCK))
        lnet.load_state_dict(net.state_dict())  # stage 1's weights: only the block grows
        third = stage(3, lnet.to(build_device()), plan[2])
        # its draft vocabulary: every id of the target's training answers (it answers captions and questions about
        # the scenes in a few dozen ids, so the LM head over the block's slots costs those rows instead of the whole
        # vocabulary's; the verifier keeps every id). Side by side on the VLM suite's prompts (one process, 3 rounds):
        # 1.194 -> 1.221x the EAGLE chain's speed
        lnet.config.dflash_config["draft_vocab"] = train.answer_ids()
        out["vlm-dflash"] = _ship(lnet, tok, home, "vlm-dflash", micro, target, enc, val, val_features, val_pool,
                                  staged_report(common, first, 3, third, "heldout_after_by_block"), (), t0)
    if "vlm-dflash-c" in names:
        torch.manual_seed(SEED + 1)  # the queries' initialisation
        cnet = DFlashDraftModel(config(BLOCK, visual_queries=VISUAL_QUERIES))
        missing, unexpected = cnet.load_state_dict(net.state_dict(), strict=False)  # stage 1's weights
        if [k for k in missing if k != "queries"] or unexpected:
            raise ValueError(f"stage 1's weights do not fit the compressing drafter: {missing}, {unexpected}")
        cnet = cnet.to(build_device())
        second = stage(2, cnet, plan[1])
        report = staged_report(common, first, 2, second, "heldout_after_by_setting")
        out["vlm-dflash-c"] = _ship(cnet, tok, home, "vlm-dflash-c", micro, target, enc, val, val_features, val_pool,
                                    report, TAU_COMPRESS, t0)
    return out


def staged_report(common: dict, first: dict, n: int, later: dict, by: str) -> dict:
    """The metrics of a drafter trained in stage 1 (``first``), then in stage ``n`` (``later``): both reports, their
    summed counts, and the later stage's held-out figures (before and after it, and ``by``: per setting or block)."""
    return {**common, "stages": {"1": first, str(n): later},
            **{k: first[k] + later[k] for k in ("steps", "seconds", "tokens_seen", "blocks_seen")},
            "heldout_before": later["heldout_before"], "heldout_after": later["heldout_after"], by: later.get(by)}


def _ship(net: DFlashDraftModel, tok, home: Path, name: str, micro: bool, target, enc: Encoder, val, val_features,
          val_pool: ScenePool, report: dict, compress: tuple[int, ...], t0: float) -> dict:
    """Write zoo entry ``name`` and its metrics: held-out block acceptance (full context) and τ of real decoding on
    validation scenes (chain and DDTree; with ``compress``, the chain at each of those settings too)."""
    out, info, shipped = ship(net, tok, home, name, "vlm", micro, SEED, target)
    n_tau = MICRO_N_TAU if micro else N_TAU
    slots = shipped.block_size - 1
    tau = {f"chain{slots}": decode_tau(target, shipped, enc, val_pool, n_tau),
           **({"chain15": decode_tau(target, shipped, enc, val_pool, n_tau, block=BLOCK)} if slots > BLOCK - 1 else {}),
           "ddtree16": decode_tau(target, shipped, enc, val_pool, n_tau, tree_nodes=16),
           **{f"chain{slots}-c{n}": decode_tau(target, shipped, enc, val_pool, n_tau, compress_to=n)
              for n in compress},
           "scenes": n_tau}
    metrics = {"layers": LAYERS, "hidden": shipped.config.hidden_size, "block_size": shipped.block_size,
               "draft_vocab_ids": None if shipped.draft_vocab is None else len(shipped.draft_vocab),
               "target_layer_ids": shipped.target_layer_ids, "params": sum(p.numel() for p in shipped.parameters()),
               "visual_queries": shipped.visual_queries, **report,
               "heldout_shipped": block_acceptance(shipped, target, [on_model(b, shipped) for b in validation_batches(
                   val, TRAIN, shipped.block_size, val_features)]),
               "tau_decode": tau, "wall_seconds": time.perf_counter() - t0}
    write_json(out / "metrics.json", metrics)
    info["checksum"] = checksum(ZooEntry(name, shipped.cpu(), tok, info, out))
    write_json(out / "zoo.json", info)
    return metrics


__all__ = ["NAMES", "build", "checksum", "scene_rows", "decode_tau"]
