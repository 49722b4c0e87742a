"""``mmspec image`` with a real visual autoregressive checkpoint: Janus text-to-image (``--model DIR --prompt TEXT``)
through :func:`mmspec.pipeline`'s Janus route, next to the zoo's class-conditional model (the default ``--model``).

Which kind a ``--model`` is gets decided from its name or its ``config.json`` before anything is loaded, and the
options of the other kind (``--classes`` for the zoo model; ``--prompt`` / ``--prompts-file`` /
``--no-chat-template`` for Janus) are refused with a ValueError (one ``mmspec: error:`` line)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from rich.console import Console
from tqdm.auto import tqdm

from .loading import model_dir, zoo_name
from .model_dirs import require_config
from .pipeline import pipeline
from .registry import IMAGE_DRAFTERS, check_image_method, resolve_bound
from .zoo.image_data import image_grid, tensor_to_pil

ZOO_IMAGE = "zoo:image-target"
ZOO_DRAFTERS = IMAGE_DRAFTERS  # the zoo image model's own drafters, by name
KINDS = {"zoo": "the zoo's class-conditional model",
         "janus": "a Janus text-to-image checkpoint (JanusForConditionalGeneration)"}
ONLY = {"zoo": (("classes", "--classes"),),  # options that apply to one kind only: (attribute, flag)
        "janus": (("prompt", "--prompt"), ("prompts_file", "--prompts-file"),
                  ("no_chat_template", "--no-chat-template"))}


def image_model_kind(spec) -> str:
    """``"zoo"`` for ``zoo:image-target``, ``"janus"`` for a Janus checkpoint directory; a ValueError otherwise."""
    name = zoo_name(spec)
    if name is not None:
        if name != "image-target":
            raise ValueError(f"--model {spec}: mmspec image generates with {ZOO_IMAGE} (class-conditional) or a "
                             "Janus checkpoint directory (text-to-image)")
        return "zoo"
    path = require_config(model_dir(spec, "--model"), "--model")
    mtype = json.loads((path / "config.json").read_text()).get("model_type")
    if mtype == "janus":
        return "janus"
    raise ValueError(f"--model {spec} holds a {mtype or 'model of unknown type'} checkpoint: mmspec image runs Janus "
                     f"checkpoints (text-to-image) and {ZOO_IMAGE} (class-conditional); a class-conditional visual "
                     "AR checkpoint over VQ codes runs through mmspec.pipeline(DIR, vq=..., drafter=...)")


def refuse_other_kind(args, kind: str) -> None:
    """A ValueError naming the options given that belong to the other kind of model."""
    for other, flags in ONLY.items():
        given = [flag for attr, flag in flags if getattr(args, attr, None)]
        if other != kind and given:
            raise ValueError(f"{', '.join(given)} applies to {KINDS[other]}"
                             + (f" ({ZOO_IMAGE})" if other == "zoo" else "") + f" only; --model {args.model} is "
                             f"{KINDS[kind]}" + (" (it takes --prompt TEXT or --prompts-file FILE)"
                                                 if kind == "janus" else " (it takes --classes)"))
    if kind == "janus" and getattr(args, "coupling", "rejection") != "rejection":
        raise ValueError(f"--coupling {args.coupling} applies to {ZOO_IMAGE}; a Janus model samples with p/q "
                         "rejection")
    if kind == "janus" and args.drafter in ZOO_DRAFTERS:
        raise ValueError(f"--drafter {args.drafter} names a drafter of {ZOO_IMAGE}; a Janus model drafts with a "
                         "smaller Janus checkpoint sharing its codebook: give its directory")


def read_prompts(prompts: list[str] | None, prompts_file: str | None) -> list[str]:
    """``--prompt`` values, then the non-empty lines of ``--prompts-file``; at least one."""
    out = [p for p in (prompts or [])]
    if prompts_file:
        out += [line.strip() for line in Path(prompts_file).read_text(encoding="utf-8").splitlines() if line.strip()]
    if not out:
        raise ValueError("a Janus checkpoint generates from text: give --prompt TEXT (repeatable) or --prompts-file "
                         "FILE (one prompt a line)")
    if not all(p.strip() for p in out):
        raise ValueError("--prompt must not be empty")
    return out


def image_timing(started: float, decode_seconds: float, tv_seconds: float | None) -> dict:
    """What ``stats.json`` says about time: ``seconds`` (decoding only), ``wall_seconds`` (the whole command since
    ``started``), the output-TV measurement's own seconds when it ran, and a line per figure saying what it covers."""
    wall = time.perf_counter() - started
    out = {"seconds": decode_seconds, "wall_seconds": wall,
           "timing": {"seconds": "decoding only: the generate calls, without loading and without the output-TV "
                                 "measurement",
                      "wall_seconds": "the whole command: loading the models, decoding, "
                                      + ("measuring the output TV, " if tv_seconds is not None else "")
                                      + "decoding the pictures and writing them"}}
    if tv_seconds is not None:
        out["output_tv_seconds"] = tv_seconds
        out["timing"]["output_tv_seconds"] = "measuring the exact output TV (--measure-tv), outside 'seconds'"
    return out


