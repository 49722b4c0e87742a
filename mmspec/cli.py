"""The ``mmspec`` command line: ``demo`` (the main job) and ``bench``."""

from __future__ import annotations

import argparse
import os
import sys

from rich.console import Console
from rich.table import Table


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


def cmd_bench(args) -> int:
    from .eval import run_bench, write_report

    methods = args.methods.split(",") if args.methods else None
    report = run_bench(model=args.model, draft=None if args.draft == "none" else args.draft, methods=methods,
                       num_prompts=args.prompts, prompt_length=args.prompt_length,
                       max_new_tokens=args.max_new_tokens, num_tokens=args.num_tokens, do_sample=args.do_sample,
                       temperature=args.temperature, repeats=args.repeats, seed=args.seed,
                       draft_layers=args.draft_layers)
    console = Console()
    _print_report(report, console, f"mmspec bench: {args.model} (draft {args.draft})")
    js, md = write_report(report, args.out)
    console.print(f"wrote {js} and {md}")
    return 0


def cmd_demo(args) -> int:
    """A small end-to-end run on tiny stock models, entirely offline."""
    from .eval import run_bench, write_report

    console = Console()
    console.print(
        "[bold]mmspec demo[/bold]: lossless speculative decoding on a tiny random Llama (stock HF class), "
        "offline.\nThe 'self' drafter is the target drafting for itself: it shows the engine's upper bound on "
        "τ (every draft accepted) but no speedup; prompt lookup is training-free and gains wherever the "
        "context repeats. Trained models arrive with the model zoo."
    )
    report = run_bench(model="tiny:llama", draft="self", num_prompts=args.prompts, max_new_tokens=args.max_new_tokens,
                       num_tokens=4, seed=0)
    _print_report(report, console, "demo: greedy, exactness vs plain HF decoding")
    js, md = write_report(report, args.out)
    console.print(f"wrote {js} and {md}")
    bad = [r["method"] for r in report["results"] if r["exact"] is not None and r["exact"] < 1.0]
    if bad:
        console.print(f"[red]not exact: {bad}[/red]")
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmspec", description="Lossless speculative decoding on stock HF models")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="small end-to-end run on the tiny offline models (the main job)")
    demo.add_argument("--prompts", type=int, default=4)
    demo.add_argument("--max-new-tokens", type=int, default=64)
    demo.add_argument("--out", default="runs/demo")
    demo.set_defaults(func=cmd_demo)

    bench = sub.add_parser("bench", help="methods side by side: tau, speedup vs plain and HF peers, exactness")
    bench.add_argument("--model", default="tiny:llama", help="tiny:<llama|qwen2|mistral> or a local checkpoint dir")
    bench.add_argument("--draft", default="tiny:llama",
                       help="draft model: tiny:<arch>, a local checkpoint dir, 'self' or 'none'")
    bench.add_argument("--draft-layers", type=int, default=1, help="layers of a tiny draft model")
    bench.add_argument("--methods", default=None, help="comma list; default all of: plain, hf-assisted, "
                       "hf-prompt-lookup, mmspec-chain, mmspec-tree, mmspec-dynamic, mmspec-prompt-lookup")
    bench.add_argument("--prompts", type=int, default=4)
    bench.add_argument("--prompt-length", type=int, default=48)
    bench.add_argument("--max-new-tokens", type=int, default=64)
    bench.add_argument("--num-tokens", type=int, default=4, help="draft length k")
    bench.add_argument("--do-sample", action="store_true")
    bench.add_argument("--temperature", type=float, default=1.0)
    bench.add_argument("--repeats", type=int, default=1)
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--out", default="runs/bench")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:
        print(f"mmspec: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
