"""``mmspec eval`` / ``python -m mmspec.eval``: run suites, merge the processes' records, write the run directory
(``config.yaml``, ``results.json``, ``report.md``, PNG plots; ``image/`` from the image suite)."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import torch
import transformers

from ..cli_errors import EXPECTED_ERRORS, error_line
from ..zoo import placed_on
from .aggregate import merge_shards, summarise_suite
from .config import EvalConfig, add_eval_arguments, config_from_args
from .cost_model import OWN_PLAIN
from .datasets import sample_questions
from .distributed import Processes
from .image_suite import run_image_suite
from .load import load_average, load_check
from .plots import plot_accept_hist, plot_speed_quality, plot_speedup
from .report import headline, write_outputs
from .run_dir import RunDirectory
from .spec_bench import SUITES as SPEC_BENCH_SUITES
from .spec_bench import write_answer_files
from .suites import build_suite


def environment(procs: Processes) -> dict:
    return {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
            "threads": torch.get_num_threads(), "processes": procs.world,
            "device": "cuda" if torch.cuda.is_available() else "cpu"}


def zoo_device(cfg: EvalConfig, suite: str) -> str | None:
    """Where ``suite``'s zoo models load: ``--device`` for the text and VLM suites; the image suite's models go
    where ``--image-device`` puts them (the CPU by default)."""
    return None if suite == "image" else cfg.device


def run_eval(cfg: EvalConfig) -> dict | None:
    """Run ``cfg``; returns the results on the main process (None on the others)."""
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    procs = Processes()
    run_dir = RunDirectory(cfg.out)
    if procs.is_main:
        run_dir.check()  # before minutes of loading
    t_start = time.perf_counter()
    with torch.random.fork_rng():  # cfg.seed for every draw of the run; the caller's global RNG is restored after
        torch.manual_seed(cfg.seed)
        if "chat" in cfg.suites and cfg.chat_data is None:
            cfg.chat_data = str(sample_questions())
        # load and validate everything before timing; on a multi-GPU launch each process takes its own GPU
        if cfg.device is not None and procs.world > 1:
            raise ValueError("--device places every zoo model on one device; a multi-process launch gives each "
                             "process its own GPU")
        suites = []
        for name in cfg.suites:
            with placed_on(zoo_device(cfg, name)):
                suites.append(build_suite(cfg, name, procs.device))
        cfg.check_methods_known({s.name: s.available for s in suites})
        cfg.methods = {s.name: s.methods for s in suites}  # resolved: the re-run does exactly this
        for s in suites:
            if s.name == "image":
                cfg.image_classes = [it.class_id for it in s.items]
        out = run_dir.open() if procs.is_main else run_dir.staging  # everything is written here, renamed at the end
        try:
            results = _run_suites(cfg, suites, procs, out, t_start)
        except BaseException:
            if procs.is_main:
                run_dir.discard()  # an earlier run in cfg.out stays as it was
            raise
    if results is not None:
        moved = run_dir.commit()
        if moved is not None:
            print(f"mmspec eval: the earlier run in {run_dir.final} was moved to {moved}", file=sys.stderr)
    return results


def _run_suites(cfg: EvalConfig, suites: list, procs: Processes, out: Path, t_start: float) -> dict | None:
    if procs.is_main:
        cfg.save(out / "config.yaml")
    procs.start(out)
    results = {"config": cfg.to_dict(), "environment": environment(procs), "suites": {}}
    load_start = load_average()
    for suite in suites:
        t0 = time.perf_counter()
        mine = procs.shard(len(suite.items))
        with placed_on(zoo_device(cfg, suite.name)):  # drafters load lazily, inside the suite's run
            records = suite.run(mine, procs.rank) if mine else []
        shards = procs.gather(out, suite.name, records)
        if not procs.is_main:
            continue
        merged = merge_shards(shards)
        skipped = [{k: r[k] for k in ("item", "id", "category", "skipped")} for r in merged if r.get("skipped")]
        merged = [r for r in merged if not r.get("skipped")]
        if not merged:
            raise ValueError(f"the {suite.name} suite ran no item: all {len(skipped)} were skipped "
                             f"({skipped[0]['skipped'] if skipped else 'none selected'})")
        entry = {"target": suite.target, "notes": suite.notes, "base": suite.base, "methods": suite.methods,
                 "lossless": [m for m in suite.methods if m != suite.base and not m.startswith("lantern")],
                 **summarise_suite(merged, suite.base), "records": merged, "skipped": skipped}
        if suite.name in SPEC_BENCH_SUITES and suite.tokenizer is not None:
            entry["spec_bench"] = write_answer_files(out / "spec_bench", suite.name, merged, suite.tokenizer,
                                                     suite.target.split(",")[0], suite.methods, suite.base)
        for r in merged:  # the answers' ids live in the answer files, not in results.json
            r.pop("new_ids", None)
        if suite.name == "image" and cfg.image_quality:
            entry.update(image_quality(cfg, suite, out))
        entry["wall_seconds"] = time.perf_counter() - t0
        results["suites"][suite.name] = entry
    if not procs.is_main:
        return None
    results["wall_seconds"] = time.perf_counter() - t_start
    results["load"] = load_check(load_start)  # timings taken on a busy machine say so
    if cfg.plots:
        draw_plots(results, out)
    write_outputs(results, out)
    return results


def image_quality(cfg: EvalConfig, suite, out: Path) -> dict:
    """The image suite's quality run (main process): FD / precision / recall / class fidelity per method, its
    own files under ``image/``, joined to this run's method names."""
    report = run_image_suite(per_class=cfg.image_per_class, cfg_scale=cfg.image_cfg_scale, sweep=cfg.image_sweep,
                             latency_images=cfg.image_latency, home=cfg.home, out_dir=out / "image",
                             device=cfg.image_device,
                             progress=cfg.progress,
                             only=[name for slug, (name, _, _) in suite.table.items()
                                   if slug in suite.methods and slug != OWN_PLAIN])  # a latency baseline only
    by_name = {r["name"]: r for r in report["results"]}
    joined = {slug: by_name[name] for slug, (name, _, _) in suite.table.items()
              if name in by_name and slug in suite.methods}
    files = sorted(str(p.relative_to(out)) for p in (out / "image").glob("*") if p.is_file())
    return {"quality": report, "quality_by_method": joined, "extra_files": files}


