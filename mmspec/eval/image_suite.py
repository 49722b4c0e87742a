"""The image benchmark on the zoo: plain AR, lossless speculative decoding, LANTERN and LANTERN++ (static
and dynamic trees), with quality measured against plain AR sampling and a δ / λ / k sweep.

Every method generates the same class list (each class ``per_class`` times) with CFG, in one process after a
warm-up. Quality is measured against a *reference* plain-AR run (seed 0): Fréchet distance (FD) and
precision / recall on the zoo classifier's features standardised by the reference set, plus class fidelity.
Plain AR with four other seeds gives the run-to-run FD baseline (its spread too: FD from a few hundred
samples is noisy) that the relaxed methods are compared with.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..guidance import DEFAULT_CFG_SCALE
from ..registry import BOUND_DEFAULTS
from ..image_gen import ImageGenerator
from ..tree import TreeTemplate, tree_label
from ..zoo import load
from ..zoo.image_data import image_grid
from .image_quality import class_fidelity, fd_against_spread, features, frechet_distance, precision_recall

MAIN_METHODS = [
    ("plain AR", "ar", {}),
    # the same sampler under the Gumbel coupling (mmspec.verifiers.coupling): every Gumbel row must give its pictures
    ("plain AR, Gumbel coupling", "ar", dict(coupling="gumbel")),
    ("spec chain (same drafter)", "spec", dict(tree="chain")),
    ("spec static tree", "spec", dict(tree="static")),
    ("LANTERN δ=0.1 chain", "lantern", dict(delta=0.1, lantern_k=8, tree="chain")),
    ("LANTERN++ λ=2 static", "lantern++", dict(lam=2.0, lantern_k=8, tree="static")),
    ("LANTERN++ λ=2 dynamic", "lantern++", dict(lam=2.0, lantern_k=8, tree="dynamic")),
]
# the zoo's feature drafters of the guided target (when built): image-eagle (one token per forward) and
# image-sar (4 tokens per forward: a chain or a lattice tree costs one drafter forward)
FEATURE_METHODS = [
    ("eagle: spec chain", "spec", dict(tree="chain", drafter="feature")),
    ("eagle: LANTERN++ λ=2 static", "lantern++", dict(lam=2.0, lantern_k=8, tree="static", drafter="feature")),
    ("eagle: LANTERN++ λ=2 dynamic", "lantern++", dict(lam=2.0, lantern_k=8, tree="dynamic", drafter="feature")),
    ("sar: spec chain", "spec", dict(tree="chain", drafter="sar")),
    ("sar: spec lattice", "spec", dict(tree="static", drafter="sar")),
    ("sar: LANTERN δ=0.1 chain", "lantern", dict(delta=0.1, lantern_k=8, tree="chain", drafter="sar")),
    ("sar: LANTERN++ λ=2 lattice", "lantern++", dict(lam=2.0, lantern_k=8, tree="static", drafter="sar")),
    ("sar: LANTERN++ λ=2 chain", "lantern++", dict(lam=2.0, lantern_k=8, tree="chain", drafter="sar")),
    ("eagle: LANTERN δ=0.1 chain", "lantern", dict(delta=0.1, lantern_k=8, tree="chain", drafter="feature")),
    # larger bounds over more neighbours: on the 256-code zoo target (2 CPU threads) λ = 2 moved too little mass
    # (τ 2.4 static, 0.85× plain AR) and LANTERN's δ = 0.2 over 64 neighbours reached τ 3.1 on a chain
    ("eagle: LANTERN++ λ=5 k=16 static", "lantern++", dict(lam=5.0, lantern_k=16, tree="static", drafter="feature")),
    ("eagle: LANTERN++ λ=10 k=16 static", "lantern++", dict(lam=10.0, lantern_k=16, tree="static", drafter="feature")),
    ("eagle: LANTERN δ=0.2 k=64 chain", "lantern", dict(delta=0.2, lantern_k=64, tree="chain", drafter="feature")),
    # looser bounds: more steps compressed, more distortion (the quality columns say how much)
    ("eagle: LANTERN++ λ=20 k=16 static", "lantern++", dict(lam=20.0, lantern_k=16, tree="static", drafter="feature")),
    ("eagle: LANTERN++ λ=50 k=16 static", "lantern++", dict(lam=50.0, lantern_k=16, tree="static", drafter="feature")),
    ("eagle: LANTERN++ λ=50 k=16 tree 2x1x1x1x1x1", "lantern++",
     dict(lam=50.0, lantern_k=16, tree=TreeTemplate.full((2, 1, 1, 1, 1, 1)), drafter="feature")),
    # a depth-7 spine with one alternative at the root (9 nodes): deeper and narrower than 2x1x1x1x1x1, at the default
    # bound and the loosest one
    ("eagle: LANTERN++ λ=10 k=16 tree spine7+1", "lantern++",
     dict(lam=10.0, lantern_k=16, tree=TreeTemplate.spine(7, 1), drafter="feature")),
    ("eagle: LANTERN++ λ=50 k=16 tree spine7+1", "lantern++",
     dict(lam=50.0, lantern_k=16, tree=TreeTemplate.spine(7, 1), drafter="feature")),
    # the default bound on a narrower tree (10 nodes instead of 18): where a verify forward costs per node
    ("eagle: LANTERN++ λ=10 k=16 tree 2x1x1x1x1", "lantern++",
     dict(lam=10.0, lantern_k=16, tree=TreeTemplate.full((2, 1, 1, 1, 1)), drafter="feature")),
    # image-dflash: a block of 15 codes per drafter forward, as a chain or a DDTree of its slot marginals, lossless
    # and relaxed (LANTERN / LANTERN++ judge each node as they judge any drafter's)
    ("dflash: spec chain", "spec", dict(tree="chain", drafter="dflash")),
    ("dflash: spec chain of 8", "spec", dict(tree="chain", num_tokens=8, drafter="dflash")),
    ("dflash: LANTERN++ λ=50 k=16 chain of 8", "lantern++", dict(lam=50.0, lantern_k=16, tree="chain", num_tokens=8,
                                                                 drafter="dflash")),
    ("dflash: spec ddtree", "spec", dict(tree="ddtree", drafter="dflash")),
    # lossless under the Gumbel coupling: drafts by log q + the position's noise, kept iff they are the target's own
    # Gumbel-max codes (the DDTree with reuse_block: registry.IMAGE_DFLASH_GUMBEL_TREE)
    ("dflash: spec ddtree, Gumbel coupling", "spec", dict(tree="ddtree", drafter="dflash", coupling="gumbel")),
    ("dflash: spec chain of 8, Gumbel coupling", "spec", dict(tree="chain", num_tokens=8, drafter="dflash",
                                                               coupling="gumbel")),
    ("eagle: spec chain, Gumbel coupling", "spec", dict(tree="chain", drafter="feature", coupling="gumbel")),
    ("dflash: LANTERN δ=0.2 k=64 chain", "lantern", dict(delta=0.2, lantern_k=64, tree="chain", drafter="dflash")),
    ("dflash: LANTERN++ λ=10 k=16 chain", "lantern++", dict(lam=10.0, lantern_k=16, tree="chain", drafter="dflash")),
    ("dflash: LANTERN++ λ=10 k=16 ddtree", "lantern++", dict(lam=10.0, lantern_k=16, tree="ddtree",
                                                              drafter="dflash")),
    ("dflash: LANTERN++ λ=50 k=16 chain", "lantern++", dict(lam=50.0, lantern_k=16, tree="chain", drafter="dflash")),
    ("dflash: LANTERN++ λ=50 k=16 ddtree", "lantern++", dict(lam=50.0, lantern_k=16, tree="ddtree",
                                                              drafter="dflash")),
    # looser still, on a chain of 10: a batch-1 sweep (6 pictures) gave τ 4.77 (k 16) and 4.88 (k 64) at λ 100,
    # against 3.67 for the default's chain of 8 at λ 50: whether the pictures stay inside plain AR's spread is what
    # the quality phase answers
    ("dflash: LANTERN++ λ=100 k=16 chain of 10", "lantern++", dict(lam=100.0, lantern_k=16, tree="chain",
                                                                   num_tokens=10, drafter="dflash")),
    ("dflash: LANTERN++ λ=100 k=64 chain of 10", "lantern++", dict(lam=100.0, lantern_k=64, tree="chain",
                                                                   num_tokens=10, drafter="dflash")),
    # λ = 100 kept FD inside plain AR's spread (0.23, 0.29; the default λ = 50: 0.50) at τ 4.0 on the suite's
    # pictures; a 16-picture sweep gave λ = 200 on a chain of 12 τ 4.62 (k 16) and 4.94 (k 32)
    ("dflash: LANTERN++ λ=200 k=16 chain of 12", "lantern++", dict(lam=200.0, lantern_k=16, tree="chain",
                                                                   num_tokens=12, drafter="dflash")),
    ("dflash: LANTERN++ λ=200 k=32 chain of 12", "lantern++", dict(lam=200.0, lantern_k=32, tree="chain",
                                                                   num_tokens=12, drafter="dflash")),
]


# the exact output TV is measured on this many pictures of each quality batch: with two sampled siblings at the
# root it costs O(V²·k) per picture and step (at k = 64 over a minute per batch of 48 on a CPU)
OUTPUT_TV_ROWS = 4


def _drafter_tag(drafter: str) -> tuple[str, dict]:
    """A method name's drafter prefix ("eagle: ", "sar: "; none for the AR drafter) and its settings."""
    if drafter == "ar":
        return "", {}
    return f"{'eagle' if drafter == 'feature' else drafter}: ", dict(drafter=drafter)


