"""The ``mmspec`` command line: ``demo`` (the main job) and ``bench``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from tqdm.auto import tqdm

from . import zoo
from .cli_errors import EXPECTED_ERRORS, error_line
from .cli_generate import add_generate_parser
from .cli_image import (add_image_stats, image_model_kind, image_tau, janus_image, new_image_stats,
                        refuse_other_kind, timing_line, write_image_stats)
from .cli_train import cmd_train
from .demo import run_demo
from .eval import run_bench, write_report
from .eval.batch_sweep import to_markdown as sweep_markdown
from .eval.batch_sweep import write_sweep
from .eval.code_suite import run_code_suite, run_code_sweep
from .eval.config import add_eval_arguments
from .eval.image_suite import run_image_suite
from .eval.image_suite import to_markdown as image_markdown
from .eval.kernel_suite import run_kernel_suite
from .eval.kernel_suite import to_markdown as kernel_markdown
from .eval.run import cli_eval
from .eval.run_dir import run_folder
from .eval.vlm_suite import run_vlm_suite, run_vlm_sweep
from .guidance import DEFAULT_CFG_SCALE
from .options import BENCH, check_args
from .pipeline import pipeline
from .registry import IMAGE_DRAFTERS, draft_length
from .verifiers.coupling import COUPLINGS
from .zoo.image_data import image_grid
from .zoo.integrity import changed_since_commit, record_file_hashes, status


def _print_report(report: dict, console: Console, title: str) -> None:
    table = Table(title=title)
    for col in ("method", "τ (mean accepted)", "speedup vs plain", "exact", "time (s)"):
        table.add_column(col, justify="right" if col != "method" else "left")
    for r in report["results"]:
        table.add_row(
            r["method"],
            f"{r['tau']:.2f}" if r["tau"] is not None else "n/a",
            f"{r['speedup']:.2f}×",
            f"{100 * r['exact']:.0f}%" if r["exact"] is not None else "n/a",
            f"{r['seconds']:.3f}",
        )
    console.print(table)
    for r in report["results"]:
        if r.get("flags"):
            console.print(f"[yellow]⚠ {r['method']}: {'; '.join(r['flags'])}[/yellow]")
    if (report.get("load") or {}).get("warning"):
        console.print(f"[yellow]warning: {report['load']['warning']}[/yellow]")


def _finish_suite(report: dict, args, suite: str, what: str, out: Path) -> int:
    """Print a suite's table and write its JSON / Markdown into the run folder ``out`` (staged: named by
    ``args.out``)."""
    console = Console()
    mode = f"T={args.temperature}" if args.do_sample else "greedy"
    _print_report(report, console, f"mmspec bench --suite {suite} ({mode}): {what}")
    js, md = write_report(report, out)
    console.print(f"wrote {Path(args.out) / js.name} and {Path(args.out) / md.name}")
    return 0


def cmd_bench(args) -> int:
    """``mmspec bench``: one run folder per call (written whole at the end; an earlier run in ``--out`` is moved
    aside and named, a failed run leaves it as it was: :func:`mmspec.eval.run_dir.run_folder`)."""
    # every flag checked (types, ranges) before any work; a flag of another suite, changed from its default, would
    # be dropped: refused
    given = [k for k, v in args.flag_defaults.items() if k in BENCH and getattr(args, k) != v]
    check_args(args, BENCH, method=args.suite, given=given, kind="--suite")
    with run_folder(args.out, "bench") as run:
        return _bench(args, run.staging)


def _bench(args, out: Path) -> int:
    methods = args.methods.split(",") if args.methods else None
    zoo.use_device(args.device)  # every zoo model the suite loads, drafters included, goes there
    if args.batch_sizes:
        return _batch_sweep(args, methods, out)
    if args.suite == "kernels":
        report = run_kernel_suite(out_dir=out)
        Console().print(kernel_markdown(report))
        Console().print(f"wrote {args.out}/kernels_bench.json and kernels_bench.md")
        return 0 if report["sweep"]["passed"] == report["sweep"]["cases"] else 1
    if args.suite == "image":
        report = run_image_suite(per_class=args.per_class, sweep=not args.no_sweep, out_dir=out, device=args.device)
        Console().print(image_markdown(report))
        Console().print(f"wrote {args.out}/image_bench.json, image_bench.md, speed_quality.png, samples_*.png")
        return 0
    if args.suite == "vlm":
        report = run_vlm_suite(methods, num_prompts=args.prompts, max_new_tokens=args.max_new_tokens,
                               do_sample=args.do_sample, temperature=args.temperature, repeats=args.repeats,
                               num_tokens=draft_length("chain", args.num_tokens), kind=args.vlm_prompts)
        return _finish_suite(report, args, "vlm", "zoo vlm-target, stops at EOS", out)
    if args.suite == "code":
        report = run_code_suite(methods, num_prompts=args.prompts, max_new_tokens=args.max_new_tokens,
                                do_sample=args.do_sample, temperature=args.temperature, repeats=args.repeats,
                                num_tokens=args.num_tokens, deer_tokens=args.deer_tokens,
                                diffuspec_tokens=args.deer_tokens, context=args.dlm_context)
        return _finish_suite(report, args, "code", "zoo code-target", out)
    report = run_bench(model=args.model, draft=None if args.draft == "none" else args.draft, methods=methods,
                       num_prompts=args.prompts, prompt_length=args.prompt_length,
                       max_new_tokens=args.max_new_tokens, num_tokens=args.num_tokens, do_sample=args.do_sample,
                       temperature=args.temperature, repeats=args.repeats, seed=args.seed,
                       draft_layers=args.draft_layers)
    console = Console()
    _print_report(report, console, f"mmspec bench: {args.model} (draft {args.draft})")
    console.print(f"prompts: {report['config']['prompts']}")
    js, md = write_report(report, out)
    console.print(f"wrote {Path(args.out) / js.name} and {Path(args.out) / md.name}")
    return 0


def _batch_sweep(args, methods, out: Path) -> int:
    """``mmspec bench --suite code|vlm --batch-sizes 1,2,4``: every method at each batch size vs HF plain."""
    try:
        sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        raise ValueError(f"--batch-sizes takes a comma list of ints, e.g. 1,2,4,8,16; got {args.batch_sizes!r}") from None
    if args.suite not in ("code", "vlm"):
        raise ValueError(f"--batch-sizes runs with --suite code or vlm, not {args.suite!r}")
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"--batch-sizes names a size twice: {args.batch_sizes!r}")
    if sizes and max(sizes) > args.prompts:
        raise ValueError(f"batch size {max(sizes)} needs at least that many prompts: pass --prompts {max(sizes)} "
                         f"or more (got --prompts {args.prompts})")
    if args.do_sample:
        raise ValueError("--batch-sizes compares greedy outputs row by row: leave out --do-sample")
    run = run_code_sweep if args.suite == "code" else run_vlm_sweep
    sweep = run(methods, sizes, num_prompts=args.prompts, max_new_tokens=args.max_new_tokens, repeats=args.repeats,
                num_tokens=args.num_tokens if args.suite == "code" else draft_length("chain", args.num_tokens))
    title = f"mmspec bench --suite {args.suite} --batch-sizes {args.batch_sizes}"
    files = write_sweep(sweep, out, title)
    Console().print(sweep_markdown(sweep, title))
    Console().print("wrote " + ", ".join(str(Path(args.out) / f.name) for f in files))
    return 0


def cmd_image(args) -> int:
    """``mmspec image``: pictures with plain AR, speculative decoding, LANTERN or LANTERN++ — class-conditional with
    the zoo's image model (the default ``--model``), or text-to-image with a Janus checkpoint (``--model DIR
    --prompt TEXT``: :func:`mmspec.cli_image.janus_image`). ``stats.json`` records the settings the method
    applied (bounds resolved), not every flag given, and two times: ``seconds`` (decoding only) and
    ``wall_seconds`` (the whole command). The output TV of relaxed methods is measured only with
    ``--measure-tv`` (it costs more than the decoding). ``--out`` is written as one run folder
    (:func:`mmspec.eval.run_dir.run_folder`)."""
    started = time.perf_counter()
    if args.temperature < 0:
        raise ValueError(f"--temperature must be >= 0 (0: greedy), got {args.temperature}")
    if args.batch < 1:
        raise ValueError(f"--batch must be >= 1, got {args.batch}")
    kind = image_model_kind(args.model)
    refuse_other_kind(args, kind)  # --classes for Janus, --prompt for the zoo model: one clear error
    with run_folder(args.out, "image") as run:
        if kind == "janus":
            return janus_image(args, out=run.staging, started=started)
        return _zoo_image(args, run.staging, started)


def _zoo_image(args, out: Path, started: float) -> int:
    """The zoo model's pictures into the run folder ``out`` (staged; ``args.out`` names it in what is recorded)."""
    args.method = args.method or "lantern++"
    kw = dict(cfg_scale=args.cfg_scale, temperature=args.temperature, lantern_k=args.lantern_k, delta=args.delta,
              lam=args.lam, tree=args.tree, num_tokens=args.num_tokens)  # None: the method's default
    gen = pipeline(args.model, method=args.method, drafter=args.drafter, **kw)  # checks the combination
    try:
        classes = [int(c) for c in args.classes.split(",")] if args.classes is not None else \
            list(range(gen.layout.num_classes))
    except ValueError:
        raise ValueError(f"--classes takes a comma list of class ids, got {args.classes!r}") from None
    if args.coupling != "rejection" and args.method not in ("ar", "spec"):
        raise ValueError(f"--coupling {args.coupling} samples losslessly (--method ar or spec); --method "
                         f"{args.method} relaxes acceptance with p/q rejection (--coupling rejection)")
    if args.measure_tv and args.method not in ("lantern", "lantern++"):
        raise ValueError(f"--measure-tv measures how far a relaxed method (lantern, lantern++) moves the output; "
                         f"method {args.method!r} samples the target's own distribution")
    final = Path(args.out)
    batches = [classes[i: i + args.batch] for i in range(0, len(classes), args.batch)]
    pictures = []
    stats = new_image_stats()
    relaxed = args.method in ("lantern", "lantern++")
    measure = relaxed and args.measure_tv  # the exact output TV costs more than the decoding: only when asked
    for i, chunk in enumerate(tqdm(batches, desc=f"mmspec image ({args.method})")):
        res = gen.generate(chunk, seed=args.seed + i, **({"measure_output_tv": True} if measure else {}),
                           **({"coupling": args.coupling} if args.coupling != "rejection" else {}))
        pictures.append(res.images)
        add_image_stats(stats, res)
    images = torch.cat(pictures)
    grid = final / "grid.png"
    image_grid(images, nrow=min(len(classes), gen.layout.num_classes), scale=3).save(out / grid.name)
    applied = {k: v for k, v in res.config.items() if k not in ("class_ids", "seed")}
    if args.drafter not in (None, *IMAGE_DRAFTERS) and args.method != "ar":
        applied["drafter_path"] = args.drafter
    summary = {**applied, "classes": classes, "seed": args.seed, "batch": args.batch, "images": len(classes),
               "seconds": stats["seconds"], "tau": image_tau(stats), "grid": str(grid)}
    tv = write_image_stats(out, summary, stats, relaxed, measure, started)
    Console().print(f"{len(classes)} pictures, τ = {summary['tau']:.2f}, {timing_line(summary)}" + tv
                    + (f", largest mass moved onto one candidate {summary['max_moved_mass']:.3f}"
                       if relaxed and stats["moved"] else "")
                    + f" → {grid}, {final / 'stats.json'}")
    return 0


