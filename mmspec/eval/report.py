"""The run directory's ``results.json`` and ``report.md``: Spec-Bench-like tables (method × category speedup,
then τ, tokens/s and exactness), the plots, and for images the quality figures of the image suite."""

from __future__ import annotations

import json
from pathlib import Path

from .cost_model import OWN_PLAIN, cost_table
from .image_quality import fd_against_spread


def _f(x, fmt: str, none: str = "n/a") -> str:
    return none if x is None else format(x, fmt)


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def method_table(summary: list[dict]) -> list[str]:
    lines = ["| method | τ (mean accepted) | speedup | tokens/s | exact | drafter share | time (s) | prompts |",
             "|---|---|---|---|---|---|---|---|"]
    for r in summary:
        mark = " ⚠" if r.get("flags") else ""
        lines.append(f"| {r['method']}{mark} | {_f(r['tau'], '.2f')} | {_f(r['speedup'], '.2f')}× | "
                     f"{_f(r['tokens_per_s'], '.1f')} | {_pct(r['exact'])} | {_pct(r['draft_share'])} | "
                     f"{r['seconds']:.2f} | {r['prompts']} |")
    flagged = [r for r in summary if r.get("flags")]
    if flagged:
        lines += ["", *[f"⚠ {r['method']}: " + "; ".join(r["flags"]) + "." for r in flagged]]
    return lines


def slot_table(summary: list[dict], slots: int = 8) -> list[str]:
    """Per-slot acceptance in real decoding (share of steps accepted through slot j) of the methods that ever
    accepted 3 drafts or more; empty when none did."""
    rows = [r for r in summary if len(r.get("slot_acceptance") or []) >= 3]
    if not rows:
        return []
    lines = ["Acceptance per draft slot (share of verification steps accepted through slot j):", "",
             "| method | " + " | ".join(f"slot {j}" for j in range(1, slots + 1)) + " |", "|---|" + "---|" * slots]
    for r in rows:
        acc = r["slot_acceptance"]
        lines.append(f"| {r['method']} | " + " | ".join(_pct(acc[j]) if j < len(acc) else "–" for j in range(slots))
                     + " |")
    return lines + [""]


def latency_table(summary: list[dict]) -> list[str]:
    """Time to first token and per output token (p50 / p95 over prompts, every method streamed alike) and the
    speedup Spec-Bench's speed.py computes from the answer files (a mean of per-question rates)."""
    rows = [r for r in summary if r.get("ttft_p50") is not None]
    if not rows:
        return []
    ms = lambda x: _f(None if x is None else 1000 * x, ".1f")  # noqa: E731
    lines = ["Latency (ms; p50 / p95 over prompts) and Spec-Bench's speedup arithmetic:", "",
             "| method | TTFT p50 | TTFT p95 | TPOT p50 | TPOT p95 | Spec-Bench speedup |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {ms(r['ttft_p50'])} | {ms(r['ttft_p95'])} | {ms(r['tpot_p50'])} | "
                     f"{ms(r['tpot_p95'])} | {_f(r.get('specbench_speedup'), '.2f')}× |")
    return lines + [""]