def sweep_methods(drafter: str = "ar") -> list[tuple[str, str, dict]]:
    """δ, λ and k sweeps: LANTERN on chains; LANTERN++ on the static tree (AR drafter) or on chains (the
    SAR drafter, whose chain is one drafter forward and beats its lattice on a CPU)."""
    tag, d = _drafter_tag(drafter)
    tree = "chain" if drafter == "sar" else "static"
    out = [(f"{tag}LANTERN δ={x} chain", "lantern", dict(delta=x, lantern_k=8, tree="chain", **d))
           for x in (0.05, 0.2, 0.4)]
    out += [(f"{tag}LANTERN++ λ={lam} {tree}", "lantern++", dict(lam=lam, lantern_k=8, tree=tree, **d))
            for lam in (1.5, 3.0, 5.0)]
    out += [(f"{tag}LANTERN δ=0.1 chain k={k}", "lantern", dict(delta=0.1, lantern_k=k, tree="chain", **d))
            for k in (4, 16)]
    out += [(f"{tag}LANTERN++ λ=2 {tree} k={k}", "lantern++", dict(lam=2.0, lantern_k=k, tree=tree, **d))
            for k in (4, 16)]
    return out


# LANTERN++ static tree shapes besides the registry's LANTERN_TREE (2x2x1x1x1) and the 2x1x1x1x1 entry above:
# narrower, deeper, wider
TREE_SHAPES = ((2, 1, 1, 1), (2, 1, 1, 1, 1, 1), (3, 1, 1, 1, 1), (2, 2, 1, 1, 1, 1), (3, 2, 1, 1, 1), (4, 2, 1, 1))


