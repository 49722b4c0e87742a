"""The vision-language benchmark on the zoo: held-out scenes, captions and questions, every VLM method.

Methods: plain decoding; the baselines — the text-only zoo drafter (``vlm-drafter``, no picture) as a
chain and a static tree (``chain``, ``tree``), prompt lookup (mmspec's and HF's), and the plain feature drafter
(``vlm-eagle``: no decoupling, no compression); MSD (``vlm-msd``) as a chain and an EAGLE-2 dynamic
tree; FLASH (``vlm-flash``) at 8, 4 and 1 compressed tokens per image, and as a lattice tree; the DFlash
block drafter (``vlm-dflash``, where the zoo has it) as a confident chain and a DDTree, and ``vlm-dflash-c`` (the
same taught compressed pictures) as the chain with each picture in 1, 4 or 8 context entries (``dflash-c<k>``).
Every method
stops at EOS, as a user's VLM answers do, and greedy outputs are compared with plain decoding's."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from transformers import DynamicCache

from .. import SpeculativeGenerator, TreeTemplate
from ..cache import SpecKVCache
from ..drafters.dflash_io import read_config
from ..hf_args import cache_kwargs
from ..registry import CHAIN_CONFIDENCE, DFLASH_TREE, DYNAMIC_TREE, build_drafter, draft_length
from ..verifiers.tree_forward import chain_parents
from ..zoo import load, vlm_data
from .batch_sweep import batch_sweep
from .code_suite import zoo_root
from .bench import compare, used_factories

VLM_METHODS = ["plain", "mmspec-plain", "hf-prompt-lookup", "prompt-lookup", "chain", "tree", "eagle-chain",
               "eagle-dynamic", "msd-chain", "msd-dynamic", "flash-8", "flash-4", "flash-1", "flash-4-lattice",
               "dflash", "dflash-tree", "dflash-c1", "dflash-c4", "dflash-c8"]
# vlm-dflash (a zoo built before it has none): confident chain, DDTree; vlm-dflash-c: compressed chains
BLOCK_METHODS = ["dflash", "dflash-tree", "dflash-c1", "dflash-c4", "dflash-c8"]
COMPRESSED_BLOCKS = (1, 4, 8)
# FLASH's slots are independent given the context: a static lattice tree over their ranked tokens
FLASH_LATTICE = TreeTemplate.full((3, 2, 1, 1))


def feature_factories(home: str | Path | None = None, num_tokens: int = 4, feature_tokens: int | None = None) -> dict:
    """Zero-argument drafter factories for the VLM methods (models loaded once): ``num_tokens`` is the text-only
    drafter's chain length, ``feature_tokens`` the EAGLE / MSD chains' (None: the registry's default)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = load(name, home).model
        return cache[name]

    target = get("vlm-target")

    def make(method, name, **kw):
        return lambda: build_drafter(method, get(name), target=target, **kw)

    k = {m: draft_length(m, feature_tokens) for m in ("eagle", "msd")}
    block = {}
    block_dir = zoo_root(home) / "vlm-dflash"
    if (block_dir / "zoo.json").exists():
        block = {"dflash": make("dflash", "vlm-dflash", confidence=CHAIN_CONFIDENCE),
                 "dflash-tree": make("dflash", "vlm-dflash", **DFLASH_TREE)}
    compressing = zoo_root(home) / "vlm-dflash-c"
    if (compressing / "zoo.json").exists():  # vlm-dflash-c: the block drafter taught compressed pictures
        queries = read_config(compressing)[0].dflash_config.get("visual_queries", 0)
        block.update({f"dflash-c{n}": make("dflash", "vlm-dflash-c", confidence=CHAIN_CONFIDENCE, compress_to=n)
                      for n in COMPRESSED_BLOCKS if n <= queries})
    return {
        **block,
        "chain": make("chain", "vlm-drafter", num_tokens=num_tokens),
        "tree": make("tree", "vlm-drafter"),
        "eagle-chain": make("eagle", "vlm-eagle", num_tokens=k["eagle"], num_nodes=None),
        "eagle-dynamic": make("eagle", "vlm-eagle", num_tokens=k["eagle"] + 1, tree="dynamic", **DYNAMIC_TREE),
        "msd-chain": make("msd", "vlm-msd", num_tokens=k["msd"], num_nodes=None),
        "msd-dynamic": make("msd", "vlm-msd", num_tokens=k["msd"] + 1, tree="dynamic", **DYNAMIC_TREE),
        "flash-8": make("flash", "vlm-flash", compress_to=8, num_nodes=None),
        "flash-4": make("flash", "vlm-flash", compress_to=4, num_nodes=None),
        "flash-1": make("flash", "vlm-flash", compress_to=1, num_nodes=None),
        "flash-4-lattice": make("flash", "vlm-flash", compress_to=4, tree=FLASH_LATTICE, num_nodes=None),
    }


def vlm_prompts(processor, num_prompts: int, kind: str = "mixed", start: int = 0) -> list[dict]:
    """Held-out test scenes: ``caption``, ``question`` (every question type in turn) or ``mixed``
    (alternating)."""
    scenes = vlm_data.scenes("test", num_prompts, start)
    items = []
    for i, sc in enumerate(scenes):
        caption = kind == "caption" or (kind == "mixed" and i % 2 == 0)
        items.append(sc.items()[-1] if caption else sc.questions[i % len(sc.questions)])
    prompts = []
    for sc, q in zip(scenes, items):
        p = processor(images=[sc.image()], text=[vlm_data.with_image(q.prompt)], return_tensors="pt")
        prompts.append({"input_ids": p["input_ids"], "pixel_values": p["pixel_values"]})
    return prompts


VLM_SWEEP_METHODS = ["mmspec-plain", "prompt-lookup", "chain", "eagle-chain", "msd-chain", "msd-chain-auto", "flash-8"]


def run_vlm_sweep(methods: list[str] | None, batch_sizes: list[int], num_prompts: int = 16, max_new_tokens: int = 48,
                  repeats: int = 1, num_tokens: int = 4, home: str | Path | None = None, progress: bool = True) -> dict:
    """The VLM suite's methods at several batch sizes (:mod:`mmspec.eval.batch_sweep`; EOS off)."""
    methods = methods or VLM_SWEEP_METHODS
    target = load("vlm-target", home)
    factories = feature_factories(home, num_tokens)
    prompts = vlm_prompts(target.tokenizer, max(num_prompts, max(batch_sizes)), "mixed")
    sweep = batch_sweep(target.model, None, prompts, methods, batch_sizes, max_new_tokens, num_tokens,
                        extra=used_factories(factories, methods),
                        pad_id=target.extras["tokenizer"].pad_token_id, repeats=repeats, progress=progress)
    sweep["config"].update(model="zoo:vlm-target", prompts_from="held-out scenes (mixed)")
    return sweep


def run_vlm_suite(methods: list[str] | None = None, num_prompts: int = 8, max_new_tokens: int = 48,
                  do_sample: bool = False, temperature: float = 0.6, repeats: int = 1, num_tokens: int = 4,
                  kind: str = "mixed", home: str | Path | None = None, progress: bool = True,
                  feature_tokens: int | None = None) -> dict:
    target = load("vlm-target", home)
    factories = feature_factories(home, num_tokens, feature_tokens)
    methods = methods or [m for m in VLM_METHODS if m not in BLOCK_METHODS or m in factories]
    prompts = vlm_prompts(target.tokenizer, num_prompts, kind)
    eos = target.extras["tokenizer"].eos_token_id
    report = compare(target.model, None, prompts, methods, max_new_tokens=max_new_tokens, num_tokens=num_tokens,
                     do_sample=do_sample, temperature=temperature, repeats=repeats, progress=progress,
                     extra=factories, eos_token_id=eos)  # all: an unknown name lists them
    report["config"].update(model="zoo:vlm-target", draft="zoo:vlm-drafter (text only) / vlm-eagle / vlm-msd / "
                            "vlm-flash", prompts=f"held-out scenes ({kind})",
                            feature_tokens=draft_length("msd", feature_tokens))
    return report


def _median_ms(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


@torch.no_grad()
def target_step_ms(target, context: int, tokens: int = 1, repeats: int = 50) -> float:
    """One KV-cached forward of the target's language model + LM head over ``tokens`` new tokens after a
    ``context``-token prefix (the decode step the engine pays; the image was encoded in the prefill)."""
    lm = target.model.language_model if hasattr(target.model, "language_model") else target.model
    cfg = lm.config
    cache = DynamicCache(config=cfg)
    ids = torch.randint(4, cfg.vocab_size, (1, context + tokens))
    lm(input_ids=ids[:, :context], use_cache=True, **cache_kwargs(lm, cache))

    def step():
        h = lm(input_ids=ids[:, context:], use_cache=True, **cache_kwargs(lm, cache)).last_hidden_state
        target.lm_head(h[:, -1:])
        cache.crop(-tokens)

    return _median_ms(step, repeats)


@torch.no_grad()
def drafter_forward_ms(net, lm_head, entries: int, tokens: int = 1, repeats: int = 50) -> float:
    """One drafter forward as the engine runs it: fuse ``tokens`` new entries, the decoder layer over them with
    ``entries`` cached entries, the feature heads and the target's LM head on every slot."""
    H = net.config.hidden_size
    cache = SpecKVCache.for_model(net.body, 1, entries + tokens + 8)
    x0 = torch.randn(1, entries, H)
    ok = torch.ones(1, entries, dtype=torch.bool)
    net.append(cache, x0, chain_parents(ok), ok)
    cache.commit(torch.arange(entries)[None], torch.tensor([entries]))
    emb, feat = torch.randn(1, tokens, 2 * H).split(H, -1)
    valid = torch.ones(1, tokens, dtype=torch.bool)

    def fwd():
        h = net.append(cache, net.fuse(emb, feat), chain_parents(valid), valid)
        lm_head(net.heads(h[:, -1]))
        cache.discard_pending()

    return _median_ms(fwd, repeats)


@torch.no_grad()
def drafter_prefill_ms(net, lm_head, entries: int, image_tokens: int = 0, compress_to: int | None = None,
                       repeats: int = 50) -> float:
    """The drafter's prefill as the engine runs it: with ``compress_to``, FLASH's queries over one image's
    ``image_tokens`` features first; then the decoder layer over ``entries`` prompt entries into an empty cache,
    and the heads and the target's LM head on the last one. This is where FLASH's compression pays on a small
    drafter: one decode-step forward costs about the same over 6 or 149 cached entries."""
    H = net.config.hidden_size
    x = torch.randn(1, entries, H)
    ok = torch.ones(1, entries, dtype=torch.bool)
    image = torch.randn(image_tokens, H)

    def prefill():
        if compress_to is not None:
            net.compress(image, compress_to)
        cache = SpecKVCache.for_model(net.body, 1, entries + 8)
        h = net.append(cache, x, chain_parents(ok), ok)
        lm_head(net.heads(h[:, -1]))

    return _median_ms(prefill, repeats)


# FLASH's compression sweep (issue 15, item 2): None = every visual entry kept (the MSD drafter: the same one
# decoder layer, fed the image tokens uncompressed)
SWEEP_SETTINGS = (1, 4, 8, 16, None)


@torch.no_grad()
def compression_sweep(home: str | Path | None = None, settings=SWEEP_SETTINGS, num_prompts: int = 8,
                      max_new_tokens: int = 48, repeats: int = 50, kind: str = "caption",
                      stop_at_eos: bool = True) -> dict:
    """For each ``compress_to`` of ``vlm-flash`` (and uncompressed), on held-out scenes: the drafter's prompt
    entries; one forward of the FLASH network over that many entries (1 new entry, median of ``repeats``, ms:
    the same network at every setting, so the difference is the compression's saving alone); the engine's
    drafting time per step, τ (tokens per target forward) and whether greedy output matched plain decoding.
    FLASH's queries cannot keep every visual token, so the uncompressed row's τ and drafting time come from
    ``vlm-msd`` (the same one decoder layer fed every visual token, drafting a chain as long as FLASH's) and
    its ``msd_forward_ms`` is that network's forward. Also the target's decode-step cost, so each cost is a
    fraction of a target step. Settings above the drafter's query count are skipped (reported).
    Run with 1 thread for comparable costs. ``stop_at_eos=False`` always generates ``max_new_tokens`` (an
    untrained micro build answers EOS at once and would leave no decoding steps to measure)."""
    target = load("vlm-target", home)
    model = target.model
    eos = target.extras["tokenizer"].eos_token_id if stop_at_eos else None
    flash, msd = load("vlm-flash", home).model, load("vlm-msd", home).model
    prompts = vlm_prompts(target.tokenizer, num_prompts, kind)
    refs = [model.generate(**p, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=0)
            for p in prompts]
    prompt_len = int(sum(p["input_ids"].shape[1] for p in prompts) / len(prompts))
    sar = flash.config.sar_tokens
    rows, skipped = [], []
    for n in settings:
        if n is not None and n > flash.config.compress_tokens:
            skipped.append(n)
            continue
        net = flash if n is not None else msd

        def make():
            return (build_drafter("flash", flash, target=model, compress_to=n, num_nodes=None) if n is not None
                    else build_drafter("msd", msd, target=model, num_tokens=sar, num_nodes=None))

        new = forwards = steps = 0
        draft_s, exact = 0.0, True
        for p, ref in zip(prompts, refs):
            drafter = make()
            out = SpeculativeGenerator(model, drafter).generate(p["input_ids"], pixel_values=p["pixel_values"],
                                                                max_new_tokens=max_new_tokens,
                                                                eos_token_id=[] if eos is None else eos)
            exact &= torch.equal(out.sequences, ref)
            st = out.stats
            new += st.new_tokens
            forwards += st.row_forwards
            steps += st.target_forwards - 1
            draft_s += st.draft_time
        n_image = model.config.image_seq_length
        S = prompt_len - n_image + (n or n_image)  # one image per prompt: its run becomes n entries
        row = {"compress_to": n, "drafter": "vlm-flash" if n is not None else "vlm-msd", "prompt_entries": S,
               "forward_ms": drafter_forward_ms(flash, model.lm_head, S, repeats=repeats),
               "prefill_ms": drafter_prefill_ms(net, model.lm_head, S, n_image, n, repeats=repeats),
               "draft_ms_per_step": 1000 * draft_s / max(1, steps), "tau": new / max(1, forwards),
               "exact": bool(exact)}
        if n is None:
            row["msd_forward_ms"] = drafter_forward_ms(net, model.lm_head, S, repeats=repeats)
        rows.append(row)
    step_ms = target_step_ms(model, prompt_len + max_new_tokens // 2, repeats=repeats)
    for r in rows:
        r["forward_vs_target_step"] = r["forward_ms"] / step_ms
    return {"target_step_ms": step_ms, "num_image_tokens": model.config.image_seq_length,
            "prompt_tokens": prompt_len, "prompts": f"{num_prompts} held-out scenes ({kind})",
            "max_new_tokens": max_new_tokens, "stop_at_eos": stop_at_eos, "threads": torch.get_num_threads(), "rows": rows,
            "skipped": skipped}


def sweep_table(result: dict) -> list[str]:
    lines = [f"target decode step {result['target_step_ms']:.2f} ms ({result['num_image_tokens']} visual tokens per "
             f"image, {result['threads']} thread(s)); {result['prompts']}",
             "fwd ms: one forward of the FLASH network over the entries; draft ms/step, tau: the engine with the "
             "drafter named (uncompressed: vlm-msd, its own forward in brackets)",
             "prefill ms: the named drafter's prefill (FLASH: its compression of the image, then its prompt entries)",
             f"{'compress_to':>12} {'drafter':>10} {'entries':>8} {'fwd ms':>8} {'fwd/step':>9} {'prefill ms':>11} "
             f"{'draft ms/step':>14} {'tau':>6} exact"]
    for r in result["rows"]:
        name = "none" if r["compress_to"] is None else str(r["compress_to"])
        lines.append(f"{name:>12} {r['drafter']:>10} {r['prompt_entries']:>8} {r['forward_ms']:>8.3f} "
                     f"{r['forward_vs_target_step']:>9.3f} {r['prefill_ms']:>11.3f} {r['draft_ms_per_step']:>14.3f} "
                     f"{r['tau']:>6.2f} "
                     f"{'yes' if r['exact'] else 'NO'}"
                     + (f"  (vlm-msd forward {r['msd_forward_ms']:.3f} ms)" if "msd_forward_ms" in r else ""))
    if result["skipped"]:
        lines.append(f"skipped (more than the drafter's queries): {result['skipped']}")
    return lines


__all__ = ["VLM_SWEEP_METHODS", "run_vlm_sweep", "VLM_METHODS", "feature_factories", "vlm_prompts", "run_vlm_suite", "target_step_ms", "drafter_forward_ms",
           "drafter_prefill_ms", "compression_sweep", "sweep_table", "SWEEP_SETTINGS"]