def cmd_demo(args) -> int:
    """The main job: the zoo's families, best method vs plain decoding, offline."""
    return run_demo(args.out, num_prompts=args.prompts, max_new_tokens=args.max_new_tokens)


def cmd_eval(args) -> int:
    """Suites x methods on the zoo or the user's models and data: a run directory with report.md, plots, config."""
    return cli_eval(args)


def cmd_zoo(args) -> int:
    console = Console()
    if args.zoo_command == "list":
        home = args.home or zoo.zoo_home()
        if Path(home).exists() and not Path(home).is_dir():
            raise ValueError(f"--home {home} is a file, not a zoo folder")
        table = Table(title=f"mmspec zoo ({home})")
        for col in ("model", "built", "files", "key metrics"):
            table.add_column(col)
        changed = changed_since_commit(Path(home))
        for name in zoo.available():
            path = Path(home) / name
            if (path / "zoo.json").exists():
                try:
                    m = zoo.metrics(name, home)
                except (OSError, ValueError):
                    m = {}
                keys = [k for k in m if isinstance(m[k], (int, float)) and not isinstance(m[k], bool)][:4]
                table.add_row(name, "yes", status(name, path, name in changed), ", ".join(f"{k}={m[k]:.4g}" for k in keys))
            else:
                table.add_row(name, "no", "", "")
        console.print(table)
        return 0
    if args.zoo_command == "record-hashes":
        home = Path(args.home) if args.home else zoo.zoo_home()
        built = [name for name in zoo.available() if (home / name / "zoo.json").exists()]
        if not built:
            raise ValueError(f"{home} holds no zoo model (no <name>/zoo.json): nothing to record; pass the --home "
                             "a `mmspec zoo build` wrote")
        for name in built:
            console.print(f"{name}: {len(record_file_hashes(home / name)['files'])} file hashes recorded")
        return 0
    # the builders import diffusers' training classes (over a second): only `mmspec zoo build` pays for them
    from .zoo.builder import build

    only = args.only.split(",") if args.only else None
    results = build(args.family, micro=args.micro, home=args.home, only=only, force=args.force, device=args.device)
    for name, m in results.items():
        console.print(f"[bold]{name}[/bold]: " + ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in m.items()
            if isinstance(v, (int, float, str)) and not isinstance(v, bool)))
    return 0