def draw_plots(results: dict, out: Path) -> None:
    for name, s in results["suites"].items():
        plots = {"speedup": plot_speedup(s["summary"], out / f"{name}_speedup.png", f"{name}: {s['target']}")}
        hist = plot_accept_hist(s["summary"], out / f"{name}_accept.png", name)
        if hist is not None:
            plots["accepted lengths"] = hist
        if s.get("quality_by_method"):
            speed = {r["method"]: r["speedup"] for r in s["summary"]}
            points = [{"method": m, "fd": q["fd_vs_reference"], "speedup": speed[m]}
                      for m, q in s["quality_by_method"].items() if speed.get(m) is not None]
            plots["speed–quality"] = plot_speed_quality(points, s["quality"]["ar_run_to_run_fd"],
                                                        out / f"{name}_speed_quality.png")
        s["plots"] = {k: str(Path(v).relative_to(out)) for k, v in plots.items()}


def build_parser(prog: str = "mmspec eval") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="evaluate speculative decoding methods: suites code, "
                                     "chat, vlm, image; writes results.json, report.md and plots to --out")
    return add_eval_arguments(parser)


def cli_eval(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    results = run_eval(cfg)
    if results is None:
        return 0
    print("\n".join(headline(results)))  # a Markdown table: not re-wrapped to the terminal's width
    if results["load"]["warning"]:
        print(f"warning: {results['load']['warning']}")
    print(f"wrote {cfg.out}/report.md, results.json, config.yaml{' and plots' if cfg.plots else ''} in "
          f"{results['wall_seconds']:.0f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = build_parser("python -m mmspec.eval").parse_args(argv)
    try:
        return cli_eval(args)
    except EXPECTED_ERRORS as err:
        print(f"mmspec eval: error: {error_line(err)}", file=sys.stderr)
        return 2


__all__ = ["run_eval", "cli_eval", "main", "build_parser"]
