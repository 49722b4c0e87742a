"""Batch scaling: every method at batch sizes 1, 2, 4, ... on the same prompts, against plain HF decoding at the
same batch size (``mmspec bench --suite code|vlm --batch-sizes 1,2,4,8,16``).

Speculation trades target compute for fewer sequential steps; as the batch grows a step's compute grows with it,
so a speculative method can fall behind plain decoding (the complaint vLLM #27379 / SGLang's auto-spec answer).
The sweep shows where: per method and batch size, the speedup over HF's plain ``generate`` run on the same
batches, tokens/s in total and per row, τ, and whether every row equals plain decoding's.

Rows of a batch are the suite's prompts taken in order, left-padded; each row generates exactly
``max_new_tokens`` (EOS off, so every row of a batch does the same work). HF's assisted generation and prompt
lookup run at batch 1 only (HF refuses larger batches): their cells are empty beyond it.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..timing import device_name
from ..training.loop import to_device
from .bench import AUTO, auto_factories, build_runner, split_prompt, time_methods

HF_BATCH_ONE = ("hf-assisted", "hf-prompt-lookup")  # HF generate refuses these at batch > 1


def collate(prompts: list, pad_id: int) -> dict:
    """One left-padded batch (``input_ids``, ``attention_mask``, and every other prompt tensor such as
    ``pixel_values`` concatenated along the batch) from ``[1, L]`` id tensors or dicts with ``input_ids``."""
    parts = [split_prompt(p) for p in prompts]
    width = max(ids.shape[1] for ids, _ in parts)
    ids = torch.full((len(parts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(parts), width), dtype=torch.long)
    for b, (row, _) in enumerate(parts):
        ids[b, width - row.shape[1]:] = row[0]
        mask[b, width - row.shape[1]:] = 1
    batch = {"input_ids": ids.to(parts[0][0].device), "attention_mask": mask.to(parts[0][0].device)}
    for key in parts[0][1]:
        batch[key] = torch.cat([rest[key] for _, rest in parts])
    return batch


def batch_sweep(target, draft, prompts: list, methods: list[str], batch_sizes: list[int], max_new_tokens: int = 64,
                num_tokens: int | None = None, extra: dict | None = None, pad_id: int = 0, repeats: int = 1,
                warmup: int = 1, seed: int = 0, progress: bool = True) -> dict:
    """Time ``methods`` (and ``plain``) on batches of the prompts at each batch size; see the module docstring."""
    if not batch_sizes or any(not isinstance(b, int) or isinstance(b, bool) or b < 1 for b in batch_sizes):
        raise ValueError(f"batch sizes must be ints >= 1, got {batch_sizes}")
    if max(batch_sizes) > len(prompts):
        raise ValueError(f"batch size {max(batch_sizes)} needs at least that many prompts; the suite has "
                         f"{len(prompts)} (raise --prompts)")
    extra = dict(extra or {})
    methods = ["plain"] + [m for m in methods if m != "plain"]
    extra.update(auto_factories(methods, extra, draft, num_tokens))
    sampling = dict(do_sample=False, temperature=1.0, seed=seed)
    runners = {m: build_runner(m, target, draft, num_tokens, max_new_tokens, sampling, extra.get(m), None)
               for m in methods}
    runners = {m: r for m, r in runners.items() if r is not None}
    rows = []
    for b in batch_sizes:
        batches = [to_device(collate(prompts[i: i + b], pad_id), target.device)
                   for i in range(0, len(prompts) - b + 1, b)]
        mine = {m: r for m, r in runners.items() if b == 1 or m not in HF_BATCH_ONE}
        runs = time_methods(mine, batches, repeats, warmup, seed, progress, desc=f"batch {b}")
        plain_secs = statistics.median(sum(t) for t in runs["plain"]["times"])
        for m, run in runs.items():
            secs = statistics.median(sum(t) for t in run["times"])
            tokens = len(batches) * b * max_new_tokens
            fwd = [s for s in run["stats"] if s is not None]
            tau = sum(s.new_tokens for s in fwd) / sum(s.row_forwards for s in fwd) if fwd else None
            exact = all(torch.equal(o, p) for o, p in zip(run["outputs"], runs["plain"]["outputs"]))
            rows.append({"batch": b, "method": m, "batches": len(batches), "seconds": secs,
                         "speedup": plain_secs / secs, "tokens_per_s": tokens / secs,
                         "tokens_per_s_per_row": tokens / secs / b, "tau": 1.0 if m == "plain" else tau,
                         "exact": exact})
        if progress:  # one line per batch size, so a run cut short still shows what it measured
            tqdm.write(f"batch {b}: " + ", ".join(f"{r['method']} {_cell(r, ' τ {:.2f}')}" for r in rows
                                                  if r["batch"] == b))
    return {"config": dict(batch_sizes=batch_sizes, methods=methods, prompts=len(prompts),
                           max_new_tokens=max_new_tokens, repeats=repeats, warmup=warmup,
                           threads=torch.get_num_threads(), torch=torch.__version__,
                           device=device_name(target.device)),
            "results": rows}


def _cell(row: dict, tau_format: str) -> str:
    """A result's speedup, its τ (``tau_format``; not for plain decoding) and ✗ where a row differs from plain's."""
    tau = tau_format.format(row["tau"]) if row["tau"] is not None and row["method"] != "plain" else ""
    return f"{row['speedup']:.2f}×{tau}{'' if row['exact'] else ' ✗'}"


def to_markdown(sweep: dict, title: str) -> str:
    cfg = sweep["config"]
    sizes = cfg["batch_sizes"]
    lines = [f"# {title}", "",
             f"Speedup over HF plain `generate` at the same batch size (τ in brackets); {cfg['prompts']} prompts taken "
             f"in order as batches, {cfg['max_new_tokens']} new tokens per row (EOS off), median of {cfg['repeats']} "
             f"round(s) after {cfg['warmup']} warm-up call(s), {cfg['threads']} threads, on {cfg.get('device', 'cpu')}. ✗: a row differs from plain "
             "decoding's.", "",
             "| method | " + " | ".join(f"batch {b}" for b in sizes) + " |", "|---|" + "---|" * len(sizes)]
    by = {(r["method"], r["batch"]): r for r in sweep["results"]}
    for m in cfg["methods"]:
        cells = []
        for b in sizes:
            r = by.get((m, b))
            if r is None:
                cells.append("–")
                continue
            cells.append(_cell(r, " ({:.2f})"))
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", "Tokens/s in total (per row):", "", "| method | " + " | ".join(f"batch {b}" for b in sizes) + " |",
              "|---|" + "---|" * len(sizes)]
    for m in cfg["methods"]:
        cells = [f"{by[(m, b)]['tokens_per_s']:.0f} ({by[(m, b)]['tokens_per_s_per_row']:.0f})" if (m, b) in by
                 else "–" for b in sizes]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_sweep(sweep: dict, path: Path, title: str) -> Path:
    import matplotlib  # noqa: PLC0415 - plotting only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6, 4))
    for m in sweep["config"]["methods"]:
        pts = [(r["batch"], r["speedup"]) for r in sweep["results"] if r["method"] == m]
        if len(pts) > 1 or m != "plain":
            ax.plot(*zip(*pts), marker="o", label=m)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("speedup vs HF plain at that batch size")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_sweep(sweep: dict, out: Path, title: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    js, md, png = out / "batch_sweep.json", out / "batch_sweep.md", out / "batch_sweep.png"
    js.write_text(json.dumps(sweep, indent=1))
    md.write_text(to_markdown(sweep, title))
    plot_sweep(sweep, png, title)
    return [js, md, png]


__all__ = ["AUTO", "collate", "batch_sweep", "to_markdown", "plot_sweep", "write_sweep", "HF_BATCH_ONE"]