def tree_sweep_methods(drafter: str = "feature") -> list[tuple[str, str, dict]]:
    """LANTERN++ at its default bound over static tree shapes with a one-token-per-forward drafter (``feature``:
    image-eagle, or ``ar``): what the default tree is chosen from. A tree of depth d costs d drafter forwards and
    one verify forward over all its nodes, so the best shape depends on the machine as much as on acceptance."""
    tag, d = _drafter_tag(drafter)
    bound = BOUND_DEFAULTS["lantern++"]
    return [(f"{tag}LANTERN++ λ={bound['lam']:g} k={bound['lantern_k']} tree {TreeTemplate.full(b).label}",
             "lantern++", dict(**bound, tree=TreeTemplate.full(b), **d)) for b in TREE_SHAPES]


def suite_methods(sweep: bool, have: list[str]) -> list[tuple[str, str, dict]]:
    """The suite's (name, method, settings) list: the main methods, the entries of the feature drafters that are
    built (``have``: "feature", "sar"), and with ``sweep`` the δ / λ / k and tree-shape sweeps."""
    methods = MAIN_METHODS + [m for m in FEATURE_METHODS if m[2]["drafter"] in have]
    if sweep:
        methods += sweep_methods() + (sweep_methods("sar") if "sar" in have else [])
        methods += tree_sweep_methods("feature" if "feature" in have else "ar")
    # entries that name no drafter draft with the small AR model (the generator's own default is image-dflash)
    return [(name, m, kw if m == "ar" or "drafter" in kw else {**kw, "drafter": "ar"}) for name, m, kw in methods]


def _same_drafter_spec(results: list[dict], r: dict) -> dict | None:
    """The plain speculative chain run with r's drafter (the 'vs spec' baseline)."""
    want = r.get("drafter", "ar")
    return next((x for x in results if x["method"] == "spec" and x.get("tree") == "chain"
                 and x.get("drafter", "ar") == want), None)


