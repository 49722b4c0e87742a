"""The report's PNG figures: speedup per method, accepted-length histograms, and the image speed–quality plane."""

from __future__ import annotations

from pathlib import Path


def _plt():
    """pyplot on the file-only Agg backend; matplotlib (~1 s to import, the backend chosen before pyplot loads)
    is imported only when a report draws its plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_speedup(summary: list[dict], path: Path, title: str) -> Path:
    """Horizontal bars of speedup vs the base method, τ written next to each bar."""
    plt = _plt()
    rows = [r for r in summary if r["speedup"] is not None]
    fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(rows) + 1.2))
    names = [r["method"] for r in rows][::-1]
    values = [r["speedup"] for r in rows][::-1]
    colors = ["#4c72b0" if v >= 1 else "#c44e52" for v in values]
    ax.barh(names, values, color=colors)
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    for y, r in enumerate(rows[::-1]):
        tau = f"τ {r['tau']:.2f}" if r["tau"] is not None else "τ n/a"
        ax.text(r["speedup"], y, f" {r['speedup']:.2f}×  {tau}", va="center", fontsize=7)
    ax.set_xlabel("speedup vs plain decoding (same run)")
    ax.set_xlim(0, max(values + [1.0]) * 1.35)
    ax.set_title(title, fontsize=9)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def plot_accept_hist(summary: list[dict], path: Path, title: str) -> Path | None:
    """One small histogram per method that records accepted lengths (tokens emitted per verification step)."""
    rows = [{**r, "accept_hist": {int(k): v for k, v in r["accept_hist"].items()}} for r in summary if r["accept_hist"]]
    if not rows:
        return None
    plt = _plt()
    cols = min(4, len(rows))
    nrows = (len(rows) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(2.4 * cols, 1.9 * nrows + 0.5), squeeze=False)
    top = max(max(r["accept_hist"]) for r in rows)
    for ax, r in zip(axes.flat, rows):
        total = sum(r["accept_hist"].values())
        xs = list(range(1, top + 1))
        ax.bar(xs, [r["accept_hist"].get(x, 0) / total for x in xs], color="#55a868")
        ax.set_title(f"{r['method']} (τ {r['tau']:.2f})" if r["tau"] else r["method"], fontsize=7)
        ax.tick_params(labelsize=6)
        ax.set_xticks(xs if top <= 12 else xs[::2])
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.suptitle(title + " — share of verification steps by tokens emitted (prefill left out)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def plot_speed_quality(points: list[dict], ar_fd: float, path: Path) -> Path:
    """Speedup (this run's per-class latency) against Fréchet distance to plain AR (the image suite's quality)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for p in points:
        ax.scatter(p["fd"], p["speedup"], s=25)
        ax.annotate(p["method"], (p["fd"], p["speedup"]), fontsize=7)
    ax.axvline(ar_fd, ls="--", c="grey", lw=0.8, label="plain AR run-to-run FD")
    ax.axhline(1.0, ls=":", c="grey", lw=0.8)
    ax.set_xlabel("Fréchet distance to a plain-AR reference (classifier features)")
    ax.set_ylabel("speedup vs plain AR (batch 1)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


__all__ = ["plot_speedup", "plot_accept_hist", "plot_speed_quality"]