def _add_resume_arguments(parser) -> None:
    parser.add_argument("--resume", action="store_true", help="continue a killed run from the checkpoints in "
                        "<out>.ckpt (same settings); without it an existing checkpoint is an error")
    parser.add_argument("--checkpoint-every", type=float, default=120.0,
                        help="seconds between training checkpoints, > 0")


class _Parser(argparse.ArgumentParser):
    """Every command's ``--help`` names each flag's default (its sub-parsers are of this class too)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        if kwargs.get("help") is None and args and str(args[0]).startswith("-"):
            kwargs["help"] = "(default: %(default)s)"  # a flag without help text still names its default
        return super().add_argument(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mmspec", description="Lossless speculative decoding on stock HF models")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="small end-to-end run on the tiny offline models (the main job)")
    demo.add_argument("--prompts", type=int, default=8)
    demo.add_argument("--max-new-tokens", type=int, default=64)
    demo.add_argument("--out", default="runs/demo")
    demo.set_defaults(func=cmd_demo)

    add_generate_parser(sub)

    bench = sub.add_parser("bench", help="methods side by side: tau, speedup vs plain and HF peers, exactness")
    bench.add_argument("--model", default="tiny:llama", help="zoo:<name> (e.g. zoo:code-target), "
                       "tiny:<llama|qwen2|mistral> or a local checkpoint dir")
    bench.add_argument("--draft", default="tiny:llama",
                       help="draft model: zoo:<name> (e.g. zoo:code-drafter), tiny:<arch>, a local checkpoint dir, "
                       "'self' or 'none'")
    bench.add_argument("--draft-layers", type=int, default=1, help="layers of a tiny draft model")
    bench.add_argument("--methods", default=None, help="comma list; default all of: plain, mmspec-plain, hf-assisted, "
                       "hf-prompt-lookup, chain, tree, dynamic, prompt-lookup")
    bench.add_argument("--prompts", type=int, default=4)
    bench.add_argument("--prompt-length", type=int, default=None, help="tokens of random-token prompts (tiny: models "
                       "without a tokenizer; default 48); zoo models use their family's held-out prompts")
    bench.add_argument("--max-new-tokens", type=int, default=64)
    bench.add_argument("--num-tokens", type=int, default=None,
                       help="draft length (tokens per chain); default each method's: the code chain drafts up to 8 "
                            "and stops at the drafter's confidence 0.4, prompt lookup 4, the VLM text-only chain 4")
    bench.add_argument("--do-sample", action="store_true")
    bench.add_argument("--temperature", type=float, default=1.0)
    bench.add_argument("--repeats", type=int, default=1)
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--out", default="runs/bench")
    bench.add_argument("--suite", choices=["models", "code", "vlm", "image", "kernels"], default="models",
                       help="'models': --model/--draft specs; 'code': the zoo's held-out code prompts with every "
                       "text method (AR drafter, prompt lookup, DEER, DiffuSpec, lattice trees); 'vlm': held-out "
                       "zoo scenes with every VLM method (text-only drafter, prompt lookup, EAGLE-style, MSD, FLASH); "
                       "'kernels': Triton kernels vs their torch references (timings on CUDA, the interpreter's "
                       "correctness sweep on CPU)")
    bench.add_argument("--batch-sizes", default=None, help="with --suite code or vlm: a comma list of batch sizes "
                       "(e.g. 1,2,4,8,16); every method runs on batches of the suite's prompts and is compared with HF "
                       "plain decoding at the same batch size (batch_sweep.json / .md / .png)")
    bench.add_argument("--device", default=None, help="with --suite code, vlm or image: where the zoo's models "
                       "run (e.g. cuda; the report names the card); default the CPU")
    bench.add_argument("--per-class", type=int, default=8, help="image suite: pictures per class (quality)")
    bench.add_argument("--no-sweep", action="store_true", help="image suite: skip the δ / λ / k sweep")
    bench.add_argument("--vlm-prompts", choices=["mixed", "caption", "question"], default="mixed",
                       help="vlm suite: captions, questions, or both alternating")
    bench.add_argument("--deer-tokens", type=int, default=8, help="block length (draft tokens) of the diffusion "
                       "drafters")
    bench.add_argument("--dlm-context", choices=["cache", "window", "full"], default="cache",
                       help="how the diffusion drafter reads the prefix")
    bench.set_defaults(func=cmd_bench, flag_defaults={a.dest: a.default for a in bench._actions})

    img = sub.add_parser("image", help="image generation with ar, spec, lantern, lantern++: class-conditional "
                         "(zoo image-target, the default) or text-to-image with a Janus checkpoint (--model DIR "
                         "--prompt TEXT)")
    img.add_argument("--model", default="zoo:image-target", help="zoo:image-target (class-conditional, --classes) or "
                     "a Janus checkpoint directory (JanusForConditionalGeneration with its processor; text-to-image, "
                     "--prompt / --prompts-file, one picture per prompt)")
    img.add_argument("--method", choices=["ar", "spec", "lantern", "lantern++"], default=None,
                     help="default lantern++; for a Janus model without --drafter, ar (the stock Janus generate)")
    img.add_argument("--classes", default=None, help="zoo model only: comma list of class ids (-1: unconditional); "
                     "default all")
    img.add_argument("--prompt", action="append", default=None, help="Janus only: a text prompt (repeatable), one "
                     "picture each")
    img.add_argument("--prompts-file", default=None, help="Janus only: a text file, one prompt a line")
    img.add_argument("--no-chat-template", action="store_true", help="Janus only: tokenize the prompts as they are, "
                     "not as a user turn of the processor's chat template")
    img.add_argument("--cfg-scale", type=float, default=DEFAULT_CFG_SCALE)
    img.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (0: greedy)")
    img.add_argument("--lantern-k", type=int, default=None, help="--method lantern / lantern++: latent neighbours "
                     "per code that mass may move onto (default 8 for lantern, 16 for lantern++)")
    img.add_argument("--delta", type=float, default=None, help="--method lantern only: the most mass moved onto "
                     "one candidate, S_m <= δ (default 0.1; the output's own distance is reported as output TV)")
    img.add_argument("--lam", type=float, default=None, help="--method lantern++ only: multiplicative bound λ "
                     "on each candidate, p̃(x) <= λ·p(x) (default 10; 50 with the dflash drafter and no --tree: chosen on the "
                     "zoo, README, Image generation)")
    img.add_argument("--tree", default=None, help="chain, static (the default tree: README, Image generation; for "
                     "Janus the default is static for lantern++, else a chain of --num-tokens), "
                     "dynamic, or a shape's label as the image suite reports it: branching per depth (2x1x1x1x1x1) or "
                     "spine<depth>+<alternatives at the root> (spine7+1); with --drafter dflash: chain (its block) or "
                     "ddtree (a best-first tree of the block's slot marginals; static is the same), and unset its "
                     "first 8 slots as a chain")
    img.add_argument("--num-tokens", type=int, default=None, help="chain length of --tree chain (spec, lantern, "
                     "lantern++; default 4, with --drafter dflash 8 without --tree, its whole block with --tree chain)")
    img.add_argument("--drafter", default=None, help="ar: the zoo's small AR drafter (run with CFG); feature: "
                     "image-eagle, a feature drafter on the guided target's features; sar: image-sar, the same "
                     "drafting 4 tokens per forward; dflash: image-dflash, a block of 15 codes per forward (DFlash); "
                     "or a directory written by `mmspec train image-drafter`. "
                     "Default: dflash when image-dflash is built, else feature when image-eagle is, else ar. For a Janus --model: a smaller Janus "
                     "checkpoint directory sharing its codebook (needed by spec, lantern, lantern++)")
    img.add_argument("--measure-tv", action="store_true", help="lantern / lantern++: also measure the exact "
                     "output TV per step (first token; costs more than the decoding, excluded from 'seconds', "
                     "included in 'wall_seconds'); off by default")
    img.add_argument("--coupling", choices=list(COUPLINGS), default="rejection", help="zoo model, --method ar "
                     "or spec: how codes are sampled. rejection (p/q rejection, the default) or gumbel: every code is "
                     "the guided target's Gumbel-max draw under noise fixed per position by --seed, drafts are kept "
                     "iff they equal it (--method spec then gives --method ar's very pictures; the fastest lossless "
                     "setting on the zoo: README, Image generation)")
    img.add_argument("--seed", type=int, default=0)
    img.add_argument("--batch", type=int, default=12)
    img.add_argument("--out", default="runs/image")
    img.set_defaults(func=cmd_image)

    train = sub.add_parser("train", help="train drafters")
    train_sub = train.add_subparsers(dest="train_command", required=True)
    td = train_sub.add_parser("deer", help="DEER two-stage alignment of a diffusion drafter to an AR target")
    td.add_argument("--target", default="zoo:code-target", help="zoo:<name> or a local checkpoint dir")
    td.add_argument("--dlm", default="zoo:code-dlm", help="diffusion LM to align: zoo:<name> or a checkpoint dir")
    td.add_argument("--trust-remote-code", action="store_true", help="let a --dlm checkpoint that ships its own "
                    "modeling code (LLaDA, Dream) run it")
    td.add_argument("--mask-token-id", type=int, default=None, help="default: the tokenizer's mask token")
    td.add_argument("--convention", choices=["dream", "llada"], default="dream")
    td.add_argument("--data", default=None, help="glob of text files to cut prefixes from (default: the zoo's "
                    "code corpus)")
    td.add_argument("--stages", default="1,2", help="'1' (Stage I only) or '1,2'")
    td.add_argument("--stage1-steps", type=int, default=600)
    td.add_argument("--stage2-steps", type=int, default=300)
    td.add_argument("--samples", type=int, default=3072, help="target generations to train on")
    td.add_argument("--val-samples", type=int, default=128, help="held-out target generations (validation)")
    td.add_argument("--out", required=True, help="where to save the aligned drafter (a directory with mmspec.json)")
    _add_resume_arguments(td)
    td.set_defaults(func=cmd_train)
    tdf = train_sub.add_parser("dflash", help="a DFlash block-diffusion drafter (target-conditioned) for a causal "
                               "LM target, on the target's own responses")
    tdf.add_argument("--target", default="zoo:code-target", help="zoo:<name> or a local causal LM or VLM checkpoint dir")
    tdf.add_argument("--data", default=None, help=".jsonl of {prompt, response?}; rows without a response get the "
                     "target's greedy one (every row checked first); a VLM target's rows also name an image "
                     "(the prompt holding the processor's placeholder), as `train msd` reads them")
    tdf.add_argument("--generate", type=int, default=None, help="train on N target continuations of prefixes cut "
                     "from --corpus (default: the zoo's code corpus)")
    tdf.add_argument("--corpus", default=None, help="with --generate: glob of text files to cut prefixes from")
    tdf.add_argument("--max-new-tokens", type=int, default=64, help="length of generated responses")
    tdf.add_argument("--temperature", type=float, default=None, help="with --data: rows without a response get one "
                     "sampled from the target at this temperature instead of its greedy one (a drafter for sampling "
                     "calls learns roots the target did not rank first)")
    tdf.add_argument("--init", default=None, help="start from this DFlash drafter's weights (zoo:code-dflash or a "
                     "directory in either layout) instead of a fresh init: fine-tuning; its shape must match")
    tdf.add_argument("--layers", type=int, default=2, help="draft layers (as wide as the target)")
    tdf.add_argument("--block-size", type=int, default=16, help="block length B (root + B-1 draft slots)")
    tdf.add_argument("--target-layers", default=None, help="comma list of target layer indices to read (default: "
                     "the paper's spread of 5 from layer 1 to N-3)")
    tdf.add_argument("--mask-token-id", type=int, default=None, help="default: the tokenizer's mask token")
    tdf.add_argument("--visual-queries", type=int, default=0, help="VLM targets: learned queries that can compress "
                     "each picture in the drafter's context to that many entries (FLASH's latent compression; "
                     "decode with compress_to=k)")
    tdf.add_argument("--compress-choices", default=None, help="comma list of settings a step draws from (0 = the "
                     "full picture; default with --visual-queries: 0 and powers of two up to it)")
    tdf.add_argument("--block-choices", default=None, help="comma list of block lengths a step draws from (0 = the "
                     "whole block), so the drafter also drafts shorter blocks well (DFlashDrafter(block=L)); "
                     "default: the whole block only")
    tdf.add_argument("--steps", type=int, default=3000)
    tdf.add_argument("--batch-size", type=int, default=16)
    tdf.add_argument("--anchors", type=int, default=8, help="blocks per row per step (one forward, block mask)")
    tdf.add_argument("--lr", type=float, default=1.5e-3)
    tdf.add_argument("--kl-weight", type=float, default=0.0, help="add KL to the target's distributions (from its "
                     "last hidden states, cached with the features; online with --online-features)")
    tdf.add_argument("--select-by", choices=["greedy", "sampled"], default="greedy", help="held-out figure the kept "
                     "weights maximise: the greedy accepted length of a block, or the expected accepted length of "
                     "independent draws at T = 1 (a drafter for sampling calls)")
    tdf.add_argument("--online-features", action="store_true", help="run the target every step instead of once "
                     "per row up front (less memory)")
    tdf.add_argument("--budget-s", type=float, default=3 * 3600.0)
    tdf.add_argument("--layout", choices=["zlab", "speculators"], default="zlab", help="output layout (both load "
                     "here; vLLM / SGLang load them too)")
    tdf.add_argument("--out", required=True, help="where to save the drafter (a directory with mmspec.json)")
    _add_resume_arguments(tdf)
    tdf.set_defaults(func=cmd_train)
    for method, what in (("eagle", "plain EAGLE-style feature drafter (no decoupling)"),
                         ("msd", "MSD: decoupled visual inputs, two-stage text-then-multimodal training"),
                         ("flash", "FLASH: compressed visual tokens + semi-autoregressive head")):
        tf = train_sub.add_parser(method, help=f"train a {what} for a VLM target")
        tf.add_argument("--target", default="zoo:vlm-target", help="zoo:vlm-target or a local VLM checkpoint dir "
                        "(LLaVA, LLaVA-NeXT, Qwen2-VL, Qwen2.5-VL, PaliGemma, Gemma3, Idefics3)")
        tf.add_argument("--data", default=None, help=".jsonl of {image, prompt, response} (checkpoint targets only; "
                        "image paths relative to the file; every row is checked before training)")
        tf.add_argument("--scenes", type=int, default=None, help="zoo target only: training scenes, >= 1 "
                        "(unset: 4096)")
        tf.add_argument("--stage1-steps", type=int, default=300, help="stage 1: text-only rows")
        tf.add_argument("--stage2-steps", type=int, default=1500, help="stage 2: multimodal share rising 0 -> 1")
        tf.add_argument("--budget-s", type=float, default=450.0, help="time budget (20%% stage 1, 80%% stage 2)")
        tf.add_argument("--batch-size", type=int, default=32)
        tf.add_argument("--lr", type=float, default=2e-3)
        if method == "flash":
            tf.add_argument("--compress-tokens", type=int, default=8, help="learned queries per image (nested)")
            tf.add_argument("--sar-tokens", type=int, default=4, help="draft tokens per drafter forward")
        tf.add_argument("--out", required=True, help="where to save the drafter (a directory with mmspec.json)")
        _add_resume_arguments(tf)
        tf.set_defaults(func=cmd_train)

    ti = train_sub.add_parser("image-drafter", help="train a feature drafter for a guided visual AR target "
                              "(LANTERN / LANTERN++ image generation)")
    ti.add_argument("--target", default="zoo:image-target", help="zoo:image-target or a local checkpoint dir "
                    "(a causal LM over [class token] + VQ codes)")
    ti.add_argument("--layout", default=None, help="checkpoint targets: JSON file of the token layout (default: "
                    "the config's mmspec_image_layout)")
    ti.add_argument("--cfg-scale", type=float, default=DEFAULT_CFG_SCALE, help="the guidance scale the drafter will serve")
    ti.add_argument("--sar-tokens", type=int, default=1, help="draft tokens per drafter forward (FLASH-style head)")
    ti.add_argument("--samples", type=int, default=4096, help="guided target samples to train on")
    ti.add_argument("--val-samples", type=int, default=256, help="held-out guided target samples (validation)")
    ti.add_argument("--steps", type=int, default=3000)
    ti.add_argument("--budget-s", type=float, default=600.0)
    ti.add_argument("--batch-size", type=int, default=32)
    ti.add_argument("--lr", type=float, default=2e-3)
    ti.add_argument("--seed", type=int, default=0)
    ti.add_argument("--out", required=True, help="where to save the drafter (a directory with mmspec.json; use it "
                    "with `mmspec image --drafter DIR`)")
    _add_resume_arguments(ti)
    ti.set_defaults(func=cmd_train)

    ev = sub.add_parser("eval", help="evaluation suites (code, chat, vlm, image) -> results.json, report.md, plots; "
                        "also python -m mmspec.eval, and under accelerate launch")
    add_eval_arguments(ev)
    ev.set_defaults(func=cmd_eval)

    zoo_p = sub.add_parser("zoo", help="the tiny model zoo: build or list")
    zoo_sub = zoo_p.add_subparsers(dest="zoo_command", required=True)
    zb = zoo_sub.add_parser("build", help="train the zoo models (deterministic seeds)")
    zb.add_argument("--family", default="all", choices=["all", "code", "vlm", "image"])
    zb.add_argument("--micro", action="store_true", help="seconds-sized versions (for tests)")
    zb.add_argument("--only", default=None, help="comma list of model names to (re)build, e.g. vlm-msd,vlm-flash")
    zb.add_argument("--home", default=None, help="where to write (default: $MMSPEC_HOME or the checkout's zoo/; "
                    "--micro refuses to write into the checkout's shipped zoo/ without --force)")
    zb.add_argument("--force", action="store_true", help="let a --micro build overwrite the shipped zoo")
    zb.add_argument("--device", default="cpu", help="train on 'cpu' (default) or 'cuda'; data is made on the CPU "
                    "either way and an interrupted build resumes on either")
    zl = zoo_sub.add_parser("list", help="what is built, with key metrics and whether its files match the "
                            "recorded hashes")
    zl.add_argument("--home", default=None)
    zr = zoo_sub.add_parser("record-hashes", help="record the sha256 of every model file in its zoo.json "
                            "(after replacing files by hand); loading checks them")
    zr.add_argument("--home", default=None)
    zoo_p.set_defaults(func=cmd_zoo)
    return parser


def _terminate(signum, frame):
    """A SIGTERM (a job's time limit, ``kill``) unwinds like Ctrl-C: run folders discard their staging copy."""
    raise KeyboardInterrupt(f"terminated by signal {signum}")


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EXPECTED_ERRORS as err:
        print(f"mmspec: error: {error_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: run folders were left as they were before the command
        print("mmspec: interrupted (an earlier run in --out is untouched; nothing half-written is kept; a training "
              "run resumes with --resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
