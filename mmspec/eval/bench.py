"""`mmspec bench`: every method side by side, same prompts, same process, after warm-up.

Reports tau (mean accepted tokens = new tokens / target forwards, mmspec methods), speedup vs plain
HF decoding, and exactness (share of prompts whose greedy output equals plain decoding's). Peers a
user would otherwise pick run through HF ``generate``: assisted generation with the same draft model
and prompt lookup.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..drafters.adaptive import AdaptiveDrafter
from ..frontend import hf_sampling_rng
from ..generator import SpeculativeGenerator
from ..loading import load_target, zoo_name
from ..registry import CAUSAL_METHODS, CHAIN_CONFIDENCE, build_drafter, draft_length
from ..tiny import ARCHITECTURES, tiny_model
from ..timing import TokenClock, device_name, synchronize
from ..training.loop import to_device
from .aggregate import measurement_flags
from .cost_model import cost_table, cost_model
from .datasets import code_items
from .load import load_average, load_check

# plain / hf-*: Hugging Face's own generate (the baseline and the peers); the others mmspec.registry builds
ALL_METHODS = ["plain", "mmspec-plain", "hf-assisted", "hf-prompt-lookup", "chain", "tree", "dynamic", "prompt-lookup"]


@dataclass
class MethodResult:
    method: str
    seconds: float
    new_tokens: int
    tau: float | None
    speedup: float | None = None
    exact: float | None = None
    accept_lengths: list[int] = field(default_factory=list)
    draft_share: float | None = None  # drafter's share of draft + verify time (mmspec methods)


def bench_model(spec: str, seed: int = 0, layers: int | None = None):
    """(model, tokenizer) for ``tiny:<arch>`` (a random stock model), else what :func:`mmspec.loading.load_target`
    loads (``zoo:<name>``, a local checkpoint directory)."""
    if spec.startswith("tiny:"):
        arch = spec.split(":", 1)[1]
        if arch not in ARCHITECTURES:
            raise ValueError(f"unknown tiny architecture {arch!r}; choose from {sorted(ARCHITECTURES)}")
        kw = dict(vocab_size=512, hidden_size=128, num_layers=layers or 4, num_heads=4, num_kv_heads=2,
                  max_positions=2048)
        return tiny_model(arch, seed=seed, **kw), None
    target = load_target(spec)
    if target.route != "text":
        hint = {"vlm": "`mmspec bench --suite vlm` (zoo) or `mmspec eval --suite vlm --vlm-model DIR`",
                "image": "`mmspec bench --suite image` or `mmspec eval --suite image`",
                "janus": "`mmspec image --model DIR` (it reports the speed of each method)"}[target.route]
        raise ValueError(f"mmspec bench --model times causal LMs; {spec} is a target of the {target.route} route: "
                         f"use {hint}")
    return target.model, target.tokenizer


DEFAULT_TEXT_PROMPTS = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "import os\nimport sys\n\n\ndef main():\n",
    "Speculative decoding makes large language models faster because",
]


def bench_prompts(spec: str, tokenizer, vocab_size: int, n: int, length: int | None,
                  seed: int) -> tuple[list[torch.LongTensor], str]:
    """The prompts ``mmspec bench`` times a model on, and what they are in words: a zoo model's family's
    held-out prompts (the code suite's for ``zoo:code-target``), a few generic texts for other models with a
    tokenizer, random-token prompts of ``length`` (default 48) for tokenizer-less ``tiny:`` models.
    ``length`` applies to random-token prompts only (refused otherwise)."""
    if tokenizer is not None and length is not None:
        raise ValueError(f"--prompt-length sets the length of random-token prompts (tiny: models without a "
                         f"tokenizer); {spec} is timed on text prompts")
    if zoo_name(spec) == "code-target":
        items = code_items(n)
        ids = [tokenizer(it.text, return_tensors="pt", add_special_tokens=False).input_ids for it in items]
        return ids, f"{len(ids)} held-out zoo code prompts (the code suite's)"
    if tokenizer is not None:
        return make_prompts(tokenizer, vocab_size, n, 0, seed), \
            f"{n} generic prompts (mmspec.eval.bench.DEFAULT_TEXT_PROMPTS; `mmspec eval` times held-out data)"
    length = 48 if length is None else length
    if length < 4:
        raise ValueError(f"--prompt-length must be >= 4, got {length}")
    what = f"{n} random-token prompts of {length} tokens with a repeated motif"
    if spec.startswith("tiny:"):
        what += ("; the models are random-weight tiny models: the figures measure the engine and the methods' "
                 "mechanics, not what a trained drafter gains (use zoo:code-target or `mmspec eval`)")
    return make_prompts(None, vocab_size, n, length, seed), what


def make_prompts(tokenizer, vocab_size: int, n: int, length: int, seed: int) -> list[torch.LongTensor]:
    if tokenizer is not None:
        texts = (DEFAULT_TEXT_PROMPTS * (n // len(DEFAULT_TEXT_PROMPTS) + 1))[:n]
        return [tokenizer(t, return_tensors="pt").input_ids for t in texts]
    g = torch.Generator().manual_seed(seed)
    prompts = []
    for _ in range(n):
        # random tokens with a repeated motif: the kind of context prompt lookup can exploit
        motif = torch.randint(3, vocab_size, (max(length // 4, 2),), generator=g)
        head = torch.randint(3, vocab_size, (length - 2 * motif.numel(),), generator=g)
        prompts.append(torch.cat([motif, head, motif])[None])
    return prompts


def split_prompt(prompt) -> tuple[torch.Tensor, dict]:
    """A prompt is a [1, L] id tensor, or a dict with ``input_ids`` and prefill inputs (``pixel_values``)."""
    if isinstance(prompt, dict):
        rest = dict(prompt)
        return rest.pop("input_ids"), rest
    return prompt, {}


def _hf_generate(target, prompt, max_new_tokens, eos_token_id=None, streamer=None, **kw):
    """HF generate for exactly ``max_new_tokens`` (EOS disabled unless ``eos_token_id`` is given, as for
    the mmspec runs). Everything goes in as generate() arguments: a None set through
    ``GenerationConfig.update`` is refilled from the model's defaults, and a run that stops at EOS
    while the others do not would look faster than it is."""
    ids, inputs = split_prompt(prompt)
    mask = inputs.pop("attention_mask", None)  # a left-padded batch carries its own
    kw.setdefault("do_sample", False)
    return target.generate(ids, attention_mask=torch.ones_like(ids) if mask is None else mask,
                           max_new_tokens=max_new_tokens,
                           eos_token_id=eos_token_id, streamer=streamer, **kw, **inputs)


def build_runner(method: str, target, draft, num_tokens: int, max_new_tokens: int, sampling: dict,
                 drafter_factory=None, eos_token_id: int | None = None):
    """A callable ``(prompt, streamer=None) -> (sequence, stats or None)`` for one method (``drafter_factory``
    builds the drafter of a method that is not one of the built-ins)."""
    pad = target.generation_config.pad_token_id
    hf_kw = dict(pad_token_id=pad if pad is not None else 0, eos_token_id=eos_token_id)
    if sampling.get("do_sample"):
        hf_kw.update(do_sample=True, temperature=sampling["temperature"], top_k=None, top_p=None)
    if method == "plain":
        return lambda ids, streamer=None: (_hf_generate(target, ids, max_new_tokens, streamer=streamer, **hf_kw),
                                           None)
    if method == "hf-assisted":
        if draft is None:
            return None
        return lambda ids, streamer=None: (_hf_generate(target, ids, max_new_tokens, assistant_model=draft,
                                                        streamer=streamer, **hf_kw), None)
    if method == "hf-prompt-lookup":
        k = draft_length("prompt-lookup", num_tokens)
        return lambda ids, streamer=None: (_hf_generate(target, ids, max_new_tokens, prompt_lookup_num_tokens=k,
                                                        streamer=streamer, **hf_kw), None)
    if drafter_factory is not None:
        return _speculative_runner(target, drafter_factory(), max_new_tokens, sampling, eos_token_id)
    if method in CAUSAL_METHODS and draft is None:
        return None
    drafter = build_drafter(method, draft, num_tokens=num_tokens, confidence=CHAIN_CONFIDENCE)
    return _speculative_runner(target, drafter, max_new_tokens, sampling, eos_token_id)


AUTO = "-auto"  # "<method>-auto": that method's drafter under the adaptive policy (drafts only where it pays)
AUTO_SIZES = "-auto-sizes"  # the same, also choosing among the drafter's tree sizes per step (tree_sizes=True)


def used_factories(factories: dict, methods: list[str]) -> dict:
    """The drafter factories ``methods`` need: each method's own, and the inner drafter of its ``<method>-auto`` row."""
    return {m: f for m, f in factories.items() if m in methods or m + AUTO in methods}


def auto_factories(methods: list[str], extra: dict, draft, num_tokens: int | None) -> dict:
    """Factories for the ``<method>-auto`` (and ``-auto-sizes``) names among ``methods``: the method's drafter (from
    ``extra``, or an AR chain / tree / prompt lookup over ``draft``) wrapped in
    :class:`~mmspec.drafters.adaptive.AdaptiveDrafter`."""
    out = {}
    for m in methods:
        sizes = m.endswith(AUTO_SIZES)
        suffix = AUTO_SIZES if sizes else AUTO
        if not m.endswith(suffix) or m in extra:
            continue
        base = m[: -len(suffix)]
        if base in extra:
            inner = extra[base]
        elif base == "prompt-lookup" or (base in CAUSAL_METHODS and draft is not None):
            def inner(base=base):
                return build_drafter(base, draft, num_tokens=num_tokens, confidence=CHAIN_CONFIDENCE)
        else:
            continue  # left to the unknown-method error
        out[m] = lambda inner=inner, sizes=sizes: AdaptiveDrafter(inner(), tree_sizes=sizes)
    return out


def _speculative_runner(target, drafter, max_new_tokens: int, sampling: dict, eos_token_id: int | None = None):
    gen = SpeculativeGenerator(target, drafter)
    gen_kw = dict(do_sample=bool(sampling.get("do_sample")), temperature=sampling.get("temperature", 1.0))
    seed = int(sampling.get("seed", 0))

    def run(prompt, streamer=None):
        ids, inputs = split_prompt(prompt)
        g = torch.Generator().manual_seed(seed)
        out = gen.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=[] if eos_token_id is None else eos_token_id,
                           generator=g, streamer=streamer, **gen_kw, **inputs)
        return out.sequences, out.stats

    return run