def run_image_suite(per_class: int = 8, cfg_scale: float = DEFAULT_CFG_SCALE, sweep: bool = True, latency_images: int = 12,
                    quality_batch: int = 48, home=None, out_dir: str | Path | None = None, progress: bool = True,
                    only: list[str] | None = None, device=None) -> dict:
    """Two measurements per method:

    * latency (the papers' setting): ``latency_images`` pictures generated one at a time (batch 1, i.e. one
      conditional + one unconditional row), seconds per picture, τ; speedups against plain AR and plain
      speculative decoding with the same drafter, measured in the same run;
    * quality: ``per_class`` pictures per class generated in batches of ``quality_batch``, compared with a
      plain-AR reference set (seed 0); plain AR with seed 1 gives the run-to-run baseline.

    ``only``: run just these entries (by name); plain AR and each drafter's plain speculative chain, the
    baselines, always run. ``device``: where the image models run (the classifier judges on the CPU).
    """
    gen = ImageGenerator.from_zoo(home)
    if device is not None:
        gen.to(device)
    clf = load("image-classifier", home).model
    n_cls = gen.layout.num_classes
    classes = [c for _ in range(per_class) for c in range(n_cls)]  # a grid row per round
    have = [k for k, net in gen.feature_drafters.items() if net is not None]
    methods = suite_methods(sweep, have)
    if only is not None:
        unknown = set(only) - {name for name, _, _ in methods}
        if unknown:
            raise ValueError(f"unknown image suite entries {sorted(unknown)}")
        drafters = {kw.get("drafter", "ar") for name, _, kw in methods if name in only}
        methods = [(name, m, kw) for name, m, kw in methods if name in only or m == "ar"
                   or (m == "spec" and kw.get("tree") == "chain" and kw.get("drafter", "ar") in drafters)]

    def batched(method, kw, seed):
        measure = {"measure_output_tv": OUTPUT_TV_ROWS} if method in ("lantern", "lantern++") else {}
        outs = [gen.generate(classes[i: i + quality_batch], method=method, cfg_scale=cfg_scale, seed=seed + i,
                             **kw, **measure) for i in range(0, len(classes), quality_batch)]
        return torch.cat([o.images.cpu() for o in outs]), outs

    with torch.inference_mode():
        for _, method, kw in methods:  # warm-up (and the neighbour tables' first computation)
            gen.generate([0], method=method, cfg_scale=cfg_scale, seed=99, **kw)
        # latency in interleaved rounds: one picture per method per round, so drifts of a shared machine hit
        # every method alike
        seconds = {name: [] for name, _, _ in methods}
        taus = {name: [] for name, _, _ in methods}
        moved = {name: [] for name, _, _ in methods}  # S_m: mass moved onto one candidate, per step
        tv = {name: [] for name, _, _ in methods}  # exact TV of each step's first emitted token (quality runs)
        rounds = tqdm(range(latency_images), desc="image bench: latency rounds", disable=not progress)
        for i in rounds:
            for name, method, kw in methods:
                o = gen.generate([i % n_cls], method=method, cfg_scale=cfg_scale, seed=1000 + i, **kw)
                seconds[name].append(o.seconds)
                if o.stats is not None:
                    taus[name].append(o.stats.mean_accepted_tokens)
                    moved[name] += o.stats.moved_mass

        ref_images, _ = batched("ar", {}, 0)
        raw = features(clf, ref_images)
        mu, sd = raw.mean(0), raw.std(0)
        # units nearly dead in the reference would blow a stray activation up: floor the scale
        sd = sd.clamp_min(0.1 * float(sd.median()) + 1e-12)

        def feats_of(images):  # standardised by the reference set: FD in units of its per-feature spread
            return (features(clf, images) - mu) / sd

        ref_feats = feats_of(ref_images)
        # plain AR's own run-to-run distance, over three further seeds
        ar_fd = [frechet_distance(ref_feats, feats_of(batched("ar", {}, seed)[0])) for seed in (10_000, 20_000, 30_000)]
        results = []
        for name, method, kw in tqdm(methods, desc="image bench: quality", disable=not progress):
            images, outs = batched(method, kw, 1)
            for o in outs:
                if o.stats is not None:
                    moved[name] += o.stats.moved_mass
                    tv[name] += o.stats.output_tv
            feats = feats_of(images)
            prec, rec = precision_recall(ref_feats, feats)
            b, t = moved[name], tv[name]
            relaxed = method in ("lantern", "lantern++")
            results.append({
                "name": name, "method": method, **kw, "tree": tree_label(kw.get("tree")),
                "seconds_per_image": statistics.mean(seconds[name]),
                "tau": statistics.mean(taus[name]) if taus[name] else 1.0,
                "max_moved_mass": max(b) if b else (0.0 if relaxed else None),
                "max_output_tv": max(t) if t else None, "mean_output_tv": statistics.mean(t) if t else None,
                "fd_vs_reference": frechet_distance(ref_feats, feats), "precision": prec, "recall": rec,
                "class_fidelity": class_fidelity(clf, images, classes), "images": images,
            })
    base = next(r for r in results if r["method"] == "ar")
    for r in results:
        r["speedup_vs_ar"] = base["seconds_per_image"] / r["seconds_per_image"]
        spec = _same_drafter_spec(results, r)
        r["speedup_vs_spec"] = spec["seconds_per_image"] / r["seconds_per_image"] if spec else None
    report = {
        "config": dict(per_class=per_class, images=len(classes), latency_images=latency_images, cfg_scale=cfg_scale,
                       device=str(gen.target.device),
                       temperature=1.0, torch=torch.__version__, threads=torch.get_num_threads(),
                       tokens_per_image=gen.layout.num_codes, reference="plain AR, seed 0",
                       output_tv_pictures=sum(min(OUTPUT_TV_ROWS, len(classes[i: i + quality_batch]))
                                              for i in range(0, len(classes), quality_batch)),
                       baseline_fd="plain AR, 4 other seeds, vs the reference"),
        "ar_run_to_run_fd": statistics.mean(ar_fd + [base["fd_vs_reference"]]),
        "ar_run_to_run_fd_all": ar_fd + [base["fd_vs_reference"]],
        # lossless speculative decoding samples the target's distribution exactly: its FDs are further draws
        # of the same noise as plain AR's (the spread a relaxed method's FD has to be judged against)
        "lossless_fd_all": ar_fd + [r["fd_vs_reference"] for r in results if r["method"] in ("ar", "spec")],
        "results": [{k: v for k, v in r.items() if k != "images"} for r in results],
    }
    if out_dir is not None:
        write_image_report(report, results, Path(out_dir), gen)
    return report


