"""`mmspec demo`: the README's main job. Loads the model zoo and, per family, runs the best method
available today against plain decoding (and HF assisted generation for code), printing τ, speedup
and exactness; writes JSON/Markdown (and image grids) under the output folder."""

from __future__ import annotations

from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from .eval.bench import compare, to_markdown
from .zoo import family_module, load
from .zoo.common import write_json, zoo_home


def print_table(report: dict, console: Console, title: str) -> None:
    table = Table(title=title)
    for col in ("method", "τ (mean accepted)", "speedup vs plain", "exact", "time (s)"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for r in report["results"]:
        table.add_row(r["method"], f"{r['tau']:.2f}" if r["tau"] is not None else "n/a", f"{r['speedup']:.2f}×",
                      f"{100 * r['exact']:.0f}%" if r["exact"] is not None else "n/a", f"{r['seconds']:.3f}")
    console.print(table)


def code_demo(out: Path, console: Console, num_prompts: int, max_new_tokens: int) -> dict:
    from .zoo.code_data import completion_prompts, load_corpus

    target, draft = load("code-target"), load("code-drafter")
    tok = target.tokenizer
    prompts = completion_prompts(load_corpus(), "test", limit=num_prompts)
    ids = [tok(p.prompt, return_tensors="pt", add_special_tokens=False).input_ids for p in prompts]
    report = compare(target.model, draft.model, ids,
                     ["plain", "hf-assisted", "hf-prompt-lookup", "mmspec-chain", "mmspec-tree",
                      "mmspec-prompt-lookup"], max_new_tokens=max_new_tokens, num_tokens=4, repeats=2,
                     progress=False)
    report["config"].update(model="zoo:code-target", draft="zoo:code-drafter", prompts="held-out stdlib functions")
    print_table(report, console, f"code: {len(ids)} held-out completion prompts × {max_new_tokens} tokens, greedy")
    with torch.no_grad():
        sample = target.model.generate(ids[0], do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=0)
    console.print("[dim]sample completion (code-target, greedy):[/dim]")
    console.print(prompts[0].prompt + tok.decode(sample[0, ids[0].shape[1]:], skip_special_tokens=True),
                  markup=False, highlight=False)
    write_json(out / "code.json", report)
    (out / "code.md").write_text(to_markdown(report))
    return report


def run_demo(out_dir: str | Path = "runs/demo", num_prompts: int = 8, max_new_tokens: int = 64) -> int:
    import transformers

    transformers.logging.set_verbosity_error()  # HF's assisted-generation deprecation chatter
    transformers.utils.logging.disable_progress_bar()
    console = Console()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    home = zoo_home()
    console.print(f"[bold]mmspec demo[/bold] — zoo at {home}; all runs offline, greedy outputs checked against "
                  "plain decoding.")
    reports = {}
    for family, run in (("code", code_demo),):
        needed = [n for n in family_module(family).NAMES if not (home / n / "zoo.json").exists()]
        if needed:
            console.print(f"[yellow]{family}: not in the zoo yet ({', '.join(needed)} missing); "
                          f"`mmspec zoo build --family {family}` builds it[/yellow]")
            continue
        reports[family] = run(out, console, num_prompts, max_new_tokens)
    if not reports:
        console.print("[red]the zoo is empty: nothing to demonstrate[/red]")
        return 1
    bad = [f"{fam}:{r['method']}" for fam, rep in reports.items() for r in rep["results"]
           if r.get("exact") is not None and r["exact"] < 1.0]
    console.print(f"wrote results to {out}/")
    if bad:
        console.print(f"[red]not exact: {bad}[/red]")
        return 1
    return 0