def time_methods(runners: dict, prompts: list, repeats: int = 1, warmup: int = 1, seed: int = 0,
                 progress: bool = True, desc: str = "bench", clock: bool = False) -> dict:
    """Run ``runners`` (method -> callable prompt -> (output, stats or None)) over the prompts: ``warmup`` calls
    each first, then ``repeats`` rounds in which every prompt runs through all methods back to back, so a slow
    spell of a shared machine hits the methods of a prompt alike instead of one method's whole block. Returns
    per method ``times`` ([round][prompt] seconds), ``outputs`` and ``stats`` (first round). Every call draws
    from ``seed`` afresh: HF sampling from torch's global RNG, seeded for the call and restored after it.
    ``clock``: runners take ``streamer=``; each timed call streams into a :class:`~mmspec.timing.TokenClock`
    and ``latency`` ([round][prompt] (TTFT, TPOT)) is returned too — every method alike, HF's included."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}")
    runs = {m: {"times": [], "outputs": [], "stats": [], "latency": []} for m in runners}
    rng = torch.Generator().manual_seed(seed)
    total = len(runners) * (warmup + repeats * len(prompts))
    with torch.inference_mode(), tqdm(total=total, desc=desc, disable=not progress) as bar:
        for runner in runners.values():
            for _ in range(warmup):
                with hf_sampling_rng(rng, advance=False):
                    runner(prompts[0])
                bar.update(1)
        for round_ in range(repeats):
            for run in runs.values():
                run["times"].append([])
                run["latency"].append([])
            for prompt in prompts:
                for method, runner in runners.items():
                    with hf_sampling_rng(rng, advance=False):
                        t0 = time.perf_counter()
                        if clock:
                            tick = TokenClock()
                            out, stats = runner(prompt, streamer=tick)
                        else:
                            out, stats = runner(prompt)
                        synchronize()  # on a GPU, the method's queued kernels are part of its time
                        runs[method]["times"][-1].append(time.perf_counter() - t0)
                        if clock:
                            runs[method]["latency"][-1].append(tick.latency())
                    if round_ == 0:
                        runs[method]["outputs"].append(out)
                        runs[method]["stats"].append(stats)
                    bar.update(1)
    return runs


def prompt_record(seconds: float, new_tokens: int, stats, exact: bool | None, latency=None,
                  new_ids: list[int] | None = None) -> dict:
    """One method on one prompt: what reports aggregate (sums merge across prompts, categories and shards).
    ``latency``: the rounds' (TTFT, TPOT) pairs, kept as their medians; ``new_ids``: the generated ids (first
    round), for answer files. The stats' times (``draft_time``, ``verify_time`` and their prefill shares
    ``prefill_time`` / ``drafter_prefill_time``, the generator's ``total_time``) are the first round's, as
    ``round_seconds[0]`` is; ``seconds`` may be a median over rounds (the cost model rescales)."""
    rec = {"seconds": seconds, "new_tokens": int(new_tokens), "exact": exact, "target_forwards": None,
           "row_forwards": None, "accept_lengths": [], "draft_time": None, "verify_time": None,
           "prefill_time": None, "drafter_prefill_time": None, "total_time": None, "ttft": None, "tpot": None}
    for j, name in enumerate(("ttft", "tpot")):
        values = [pair[j] for pair in latency or () if pair[j] is not None]
        rec[name] = statistics.median(values) if values else None
    if new_ids is not None:
        rec["new_ids"] = [int(t) for t in new_ids]
    if stats is not None:
        rec.update(target_forwards=stats.target_forwards, row_forwards=stats.row_forwards,
                   accept_lengths=[n for row in stats.accept_lengths for n in row],
                   draft_time=stats.draft_time, verify_time=stats.verify_time, prefill_time=stats.prefill_time,
                   drafter_prefill_time=stats.drafter_prefill_time, total_time=stats.total_time)
    return rec


def run_bench(model: str = "tiny:llama", draft: str | None = "tiny:llama", methods: list[str] | None = None,
              num_prompts: int = 4, prompt_length: int | None = None, max_new_tokens: int = 64,
              num_tokens: int | None = None,
              do_sample: bool = False, temperature: float = 1.0, repeats: int = 1, seed: int = 0,
              draft_layers: int = 1, progress: bool = True) -> dict:
    """Load models from specs (``tiny:<arch>``, a checkpoint dir, ``zoo:<name>``) and compare methods."""
    target, tokenizer = bench_model(model, seed=seed)
    draft_model = None
    if draft == "self":
        draft_model = target
    elif draft is not None:
        draft_model, _ = bench_model(draft, seed=seed + 1, layers=draft_layers)
    vocab = target.config.get_text_config().vocab_size
    prompts, what = bench_prompts(model, tokenizer, vocab, num_prompts, prompt_length, seed)
    report = compare(target, draft_model, prompts, methods, max_new_tokens=max_new_tokens, num_tokens=num_tokens,
                     do_sample=do_sample, temperature=temperature, repeats=repeats, progress=progress)
    report["config"].update(model=model, draft=draft, prompt_length=prompt_length, seed=seed, prompts=what)
    return report


def compare(target, draft_model, prompts: list[torch.Tensor], methods: list[str] | None = None,
            max_new_tokens: int = 64, num_tokens: int | None = None, do_sample: bool = False, temperature: float = 1.0,
            repeats: int = 1, progress: bool = True, extra: dict | None = None, eos_token_id: int | None = None,
            seed: int = 0, warmup: int = 1, per_prompt: bool = False, desc: str = "bench") -> dict:
    """Run the methods side by side on ready models and prompts ([1, L] ids, or dicts with
    ``input_ids`` plus prefill inputs such as ``pixel_values``). ``extra`` maps further method names to
    zero-argument drafter factories (a fresh drafter per method). With ``eos_token_id`` every method
    stops at EOS (answers of natural length); otherwise all generate exactly ``max_new_tokens``.
    ``per_prompt`` adds each method's per-prompt records (median seconds over rounds, tokens, forwards,
    accepted lengths, exactness) for reports that regroup or merge prompts (``mmspec eval``)."""
    extra = dict(extra or {})
    methods = methods or ALL_METHODS + list(extra)
    extra.update(auto_factories(methods, extra, draft_model, num_tokens))
    unknown = set(methods) - set(ALL_METHODS) - set(extra)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; choose from {ALL_METHODS + list(extra)} (and "
                         f"<method>{AUTO} for any drafting one: that method under the adaptive policy; "
                         f"<method>{AUTO_SIZES}: choosing its tree size too)")
    if "plain" not in methods:
        methods = ["plain"] + list(methods)
    sampling = dict(do_sample=do_sample, temperature=temperature, seed=seed)
    num_prompts = len(prompts)
    prompts = [to_device(p, target.device) for p in prompts]  # cut on the CPU; a --device cuda model takes them there

    runners = {m: build_runner(m, target, draft_model, num_tokens, max_new_tokens, sampling, extra.get(m),
                               eos_token_id) for m in methods}
    runners = {m: r for m, r in runners.items() if r is not None}
    # each method's time is the median over rounds of its time for the whole prompt set (bench) or, per prompt,
    # the median over rounds (per-prompt records)
    load_start = load_average()
    runs = time_methods(runners, prompts, repeats, warmup, seed, progress, desc, clock=True)
    load = load_check(load_start, [sum(t) for t in runs["plain"]["times"]])
    results: dict[str, MethodResult] = {}
    records: dict[str, list[dict]] = {}
    plain_out = runs["plain"]["outputs"]
    for method, run in runs.items():
        lens, new, rows, split = [], 0, 0, [0.0, 0.0]
        records[method] = []
        for i, (seq, stats, p) in enumerate(zip(run["outputs"], run["stats"], prompts)):
            produced = seq.shape[1] - split_prompt(p)[0].shape[1]
            same = None if do_sample else bool(seq.shape == plain_out[i].shape and torch.equal(seq, plain_out[i]))
            new_ids = seq[0, seq.shape[1] - produced:]
            rec = prompt_record(statistics.median(t[i] for t in run["times"]), produced, stats, same,
                                [lat[i] for lat in run["latency"]], new_ids)
            rec["round_seconds"] = [t[i] for t in run["times"]]
            # what the answer's text holds (Spec-Bench counts the baseline's tokens from its text: EOS left out)
            rec["text_tokens"] = produced - (int((new_ids == eos_token_id).sum()) if eos_token_id is not None else 0)
            records[method].append(rec)
            if stats is not None:
                new += stats.new_tokens
                rows += stats.row_forwards
                lens.extend(stats.accept_lengths[0])
                split[0] += stats.draft_time
                split[1] += stats.verify_time
        produced = sum(r["new_tokens"] for r in records[method])
        results[method] = MethodResult(method, statistics.median(sum(t) for t in run["times"]), produced,
                                       new / rows if rows else None, accept_lengths=lens,
                                       draft_share=split[0] / sum(split) if sum(split) else None)

    base = results["plain"]
    for r in results.values():
        r.speedup = base.seconds / r.seconds
        if not do_sample:
            r.exact = sum(rec["exact"] for rec in records[r.method]) / num_prompts
        if r.method == "plain":
            r.tau = 1.0
    out = []
    for r in results.values():
        d = asdict(r)
        d["flags"] = measurement_flags(d, records[r.method], r.method == "plain")
        if per_prompt:
            d["per_prompt"] = records[r.method]
        out.append(d)
    flat = [{"method": m, "item": i, **rec} for m, recs in records.items() for i, rec in enumerate(recs)]
    return {
        "cost_model": cost_model(flat),
        "config": dict(num_prompts=num_prompts, max_new_tokens=max_new_tokens, num_tokens=num_tokens,
                       stop_at_eos=eos_token_id is not None,
                       do_sample=do_sample, temperature=temperature, repeats=repeats, seed=seed, warmup=warmup,
                       torch=torch.__version__, threads=torch.get_num_threads(), device=device_name(target.device)),
        "results": out,
        "load": load,
    }


def to_markdown(report: dict) -> str:
    cfg = report["config"]
    lines = [
        f"# mmspec bench — target `{cfg.get('model', 'given')}`, draft `{cfg.get('draft', 'given')}`",
        "",
        f"{cfg['num_prompts']} prompts × {'up to ' if cfg.get('stop_at_eos') else ''}{cfg['max_new_tokens']} new tokens, k = {cfg['num_tokens'] or 'each method default'}"
        f"{', EAGLE / MSD chains ' + str(cfg['feature_tokens']) if cfg.get('feature_tokens') else ''}, "
        f"{'sampling T=' + str(cfg['temperature']) if cfg['do_sample'] else 'greedy'}, torch {cfg['torch']}, "
        f"{cfg['threads']} threads, on {cfg.get('device', 'cpu')}. Speedup = plain HF decoding time / method time, same process, after warm-up.",
        *(["", f"Prompts: {cfg['prompts']}."] if cfg.get("prompts") else []),
        "",
        "| method | τ (mean accepted) | speedup vs plain | exact | drafter share | time (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        tau = f"{r['tau']:.2f}" if r["tau"] is not None else "n/a"
        exact = f"{100 * r['exact']:.0f}%" if r["exact"] is not None else "n/a"
        share = f"{100 * r['draft_share']:.0f}%" if r.get("draft_share") is not None else "n/a"
        mark = " ⚠" if r.get("flags") else ""
        lines.append(f"| {r['method']}{mark} | {tau} | {r['speedup']:.2f}× | {exact} | {share} | {r['seconds']:.3f} |")
    lines += [f"\n⚠ {r['method']}: " + "; ".join(r["flags"]) + "." for r in report["results"] if r.get("flags")]
    if report.get("cost_model"):
        lines += ["", *cost_table(report["cost_model"])]
    if (report.get("load") or {}).get("warning"):
        lines += ["", f"**Warning:** {report['load']['warning']}."]
    return "\n".join(lines) + "\n"


def write_report(report: dict, out_dir: str | Path) -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / "bench.json", out / "bench.md"
    js.write_text(json.dumps(report, indent=2))
    md.write_text(to_markdown(report))
    return js, md