def to_markdown(report: dict) -> str:
    cfg = report["config"]
    lines = [
        "# mmspec bench --suite image — zoo image-target (CFG), image-drafter",
        "",
        f"Latency: {cfg['latency_images']} pictures one at a time (batch 1: a conditional and an unconditional row), "
        f"{cfg['tokens_per_image']} codes each, CFG {cfg['cfg_scale']}, T = 1, on {cfg.get('device', 'cpu')} "
        f"({cfg['threads']} CPU threads); speedups measured "
        f"in the same run. Quality: {cfg['images']} pictures ({cfg['per_class']} per class), FD / precision / recall "
        f"on the zoo classifier's features (standardised by the reference set) against a plain-AR reference run; "
        f"plain AR's own run-to-run FD, 4 other seeds: mean **{report['ar_run_to_run_fd']:.2f}** "
        f"(range {min(report['ar_run_to_run_fd_all']):.2f}–{max(report['ar_run_to_run_fd_all']):.2f}); every lossless run "
        f"(plain AR and lossless speculative decoding, same distribution): "
        f"{min(report['lossless_fd_all']):.2f}–{max(report['lossless_fd_all']):.2f}. Latency is measured in interleaved "
        f"rounds (one picture per method per round).",
        "",
        "Distortion: *output TV* is the exact total variation between the distribution of each step's first "
        "emitted token and the target's (closed form over the verifier's acceptance cases, measured on "
        f"{cfg.get('output_tv_pictures', cfg['images'])} of the quality run's pictures; max and mean over their steps); "
        "*max S_m* is the most mass moved onto one candidate, which "
        "bounds the output's distance only for a single point-mass draft per position.",
        "",
        "Drafters: the small AR drafter (run with CFG) unless the name says `eagle:` (image-eagle, a feature drafter "
        "on the guided target's features) or `sar:` (image-sar, the same with 4 drafts per forward). "
        "\"vs spec\": against plain speculative decoding (chain) with the same drafter.",
        "",
        "| method | τ (step compression) | latency speedup vs AR | vs spec | output TV max / mean | max S_m per candidate | FD | "
        "FD vs plain AR's range | precision | recall | class fidelity |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        bound = f"{r['max_moved_mass']:.3f}" if r["max_moved_mass"] is not None else "–"
        out_tv = (f"{r['max_output_tv']:.3f} / {r['mean_output_tv']:.3f}" if r.get("max_output_tv") is not None
                  else "–")
        vs_spec = f"{r['speedup_vs_spec']:.2f}×" if r["speedup_vs_spec"] is not None else "–"
        lines.append(f"| {r['name']} | {r['tau']:.2f} | {r['speedup_vs_ar']:.2f}× | {vs_spec} | "
                     f"{out_tv} | {bound} | {r['fd_vs_reference']:.3f} | "
                     f"{fd_against_spread(r['fd_vs_reference'], report['ar_run_to_run_fd_all'])} | "
                     f"{r['precision']:.2f} | {r['recall']:.2f} | {100 * r['class_fidelity']:.0f}% |")
    return "\n".join(lines) + "\n"


def plot_speed_quality(report: dict, path: Path) -> None:
    """Speedup vs plain AR against FD, per method (colour: drafter; marker: method), with plain AR's
    run-to-run FD, +10%, and the spread of every lossless run's FD (the noise floor) shaded."""
    import matplotlib  # here, not at the top: the Agg backend must be chosen before pyplot loads

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    colours = {"ar": "tab:blue", "feature": "tab:orange", "sar": "tab:green", "dflash": "tab:red"}
    fig, ax = plt.subplots(figsize=(7.5, 5))
    lossless = report.get("lossless_fd_all") or report["ar_run_to_run_fd_all"]
    ax.axvspan(min(lossless), max(lossless), color="grey", alpha=0.12, lw=0)
    for r in report["results"]:
        marker = {"ar": "s", "spec": "o", "lantern": "^", "lantern++": "D"}[r["method"]]
        ax.scatter(r["fd_vs_reference"], r["speedup_vs_ar"], marker=marker, c=colours[r.get("drafter", "ar")])
        ax.annotate(r["name"], (r["fd_vs_reference"], r["speedup_vs_ar"]), fontsize=5)
    ax.axvline(report["ar_run_to_run_fd"], ls="--", c="grey", lw=0.8)
    ax.axvline(1.1 * report["ar_run_to_run_fd"], ls=":", c="grey", lw=0.8)
    handles = [Line2D([], [], ls="--", c="grey", label="plain AR run-to-run FD (mean)"),
               Line2D([], [], ls=":", c="grey", label="+10%"),
               matplotlib.patches.Patch(color="grey", alpha=0.12, label="FD spread of lossless runs"),
               *[Line2D([], [], ls="", marker="o", c=c, label=f"drafter: {n}") for n, c in
                 (("small AR", colours["ar"]), ("image-eagle", colours["feature"]), ("image-sar", colours["sar"]),
                  ("image-dflash", colours["dflash"]))],
               *[Line2D([], [], ls="", marker=m, c="k", label=n) for n, m in
                 (("plain AR", "s"), ("lossless spec", "o"), ("LANTERN", "^"), ("LANTERN++", "D"))]]
    ax.legend(handles=handles, fontsize=6, loc="upper right")
    ax.set_xlabel("Fréchet distance to plain-AR reference (classifier features)")
    ax.set_ylabel("latency speedup vs plain AR (batch 1)")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def write_image_report(report: dict, results: list[dict], out: Path, gen: ImageGenerator) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "image_bench.json").write_text(json.dumps(report, indent=2))
    (out / "image_bench.md").write_text(to_markdown(report))
    plot_speed_quality(report, out / "speed_quality.png")
    for r in results:
        slugs = {"plain AR": "ar", "LANTERN++ λ=2 static": "lantern_pp_static",
                 "sar: LANTERN δ=0.1 chain": "sar_lantern_chain"}
        if r["name"] in slugs:
            slug = slugs[r["name"]]
            image_grid(r["images"], nrow=gen.layout.num_classes, scale=3).save(out / f"samples_{slug}.png")


__all__ = ["run_image_suite", "to_markdown", "plot_speed_quality", "MAIN_METHODS", "FEATURE_METHODS", "sweep_methods",
           "tree_sweep_methods", "suite_methods", "TREE_SHAPES"]