def timing_line(summary: dict) -> str:
    """The printed counterpart of :func:`image_timing`."""
    tv = summary.get("output_tv_seconds")
    return (f"decoding {summary['seconds']:.2f} s, command {summary['wall_seconds']:.1f} s wall (loading, decoding"
            + (f", {tv:.1f} s measuring the output TV" if tv is not None else "") + ", writing)")


def janus_image(args, out: Path | None = None, started: float | None = None) -> int:
    """``mmspec image --model DIR --prompt TEXT``: one picture per prompt with a Janus checkpoint; ``grid.png``,
    ``picture_<i>.png``, ``codes.json`` and ``stats.json`` (the settings the method applied) under ``--out``.
    ``out``: the folder written (the run folder's staging copy; default ``--out``), while what is recorded names
    ``--out``; ``started``: when the command began (its wall time is reported)."""
    started = time.perf_counter() if started is None else started
    prompts = read_prompts(args.prompt, args.prompts_file)
    method = args.method or ("lantern++" if args.drafter is not None else "ar")
    check_image_method(method)
    if method != "ar" and args.drafter is None:
        raise ValueError(f"--method {method} on a Janus model needs --drafter DIR: a smaller Janus checkpoint sharing "
                         "its codebook (or --method ar: the stock Janus generate)")
    resolve_bound(method, args.delta, args.lam, args.lantern_k)  # a setting the method ignores: refused before loading
    if method == "ar" and args.cfg_scale <= 1:
        raise ValueError(f"--method ar runs the stock Janus generate, which needs --cfg-scale > 1, got "
                         f"{args.cfg_scale}")
    greedy = args.temperature == 0
    chat = not args.no_chat_template
    final = Path(args.out)
    if out is None:
        out = final
        out.mkdir(parents=True, exist_ok=True)
    pipe = pipeline(args.model, drafter=args.drafter if method != "ar" else None, method=method,
                    cfg_scale=args.cfg_scale, do_sample=not greedy, temperature=1.0 if greedy else args.temperature,
                    lantern_k=args.lantern_k, delta=args.delta, lam=args.lam, tree=args.tree,
                    num_tokens=args.num_tokens)
    batches = [prompts[i: i + args.batch] for i in range(0, len(prompts), args.batch)]
    if method == "ar":  # the stock generate ignores left padding: one token length per batch
        for chunk in batches:
            if not bool(pipe.encode(chunk, chat)[1].all()):
                raise ValueError("--method ar runs the stock Janus generate, which ignores padding: the prompts of "
                                 "one batch must have the same token length (use --batch 1)")
    relaxed = method in ("lantern", "lantern++")
    measure = relaxed and getattr(args, "measure_tv", False)  # costs more than the decoding: only when asked
    pictures, codes = [], []
    stats = new_image_stats()
    for i, chunk in enumerate(tqdm(batches, desc=f"mmspec image ({method}, Janus)")):
        res = pipe.generate(prompts=chunk, chat_template=chat, seed=args.seed + i,
                            **({"measure_output_tv": True} if measure else {}))
        pictures.append(res.images)
        codes += res.codes.tolist()
        add_image_stats(stats, res)
    images = torch.cat(pictures)
    grid = final / "grid.png"  # recorded paths name --out, where the folder is once in place
    image_grid(images, nrow=min(len(prompts), 8), scale=3 if images.shape[-1] < 64 else 1).save(out / grid.name)
    files = []
    for i, img in enumerate(images):
        files.append(str(final / f"picture_{i:03d}.png"))
        tensor_to_pil(img).save(out / Path(files[-1]).name)
    (out / "codes.json").write_text(json.dumps({"prompts": prompts, "codes": codes}))
    applied = {k: v for k, v in res.config.items() if k != "seed"}
    summary = {**applied, "model": str(args.model), **({"drafter_path": str(args.drafter)} if method != "ar" else {}),
               "prompts": prompts, "chat_template": chat, "seed": args.seed, "batch": args.batch,
               "images": len(prompts), "seconds": stats["seconds"],
               "tau": image_tau(stats), "grid": str(grid), "pictures": files, "codes": str(final / "codes.json")}
    tv = write_image_stats(out, summary, stats, relaxed, measure, started)
    Console().print(f"{len(prompts)} pictures (Janus, {method}), τ = {summary['tau']:.2f}, {timing_line(summary)}"
                    + tv + f" → {grid}, {final / 'stats.json'}")
    return 0


