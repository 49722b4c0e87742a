"""`mmspec demo`: the README's main job. Loads the model zoo and, per family, runs the best method
available today against plain decoding (and HF assisted generation for code), printing τ, speedup
and exactness; writes JSON/Markdown (and image grids) under the output folder, which appears whole when the demo
has finished (an earlier run there is moved aside: :func:`mmspec.eval.run_dir.run_folder`)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch
import transformers
from rich.console import Console
from rich.table import Table

from .eval.bench import compare, to_markdown
from .eval.code_suite import diffusion_factories
from .guidance import DEFAULT_CFG_SCALE
from .eval.datasets import vlm_items
from .eval.load import load_average, load_check
from .eval.run_dir import run_folder
from .eval.vlm_suite import feature_factories, vlm_prompts
from .pipeline import pipeline
from .training.dflash import tau_of
from .zoo import family_names, load, zoo_home
from .zoo import image_data
from .zoo import metrics as zoo_metrics
from .zoo import vlm_data as vd
from .zoo.code_data import completion_prompts, load_corpus
from .zoo.home import write_json
from .zoo.integrity import changed_since_commit, rebuild_hint, status


# the code methods the demo times: HF's baselines' best peer, the fastest AR-drafter method and prompt lookup, the
# DFlash block drafter's default row (its DDTree with a prompt-lookup branch, long continuations verified alone, the
# tree cut at 3%: the zoo's greedy default) and DEER (the diffusion drafters)
# from `mmspec eval --suite code`; one timed round, so the demo stays under 2 minutes on 2 CPU cores with the
# 15-layer code target (`mmspec eval` is where figures with a spread come from)
CODE_METHODS = ["plain", "hf-assisted", "chain", "prompt-lookup"]
BEST_TEXT_METHODS = ["dflash-lookup-cut", "deer"]
CODE_ROUNDS = 1
DIFFUSION_MODELS = ["code-dlm", "code-deer", "code-ngram", "code-dflash"]
# the VLM methods the demo shows besides plain decoding and the baselines, chosen from `mmspec eval --suite vlm`
BEST_VLM_METHODS = ["msd-chain", "flash-1", "dflash"]
IMAGE_LATENCY_PICTURES = 4  # pictures the demo times at batch 1, plain AR against the zoo default image method


def step(console: Console, text: str) -> None:
    """A status line as the demo goes (it runs for a minute or more: silence looks like a hang)."""
    console.print(f"[dim]… {text}[/dim]", highlight=False)


def print_table(report: dict, console: Console, title: str) -> None:
    table = Table(title=title)
    for col in ("method", "τ (mean accepted)", "speedup vs plain", "exact", "time (s)"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for r in report["results"]:
        table.add_row(r["method"], f"{r['tau']:.2f}" if r["tau"] is not None else "n/a", f"{r['speedup']:.2f}×",
                      f"{100 * r['exact']:.0f}%" if r["exact"] is not None else "n/a", f"{r['seconds']:.3f}")
    console.print(table)
    if (report.get("load") or {}).get("warning"):
        console.print(f"[yellow]warning: {report['load']['warning']}[/yellow]")


def code_demo(out: Path, console: Console, num_prompts: int, max_new_tokens: int) -> dict:
    step(console, "code: loading code-target, code-drafter and the diffusion drafters")
    target, draft = load("code-target"), load("code-drafter")
    tok = target.tokenizer
    prompts = completion_prompts(load_corpus(), "test", limit=num_prompts)
    ids = [tok(p.prompt, return_tensors="pt", add_special_tokens=False).input_ids for p in prompts]
    methods = list(CODE_METHODS)
    extra = {}
    if all((zoo_home() / n / "zoo.json").exists() for n in DIFFUSION_MODELS):
        factories = diffusion_factories()
        extra = {m: factories[m] for m in BEST_TEXT_METHODS}
        methods += BEST_TEXT_METHODS
    step(console, f"code: timing {len(methods)} methods on {len(ids)} prompts (1 warm-up, {CODE_ROUNDS} round)")
    report = compare(target.model, draft.model, ids, methods, max_new_tokens=max_new_tokens, repeats=CODE_ROUNDS,
                     progress=True, extra=extra, desc="code")
    report["config"].update(model="zoo:code-target", draft="zoo:code-drafter", prompts="held-out stdlib functions")
    print_table(report, console, f"code: {len(ids)} held-out completion prompts × {max_new_tokens} tokens, greedy")
    pipe = pipeline("zoo:code-target")  # the zoo default: code-dflash's tuned DDTree (zoo_defaults)
    sample = pipe(prompts[0].prompt, max_new_tokens=max_new_tokens, stop_at_eos=False)
    console.print(f"[dim]sample completion (mmspec.pipeline: code-target, {pipe.method}, greedy, "
                  f"τ {sample.stats.mean_accepted_tokens:.2f}):[/dim]")
    console.print(prompts[0].prompt + sample.texts[0], markup=False, highlight=False)
    write_json(out / "code.json", report)
    (out / "code.md").write_text(to_markdown(report))
    return report


def vlm_demo(out: Path, console: Console, num_prompts: int, max_new_tokens: int) -> dict:
    """LLaVA target (image prefill, then tree verification of the text): the text-only baseline drafter,
    prompt lookup, the best feature drafters (MSD, FLASH) and the DFlash block drafter, every method stopping at
    EOS."""
    step(console, "vlm: loading vlm-target and its drafters")
    target = load("vlm-target")
    processor = target.tokenizer
    prompts = vlm_prompts(processor, num_prompts, "mixed")  # half captions, half questions
    n_new = min(max_new_tokens, 48)
    factories = feature_factories()
    methods = ["plain", "prompt-lookup", "chain"] + BEST_VLM_METHODS
    eos = target.extras["tokenizer"].eos_token_id
    step(console, f"vlm: timing {len(methods)} methods on {len(prompts)} scenes (1 warm-up, 2 rounds)")
    report = compare(target.model, None, prompts, methods, max_new_tokens=n_new, num_tokens=4, repeats=2,
                     progress=True, extra={m: factories[m] for m in methods if m in factories}, eos_token_id=eos,
                     desc="vlm")
    report["config"].update(model="zoo:vlm-target", draft="zoo:vlm-drafter (text only) / vlm-msd / vlm-flash / vlm-dflash",
                            prompts="held-out scenes: captions and questions")
    print_table(report, console, f"vlm: {len(prompts)} held-out scenes (captions and questions), up to {n_new} "
                                 "tokens, greedy, stopping at EOS")
    pipe = pipeline("zoo:vlm-target")  # the zoo default: the DFlash block drafter
    items, scenes = vlm_items(2), vd.scenes("test", 2)  # the first two prompts above
    res = pipe.generate(images=[sc.image() for sc in scenes], prompts=[vd.with_image(it.question) for it in items],
                        max_new_tokens=n_new)
    for it, answer in zip(items, res.texts):
        console.print(f"[dim]{it.question.splitlines()[0]}[/dim] → {answer}  [dim](mmspec.pipeline, {pipe.method})[/dim]",
                      markup=True, highlight=False)
    write_json(out / "vlm.json", report)
    (out / "vlm.md").write_text(to_markdown(report))
    return report


def image_demo(out: Path, console: Console, num_prompts: int, max_new_tokens: int, final: Path | None = None) -> dict:
    """Class-conditional sampling with classifier-free guidance, decoded by the VQ model and scored by the
    zoo's classifier. (Speculative decoding of image codes comes with relaxed acceptance.)"""
    step(console, "image: sampling one picture per class with CFG")
    entry, clf = load("image-target"), load("image-classifier")
    pipe = pipeline(entry.model, method="ar", vq=entry.extras["vq"])  # plain AR sampling with CFG (no drafter)
    layout = pipe.layout
    classes = list(range(image_data.NUM_CLASSES))
    res = pipe.generate(classes, cfg_scale=DEFAULT_CFG_SCALE, temperature=1.0, seed=0)
    pictures, seconds = res.images, res.seconds
    with torch.no_grad():
        fidelity = float((clf.model.predict(pictures) == torch.tensor(classes)).float().mean())
    grid = out / "image_samples.png"
    image_data.image_grid(pictures, nrow=len(classes) // 2 or 1, scale=3).save(grid)
    shown = (final or out) / grid.name  # where the grid is once the run folder is in place
    report = {"classes": [image_data.CLASSES[c] for c in classes], "cfg_scale": DEFAULT_CFG_SCALE, "seconds": seconds,
              "tokens_per_image": layout.num_codes, "class_fidelity": fidelity, "grid": str(shown),
              "zoo_metrics": {k: v for k, v in zoo_metrics("image-target").items() if k.startswith("class_fidelity")}}
    console.print(f"image: {len(classes)} class-conditional samples (CFG 3.0, {layout.num_codes} codes each) in "
                  f"{seconds:.1f}s; the classifier labels {100 * fidelity:.0f}% with their class → {shown}")
    report["latency"] = image_latency(console)
    write_json(out / "image.json", report)
    return report


def image_latency(console: Console) -> dict:
    """The zoo default image method (``mmspec.pipeline("zoo:image-target")``) and the lossless block-drafter DDTree
    under the Gumbel coupling against plain AR, one picture at a time (batch 1, the papers' latency setting),
    interleaved per picture after one warm-up of each. Plain AR samples under the coupling too (the same cost as
    p/q sampling), so the lossless row's pictures are checked to be plain AR's own."""
    pipe = pipeline("zoo:image-target")
    classes = list(range(IMAGE_LATENCY_PICTURES))
    lossless = dict(method="spec", drafter="dflash", tree="ddtree", coupling="gumbel")
    step(console, f"image: timing plain AR, {pipe.method} ({pipe.drafter_kind} drafter) and lossless spec (dflash "
                  f"DDTree, Gumbel coupling) on {len(classes)} pictures, one at a time")
    pipe.generate([classes[0]], method="ar", seed=0, coupling="gumbel")
    pipe.generate([classes[0]], seed=0)
    pipe.generate([classes[0]], seed=0, **lossless)
    ar = spec = exact_seconds = 0.0
    stats, exact_stats, same = [], [], 0
    for c in classes:
        plain = pipe.generate([c], method="ar", seed=c, coupling="gumbel")
        ar += plain.seconds
        res = pipe.generate([c], seed=c)
        spec += res.seconds
        stats.append(res.stats)
        exact = pipe.generate([c], seed=c, **lossless)
        exact_seconds += exact.seconds
        exact_stats.append(exact.stats)
        same += bool(torch.equal(exact.codes, plain.codes))
    tau = tau_of(stats)
    out = {"method": pipe.method, "drafter": pipe.drafter_kind, "config": res.config,  # the settings it applied
           "pictures": len(classes), "ar_seconds": ar, "seconds": spec, "speedup": ar / spec, "tau": tau,
           "lossless": {"config": exact.config, "seconds": exact_seconds, "speedup": ar / exact_seconds,
                        "tau": tau_of(exact_stats), "pictures_identical_to_plain_ar": same}}
    kind = "lossless" if pipe.method == "spec" else "relaxed acceptance: the image suite reports its distortion"
    console.print(f"image: {len(classes)} pictures one at a time: plain AR {ar:.1f}s, {pipe.method} with the "
                  f"{pipe.drafter_kind} drafter {spec:.1f}s → [bold]{ar / spec:.2f}×[/bold] (τ {tau:.2f}; {kind}); "
                  f"lossless spec, dflash DDTree under the Gumbel coupling, {exact_seconds:.1f}s → "
                  f"[bold]{ar / exact_seconds:.2f}×[/bold] (τ {out['lossless']['tau']:.2f}; {same}/{len(classes)} "
                  "pictures identical to plain AR's)")
    return out


def zoo_files_usable(home: Path, names: list[str], console: Console) -> bool:
    """Say when a zoo model is not the shipped one (a micro build, hand-replaced or damaged files); False when
    one is damaged (loading it would fail)."""
    ok, changed = True, changed_since_commit(home)
    for name in names:
        line = status(name, home / name, name in changed)
        if line.startswith("damaged"):
            console.print(f"[red]{name}: {line}; {rebuild_hint(name)}[/red]")
            ok = False
        elif line != "ok":
            console.print(f"[yellow]{name}: {line} — its figures are not the shipped model's[/yellow]")
    return ok


def run_demo(out_dir: str | Path = "runs/demo", num_prompts: int = 8, max_new_tokens: int = 64) -> int:
    """The demo into ``out_dir``, written as one run: into a hidden sibling renamed into place at the end (an
    earlier run there is moved aside and named; a failed demo leaves ``out_dir`` as it was)."""
    transformers.logging.set_verbosity_error()  # HF's assisted-generation deprecation chatter
    transformers.utils.logging.disable_progress_bar()
    with run_folder(out_dir, "demo") as run:
        return _demo(run.staging, Path(out_dir), num_prompts, max_new_tokens)


def _demo(out: Path, final: Path, num_prompts: int, max_new_tokens: int) -> int:
    console = Console()
    home = zoo_home()
    console.print(f"[bold]mmspec demo[/bold] — zoo at {home}; all runs offline, greedy outputs checked against "
                  "plain decoding.")
    load_start = load_average()
    reports = {}
    for family, run in (("code", code_demo), ("vlm", vlm_demo), ("image", partial(image_demo, final=final))):
        names = family_names(family) if family != "code" else ["code-target", "code-drafter"]
        needed = [n for n in names if not (home / n / "zoo.json").exists()]
        if needed:
            console.print(f"[yellow]{family}: not in the zoo yet ({', '.join(needed)} missing); "
                          f"`mmspec zoo build --family {family}` builds it[/yellow]")
            continue
        if not zoo_files_usable(home, names, console):
            continue
        reports[family] = run(out, console, num_prompts, max_new_tokens)
    if not reports:
        console.print("[red]the zoo is empty: nothing to demonstrate[/red]")
        return 1
    bad = [f"{fam}:{r['method']}" for fam, rep in reports.items() for r in rep.get("results", [])
           if r.get("exact") is not None and r["exact"] < 1.0]
    load = load_check(load_start)
    write_json(out / "load.json", load)
    if load["warning"]:
        console.print(f"[yellow]warning: {load['warning']}[/yellow]")
    console.print(f"wrote results to {final}/")
    if bad:
        console.print(f"[red]not exact: {bad}[/red]")
        return 1
    return 0