def hist_table(summary: list[dict], longest: int = 8) -> list[str]:
    """Share of verification steps that emitted n tokens (n - 1 drafts accepted), per method that drafts."""
    rows = [r for r in summary if sum((r.get("accept_hist") or {}).values()) and len(r["accept_hist"]) > 1]
    if not rows:
        return []
    heads = [str(n) for n in range(1, longest)] + [f"{longest}+"]
    lines = ["Tokens emitted per verification step (share of steps):", "",
             "| method | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for r in rows:
        hist = {int(k): v for k, v in r["accept_hist"].items()}
        steps = sum(hist.values())
        cells = [hist.get(n, 0) / steps for n in range(1, longest)]
        cells.append(sum(v for n, v in hist.items() if n >= longest) / steps)
        lines.append(f"| {r['method']} | " + " | ".join(_pct(c) for c in cells) + " |")
    return lines + [""]


def category_table(categories: dict[str, list[dict]], summary: list[dict], key: str, fmt: str, unit: str = "") -> list[str]:
    """Spec-Bench layout: one row per method, one column per category, then the overall figure."""
    cats = list(categories)
    lines = ["| method | " + " | ".join(cats) + " | overall |", "|---|" + "---|" * (len(cats) + 1)]
    for r in summary:
        cells = []
        for c in cats:
            row = next((x for x in categories[c] if x["method"] == r["method"]), None)
            cells.append(_f(row[key] if row else None, fmt) + (unit if row and row[key] is not None else ""))
        overall = _f(r[key], fmt) + (unit if r[key] is not None else "")
        lines.append(f"| {r['method']} | " + " | ".join(cells) + f" | **{overall}** |")
    return lines


def quality_table(suite: dict) -> list[str]:
    q = suite["quality"]
    ar_fds = q.get("ar_run_to_run_fd_all") or [q["ar_run_to_run_fd"]]
    lines = [f"Quality (the image suite: {q['config']['images']} pictures, {q['config']['per_class']} per class, "
             f"batched; Fréchet distance / precision / recall on the zoo classifier's features against a plain-AR "
             f"reference run; plain AR's own run-to-run FD: **{q['ar_run_to_run_fd']:.2f}**, range "
             f"{min(ar_fds):.2f}–{max(ar_fds):.2f} over {len(ar_fds)} seeds). Speedup and τ here are this run's "
             "per-class latency figures.", "",
             "Output TV: the exact total variation of each step's first emitted token from the target's (max / "
             "mean); max S_m: the most mass moved onto one candidate (not a bound on the output). FD vs plain AR's "
             "range: inside it, or how far above its top.", "",
             "| method | τ | speedup vs AR | output TV max / mean | max S_m per candidate | FD | FD vs plain AR's range | "
             "precision | recall | class fidelity |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    speed = {r["method"]: r for r in suite["summary"]}
    for slug, r in suite.get("quality_by_method", {}).items():
        s = speed.get(slug)
        lines.append(f"| {slug} | {_f(s['tau'] if s else None, '.2f')} | {_f(s['speedup'] if s else None, '.2f')}× | "
                     f"{_f(r.get('max_output_tv'), '.3f', '–')} / {_f(r.get('mean_output_tv'), '.3f', '–')} | "
                     f"{_f(r.get('max_moved_mass'), '.3f', '–')} | {r['fd_vs_reference']:.3f} | "
                     f"{fd_against_spread(r['fd_vs_reference'], ar_fds)} | {r['precision']:.2f} | "
                     f"{r['recall']:.2f} | {_pct(r['class_fidelity'])} |")
    return lines


def headline(results: dict) -> list[str]:
    """The summary table: per suite, the base's throughput, the fastest method and the highest-τ method."""
    lines = ["| suite | target | prompts | plain tokens/s | fastest method | its speedup | its τ | highest τ | "
             "lossless methods exact |", "|---|---|---|---|---|---|---|---|---|"]
    for name, s in results["suites"].items():
        rows = s["summary"]
        base = next(r for r in rows if r["method"] == s["base"])
        # the own-engine baseline (no drafter) is a reference, not a contender; a flagged speedup is not headlined
        contenders = [r for r in rows if r["method"] not in (s["base"], OWN_PLAIN)]
        if not contenders:
            lines.append(f"| {name} | {s['target']} | {base['prompts']} | {_f(base['tokens_per_s'], '.1f')} | "
                         "n/a (only the baseline ran) | – | – | – | – |")
            continue
        others = [r for r in contenders if not r.get("flags")] or contenders
        fast = max(others, key=lambda r: r["speedup"] or 0)
        taus = [r for r in contenders if r["tau"] is not None]  # τ does not depend on timing
        best_tau = max(taus, key=lambda r: r["tau"]) if taus else None
        exact = [r["exact"] for r in rows if r["exact"] is not None and r["method"] in s.get("lossless", [])]
        lines.append(f"| {name} | {s['target']} | {base['prompts']} | {_f(base['tokens_per_s'], '.1f')} | "
                     f"{fast['method']}{' ⚠' if fast.get('flags') else ''} | **{_f(fast['speedup'], '.2f')}×** | {_f(fast['tau'], '.2f')} | "
                     + (f"{best_tau['method']} ({best_tau['tau']:.2f})" if best_tau else "n/a") + " | "
                     + (f"{sum(e == 1.0 for e in exact)}/{len(exact)}" if exact else "n/a (sampling)") + " |")
    return lines


def to_markdown(results: dict) -> str:
    cfg, env = results["config"], results["environment"]
    mode = f"sampling, T = {cfg['temperature']}" if cfg["do_sample"] else "greedy"
    lines = [
        "# mmspec eval report", "",
        f"{mode}; seed {cfg['seed']}; {cfg['warmup']} warm-up call(s) per method, median of {cfg['repeats']} timed "
        f"round(s) per prompt; {env['processes']} process(es), {env['threads']} thread(s) each, torch {env['torch']}, "
        f"transformers {env['transformers']}; wall time {results['wall_seconds']:.0f} s. Speedup = the base method's "
        "seconds / the method's seconds, summed over the same prompts, measured in the same process (per shard, then "
        "summed: see README, Evaluation). τ = new tokens / target forwards. Re-run: "
        f"`mmspec eval --config {Path(cfg['out']) / 'config.yaml'}`.", "",
        *([f"**Warning:** {results['load']['warning']}.", ""] if (results.get("load") or {}).get("warning") else []),
        "## Summary", "", *headline(results), "",
    ]
    for name, s in results["suites"].items():
        lines += [f"## {name} — {s['target']}", "", s["notes"] + ".", "", *method_table(s["summary"]), ""]
        if s.get("cost_model"):
            lines += [*cost_table(s["cost_model"], s["base"]), ""]
        lines += slot_table(s["summary"])
        lines += hist_table(s["summary"])
        lines += latency_table(s["summary"])
        if s.get("spec_bench"):
            lines += ["Spec-Bench answer files (one per method; `speed.py` / `equal.py` run on them unchanged, see "
                      "spec_bench/README.md): " + ", ".join(f"[{m}]({f})" for m, f in s["spec_bench"]["files"].items()),
                      ""]
        if s.get("skipped"):
            lines += [f"Skipped {len(s['skipped'])} item(s), not counted above: "
                      + "; ".join(f"{r['id']} ({r['skipped']})" for r in s["skipped"]) + ".", ""]
        if len(s["categories"]) > 1:
            lines += ["Speedup by category:", "", *category_table(s["categories"], s["summary"], "speedup", ".2f", "×"),
                      "", "τ by category:", "", *category_table(s["categories"], s["summary"], "tau", ".2f"), ""]
        if len(s["shards"]) > 1:
            lines += ["Per process (speedups are timed within each process; the table above sums their seconds):", "",
                      "| method | " + " | ".join(f"rank {k}" for k in s["shards"]) + " |",
                      "|---|" + "---|" * len(s["shards"])]
            for r in s["summary"]:
                cells = []
                for rows in s["shards"].values():
                    x = next((y for y in rows if y["method"] == r["method"]), None)
                    cells.append(f"{_f(x['speedup'] if x else None, '.2f')}× ({x['prompts'] if x else 0})")
                lines.append(f"| {r['method']} | " + " | ".join(cells) + " |")
            lines.append("")
        if s.get("quality"):
            lines += [*quality_table(s), ""]
        for label, f in s.get("plots", {}).items():
            lines.append(f"![{name} {label}]({f})")
        if s.get("extra_files"):
            lines += ["", "Also written: " + ", ".join(f"[{Path(f).name}]({f})" for f in s["extra_files"])]
        lines.append("")
    return "\n".join(lines)


def write_outputs(results: dict, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / "results.json", out / "report.md"
    js.write_text(json.dumps(results, indent=1, ensure_ascii=False))
    md.write_text(to_markdown(results))
    return js, md


__all__ = ["to_markdown", "write_outputs", "method_table", "latency_table", "hist_table", "category_table", "headline"]