def new_image_stats() -> dict:
    """What ``mmspec image`` sums over its batches (both kinds of model)."""
    return {"new_tokens": 0, "target_forwards": 0, "row_forwards": 0, "seconds": 0.0, "moved": [], "tv": [],
            "skipped": 0, "tv_seconds": 0.0}


def add_image_stats(stats: dict, res) -> None:
    """One batch's ImageOutput added to ``stats``."""
    stats["seconds"] += res.seconds
    if res.stats is not None:
        stats["tv_seconds"] += res.stats.output_tv_time
        stats["new_tokens"] += res.stats.new_tokens
        stats["target_forwards"] += res.stats.target_forwards
        stats["row_forwards"] += res.stats.row_forwards
        stats["moved"] += res.stats.moved_mass
        stats["tv"] += res.stats.output_tv
        stats["skipped"] += res.stats.output_tv_skipped


def image_tau(stats: dict) -> float:
    """New codes per (row, target forward) over the run; 1.0 for plain AR (no forwards counted)."""
    return stats["new_tokens"] / stats["row_forwards"] if stats["row_forwards"] else 1.0


def write_image_stats(out: Path, summary: dict, stats: dict, relaxed: bool, measure: bool, started: float) -> str:
    """Complete ``summary`` (a relaxed method's measures, the two times) and write it as ``out/stats.json``;
    returns the printed line's output-TV part (empty unless it was measured)."""
    if relaxed:
        summary.update(relaxed_summary(stats))
    summary.update(image_timing(started, stats["seconds"], stats["tv_seconds"] if measure else None))
    (out / "stats.json").write_text(json.dumps(summary, indent=2))
    if not (measure and stats["tv"]):
        return ""
    return (f", output TV per step (first token, exact) max {summary['max_output_tv']:.3f} mean "
            f"{summary['mean_output_tv']:.3f}")


def relaxed_summary(stats: dict) -> dict:
    """A relaxed method's measures: S_m (mass moved onto one candidate) and, when measured, the output TV (the
    first emitted token's true distance per step)."""
    tv = stats["tv"]
    return dict(max_moved_mass=max(stats["moved"]) if stats["moved"] else None,
                max_output_tv=max(tv) if tv else None, mean_output_tv=sum(tv) / len(tv) if tv else None,
                output_tv_measured=len(tv), output_tv_skipped=stats["skipped"])


__all__ = ["new_image_stats", "add_image_stats", "image_tau", "write_image_stats", "relaxed_summary", "image_model_kind", "refuse_other_kind", "read_prompts", "janus_image", "image_timing", "timing_line"]
