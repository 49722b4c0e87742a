"""The suites of ``mmspec eval``. Each one loads its target through :mod:`mmspec.pipeline` (which checks the
target is of the suite's kind and builds the drafters of checkpoint targets), lists its items and methods, and
turns a slice of the items into per-prompt records — timed by the bench's own loop (warm-up, interleaved
rounds, median per prompt), so ``mmspec bench`` and ``mmspec eval`` measure alike.

The zoo's method tables come from the bench suites (``code_suite``, ``vlm_suite``, ``image_suite``); a user's
checkpoint target gets the methods its drafters allow.
"""

from __future__ import annotations

import statistics
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch
from PIL import Image

from ..image_gen import NO_DRAFTER
from ..pipeline import pipeline
from ..loading import load_drafter, load_target
from ..registry import DFLASH_LOOKUP_ALONE, DFLASH_LOOKUP_CUT, DFLASH_TREE, DFLASH_TREE_LOOKUP, IMAGE_DRAFTER_MODELS, \
    draft_length, drafter_kind
from ..routes.text import text_drafter
from ..routes.vlm import vlm_drafter
from ..tree import DEFAULT_TREE, tree_label
from ..verifiers.tree_forward import text_config
from ..zoo import vlm_data as vd
from .bench import ALL_METHODS, AUTO, compare, prompt_record, time_methods, used_factories
from .code_suite import BLOCK_METHODS as CODE_BLOCK_METHODS, CODE_METHODS, diffusion_factories
from .config import EvalConfig
from .cost_model import OWN_PLAIN
from .datasets import Item, chat_items, code_items, image_items, sample_questions, vlm_items
from .image_suite import suite_methods
from .vlm_suite import BLOCK_METHODS as VLM_BLOCK_METHODS, VLM_METHODS, feature_factories, vlm_prompts

NEEDS_DRAFT = ("hf-assisted", "chain", "tree", "dynamic")
UNDRAFTED = ("plain", "mmspec-plain", "hf-assisted", "hf-prompt-lookup")  # no mmspec drafter to run adaptively


def with_auto(available: list[str]) -> list[str]:
    """``available`` and, for each method mmspec drafts, ``<method>-auto``: its drafter under the adaptive policy
    (:class:`~mmspec.drafters.adaptive.AdaptiveDrafter`, what ``mmspec.pipeline`` runs by default), timed as any row."""
    return available + [m + AUTO for m in available if m not in UNDRAFTED]


@dataclass
class Suite:
    name: str
    target: str  # what ran, in words
    base: str  # the method speedups are measured against
    available: list[str]
    methods: list[str] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)
    notes: str = ""
    runner: Callable | None = None  # (indices, desc) -> records
    table: dict = field(default_factory=dict)  # image: slug -> (image suite name, method, settings)
    tokenizer: object = None  # text suites: decodes the answers written as Spec-Bench files

    def run(self, indices: list[int], rank: int = 0) -> list[dict]:
        desc = f"{self.name}" + (f" [rank {rank}]" if rank else "")
        records = self.runner(indices, desc)
        for r in records:
            r["rank"] = rank
        return records


def _require(target, route: str, suite: str, spec: str) -> None:
    if target.route != route:
        kind = {"text": "a causal LM", "vlm": "a LLaVA-class VLM", "image": "a visual AR generator"}[route]
        raise ValueError(f"the {suite} suite needs {kind} target; {spec} ({type(target.model).__name__}) is a "
                         f"{target.route} target")


def _records(suite: str, report: dict, items: list[Item], indices: list[int]) -> list[dict]:
    out = []
    for res in report["results"]:
        for i, rec in zip(indices, res["per_prompt"]):
            out.append({"suite": suite, "method": res["method"], "item": i, "id": items[i].id,
                        "category": items[i].category, **rec})
    return out


class OverLong(Exception):
    """An item (or an earlier turn it builds on) does not fit the target's positions."""


def skip_record(suite: str, items: list[Item], i: int, reason: str) -> dict:
    """An item left out (over-long): kept among the records so the report counts and names it."""
    return {"suite": suite, "method": None, "item": i, "id": items[i].id, "category": items[i].category,
            "skipped": reason}


# ---------------------------------------------------------------------------------------------------- text


def chat_text(tokenizer, turns: list[str], answers: list[str]) -> str:
    """A conversation up to the last user turn: the tokenizer's chat template, else a plain USER/ASSISTANT
    layout (Vicuna-style, as Spec-Bench's default)."""
    if getattr(tokenizer, "chat_template", None):
        msgs = []
        for j, t in enumerate(turns):
            msgs.append({"role": "user", "content": t})
            if j < len(turns) - 1:
                msgs.append({"role": "assistant", "content": answers[j]})
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    text = ""
    for j, t in enumerate(turns):
        text += f"USER: {t}\nASSISTANT:" + (f" {answers[j]}\n" if j < len(turns) - 1 else "")
    return text


def placement(cfg: EvalConfig, spec: str, device: str | None) -> tuple[str | None, str | None]:
    """(device_map, drafter device) for a target spec: the zoo runs where it loads (its models are a few MB and
    its drafters come from the bench suites' factories); checkpoint targets take ``--device-map`` /
    ``--drafter-device``, else this process's own device on a multi-GPU launch."""
    if spec.startswith("zoo:"):
        if cfg.device_map or cfg.drafter_device:
            raise ValueError("--device-map / --drafter-device place checkpoint models; the zoo runs where it loads")
        return None, None
    return cfg.device_map or device, cfg.drafter_device or device


def _dlm_methods(cfg: EvalConfig, target, drafter_device) -> dict:
    """deer / diffuspec factories over ``--dlm`` (a diffusion LM, e.g. the output of ``mmspec train deer``)."""
    if not cfg.dlm:
        return {}
    dlm = load_drafter(cfg.dlm, target, cfg.home, drafter_device, cfg.trust_remote_code)
    if drafter_kind(dlm) != "diffusion":
        raise ValueError(f"--dlm {cfg.dlm} is not a diffusion LM (pass small causal LMs with --drafter)")
    return {m: (lambda m=m: text_drafter(target, dlm, m, num_tokens=cfg.block_tokens)[1])
            for m in ("deer", "diffuspec")}


def _dflash_methods(target, block) -> dict:
    """``dflash`` / ``dflash-tree`` / ``dflash-tree-lookup`` / ``dflash-lookup-alone`` / ``dflash-lookup-cut``
    factories over a given block drafter, checked through the pipeline first (the drafter fits this target)."""
    text_drafter(target, block, "dflash")
    return {"dflash": lambda: text_drafter(target, block, "dflash")[1],
            "dflash-tree": lambda: text_drafter(target, block, "dflash", **DFLASH_TREE)[1],
            "dflash-tree-lookup": lambda: text_drafter(target, block, "dflash", **DFLASH_TREE_LOOKUP)[1],
            "dflash-lookup-alone": lambda: text_drafter(target, block, "dflash", **DFLASH_LOOKUP_ALONE)[1],
            "dflash-lookup-cut": lambda: text_drafter(target, block, "dflash", **DFLASH_LOOKUP_CUT)[1]}


def text_suite(cfg: EvalConfig, suite: str, device: str | None = None) -> Suite:
    """code (zoo held-out functions / HumanEval file) or chat (Spec-Bench questions, turn by turn)."""
    spec = cfg.model or "zoo:code-target"
    device_map, drafter_device = placement(cfg, spec, device)
    target = load_target(spec, device_map=device_map, home=cfg.home)
    _require(target, "text", suite, spec)
    tok = target.tokenizer
    if tok is None:
        raise ValueError(f"the {suite} suite needs the target's tokenizer next to its weights ({spec})")
    zoo = target.zoo == "code-target"
    if zoo:
        draft = load_drafter(cfg.drafter or "zoo:code-drafter", target, cfg.home)
        extra = diffusion_factories(cfg.home, cfg.block_tokens, cfg.block_tokens)
        extra.update(_dlm_methods(cfg, target, drafter_device))  # --dlm replaces the zoo's deer / diffuspec
        if drafter_kind(draft) == "dflash":  # your own block drafter in the zoo's dflash rows; the chain keeps the zoo's
            for name in CODE_BLOCK_METHODS:  # (the zoo's drafter: not mixed into a run of yours)
                extra.pop(name, None)
            extra.update(_dflash_methods(target, draft))
            draft = load_drafter("zoo:code-drafter", target, cfg.home)
        available = with_auto(ALL_METHODS + list(extra))
        default = [m for m in CODE_METHODS if m in available]  # a zoo without code-dflash / code-eagle runs the rest
    else:
        draft = load_drafter(cfg.drafter, target, cfg.home, drafter_device) if cfg.drafter else None
        extra = _dlm_methods(cfg, target, drafter_device)
        if draft is not None and drafter_kind(draft) == "dflash":  # a block drafter: its own rows, no AR chain
            extra.update(_dflash_methods(target, draft))
            draft = None
        elif draft is not None:  # through the pipeline: kind and vocabulary checks
            text_drafter(target, draft, "chain")
        available = [m for m in ALL_METHODS if draft is not None or m not in NEEDS_DRAFT] + list(extra)
        default = available
        available = with_auto(available)
    methods = cfg.methods_for(suite, available, default)
    if suite == "code":
        items = code_items(cfg.num_prompts, cfg.code_data)
        stop = bool(cfg.stop_at_eos)
    else:
        items = chat_items(cfg.chat_data or str(sample_questions()), cfg.num_prompts)
        stop = cfg.stop_at_eos is not False
    eos = tok.eos_token_id if stop else None
    special = not zoo and not (suite == "chat" and getattr(tok, "chat_template", None))
    answers: dict[tuple[str, int], str] = {}  # chat: the target's greedy answer to earlier turns
    max_positions = getattr(text_config(target.model), "max_position_embeddings", None)

    def too_long(ids: torch.Tensor) -> str | None:
        if max_positions is not None and ids.shape[1] + cfg.max_new_tokens > max_positions:
            return (f"prompt of {ids.shape[1]} tokens + {cfg.max_new_tokens} new tokens > the target's "
                    f"{max_positions} positions")
        return None

    def answer(qid: str, turns: list[str]) -> str:
        key = (qid, len(turns))
        if key not in answers:
            ids = tok(chat_text(tok, turns, [answer(qid, turns[:j + 1]) for j in range(len(turns) - 1)]),
                      return_tensors="pt", add_special_tokens=special).input_ids.to(target.model.device)
            if too_long(ids):
                raise OverLong(f"its turn {len(turns)} is over-long: {too_long(ids)}")
            with torch.no_grad():
                seq = target.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                            max_new_tokens=cfg.max_new_tokens, eos_token_id=tok.eos_token_id,
                                            pad_token_id=tok.pad_token_id or 0)
            answers[key] = tok.decode(seq[0, ids.shape[1]:], skip_special_tokens=True).strip()
        return answers[key]

    def encode(item: Item) -> torch.Tensor:
        if suite == "code":
            text = item.text
        else:
            qid = item.id.rsplit("-", 1)[0]
            text = chat_text(tok, item.turns, [answer(qid, item.turns[:j + 1]) for j in range(len(item.turns) - 1)])
        return tok(text, return_tensors="pt", add_special_tokens=special).input_ids.to(target.model.device)

    def run(indices: list[int], desc: str) -> list[dict]:
        prompts, kept, skipped = [], [], []
        for i in indices:
            try:
                ids = encode(items[i])
                reason = too_long(ids)
            except OverLong as exc:  # a later turn of a question whose earlier turn cannot be answered
                ids, reason = None, str(exc)
            if reason:
                warnings.warn(f"{suite} suite: skipping item {items[i].id} ({reason})", stacklevel=1)
                skipped.append(skip_record(suite, items, i, reason))
                continue
            prompts.append(ids)
            kept.append(i)
        if not prompts:
            return skipped
        report = compare(target.model, draft, prompts, methods, max_new_tokens=cfg.max_new_tokens,
                         num_tokens=cfg.num_tokens, do_sample=cfg.do_sample, temperature=cfg.temperature,
                         repeats=cfg.repeats, progress=cfg.progress,
                         extra=used_factories(extra, methods),
                         eos_token_id=eos, seed=cfg.seed, warmup=cfg.warmup, per_prompt=True, desc=desc)
        return _records(suite, report, items, kept) + skipped

    source = {"code": cfg.code_data or "held-out stdlib functions (zoo)",
              "chat": cfg.chat_data or f"sample questions ({sample_questions().name})"}[suite]
    if suite == "chat":
        questions = len({it.id.rsplit("-", 1)[0] for it in items})
        source += f": {questions} questions, {len(items)} turns (one prompt per turn)"
    notes = (f"{source}; {'up to ' if stop else ''}{cfg.max_new_tokens} new tokens"
             + (", multi-turn questions continue from the target's greedy answers" if suite == "chat" else ""))
    return Suite(suite, spec + (f", drafter {cfg.drafter}" if cfg.drafter else ""), "plain", available,
                 ["plain"] + [m for m in methods if m != "plain"], items, notes, run, tokenizer=tok)


# ---------------------------------------------------------------------------------------------------- vlm

BASE_VLM = ["plain", "mmspec-plain", "hf-prompt-lookup", "prompt-lookup"]


def vlm_suite(cfg: EvalConfig, device: str | None = None) -> Suite:
    """Zoo scenes (captions and questions) or a user file of image + question, every answer stopping at EOS."""
    spec = cfg.vlm_model or "zoo:vlm-target"
    device_map, drafter_device = placement(cfg, spec, device)
    target = load_target(spec, device_map=device_map, home=cfg.home)
    _require(target, "vlm", "vlm", spec)
    proc = target.tokenizer
    if proc is None:
        raise ValueError(f"the vlm suite needs the target's processor next to its weights ({spec})")
    zoo = target.zoo == "vlm-target"
    k = draft_length("chain", cfg.num_tokens)
    if zoo:
        extra = feature_factories(cfg.home, k, cfg.feature_tokens)
        mine = _vlm_drafter_methods(cfg, target, proc, drafter_device)  # --vlm-drafter replaces the zoo's own
        extra.update(mine)
        default = [m for m in VLM_METHODS if m not in VLM_BLOCK_METHODS or m in extra]  # a zoo without vlm-dflash
        available, default = BASE_VLM + list(extra), default + [m for m in mine if m not in VLM_METHODS]
    else:
        extra = _vlm_drafter_methods(cfg, target, proc, drafter_device)
        available = BASE_VLM + list(extra)
        default = available
    available = with_auto(available)  # what mmspec.pipeline runs: each drafter under the adaptive policy
    methods = cfg.methods_for("vlm", available, default)
    items = vlm_items(cfg.num_prompts, cfg.vlm_data)
    tok = getattr(proc, "tokenizer", proc)
    eos = tok.eos_token_id if cfg.stop_at_eos is not False else None

    def encode_all() -> list[dict]:
        if cfg.vlm_data is None:
            return vlm_prompts(proc, len(items), "mixed")
        out = []
        for it in items:
            p = proc(images=[Image.open(it.image).convert("RGB")], text=[vlm_text(proc, it.question, zoo)],
                     return_tensors="pt")
            out.append({"input_ids": p["input_ids"], "pixel_values": p["pixel_values"]})
        return out

    def run(indices: list[int], desc: str) -> list[dict]:
        encoded = encode_all()
        dev = target.model.device
        prompts = [{k: v.to(dev) for k, v in encoded[i].items()} for i in indices]
        report = compare(target.model, None, prompts, methods, max_new_tokens=cfg.max_new_tokens,
                         num_tokens=k, do_sample=cfg.do_sample, temperature=cfg.temperature, repeats=cfg.repeats,
                         progress=cfg.progress,
                         extra=used_factories(extra, methods),
                         eos_token_id=eos, seed=cfg.seed, warmup=cfg.warmup, per_prompt=True, desc=desc)
        return _records("vlm", report, items, indices)

    source = cfg.vlm_data or "held-out zoo scenes, captions and questions"
    fk = {m: draft_length(m, cfg.feature_tokens) for m in ("eagle", "msd")}
    notes = (f"{source}; {'up to ' if eos is not None else ''}{cfg.max_new_tokens} new tokens; draft lengths: text-only "
             f"chain {k}, EAGLE chain {fk['eagle']}, MSD chain {fk['msd']} (dynamic trees one deeper), FLASH its "
             f"semi-autoregressive head's block")
    return Suite("vlm", spec + (f", drafter {cfg.vlm_drafter}" if cfg.vlm_drafter else ""), "plain", available,
                 ["plain"] + [m for m in methods if m != "plain"], items, notes, run)


def vlm_text(processor, question: str, zoo: bool) -> str:
    """The prompt for one picture: as given when it holds the placeholder; the zoo's question format; the
    processor's chat template; else the placeholder, a newline and the question."""
    placeholder = getattr(processor, "image_token", "<image>")
    if placeholder in question:
        return question
    if zoo:
        return vd.with_image(vd.QUESTION_PROMPT.format(question=question))
    if getattr(processor, "chat_template", None):
        conv = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        return processor.apply_chat_template(conv, add_generation_prompt=True)
    return f"{placeholder}\n{question}"


# ---------------------------------------------------------------------------------------------------- image


def image_slug(method: str, kw: dict) -> str:
    """A command-line name for an image-suite entry: method, tree, then any bound or k off its default."""
    parts = [method] + ([tree_label(kw["tree"])] if kw.get("tree") else [])
    if kw.get("delta") not in (None, 0.1):
        parts.append(f"d{kw['delta']}")
    if kw.get("lam") not in (None, 2.0):
        parts.append(f"lam{kw['lam']}")
    if kw.get("lantern_k") not in (None, 8):
        parts.append(f"k{kw['lantern_k']}")
    if kw.get("num_tokens") is not None:
        parts.append(f"n{kw['num_tokens']}")
    if kw.get("drafter") not in (None, "ar"):
        parts.append(kw["drafter"])
    if kw.get("coupling") == "gumbel":
        parts.append("gumbel")
    return "-".join(parts)


def image_table(sweep: bool, have: list[str]) -> dict[str, tuple[str, str, dict]]:
    """slug -> (the image suite's name, method, settings): the image suite's own method list, with its feature
    drafter entries when those drafters are built (``have``)."""
    return {image_slug(m, kw): (name, m, kw) for name, m, kw in suite_methods(sweep, have)}


def _vlm_drafter_methods(cfg: EvalConfig, target, proc, drafter_device) -> dict:
    """Factories of the methods ``--vlm-drafter`` serves (its method read off the drafter itself)."""
    if not cfg.vlm_drafter:
        return {}
    k = draft_length("chain", cfg.num_tokens)
    d = load_drafter(cfg.vlm_drafter, target, cfg.home, drafter_device)
    method, d = vlm_drafter(target, d, None)

    def make(m=method, **kw):
        return lambda: pipeline(target.model, d, m, processor=proc, **kw).drafter

    if method == "chain":
        return {"chain": make(num_tokens=k), "tree": make("tree", tree=DEFAULT_TREE)}
    if method == "flash":
        return {"flash": make()}
    fk = draft_length(method, cfg.feature_tokens)
    return {f"{method}-chain": make(num_tokens=fk),
            f"{method}-dynamic": make(num_tokens=fk + 1, tree="dynamic", top_k=4, num_nodes=16)}


def image_suite(cfg: EvalConfig) -> Suite:
    """Class-conditional pictures one at a time (batch 1, the papers' latency setting), per class. With
    ``image_drafter`` (a ``mmspec train image-drafter`` directory) its rows replace the zoo's feature or sar
    drafter's."""
    pipe = pipeline("zoo:image-target", drafter=cfg.image_drafter, home=cfg.home, drafter_device=cfg.image_device)
    have = [k for k, net in pipe.generator.feature_drafters.items() if net is not None]
    table = image_table(cfg.image_sweep, have)
    # the loop without drafts: the own-engine baseline whose step time the cost model divides by
    table[OWN_PLAIN] = ("own-engine plain sampling (no drafter)", "spec", {"drafter": NO_DRAFTER})
    available = list(table)
    methods = cfg.methods_for("image", available, available)
    base = next(s for s, (_, m, _) in table.items() if m == "ar")
    methods = [base] + [m for m in methods if m != base]
    # the Gumbel rows' reference: plain AR under the same coupling gives the very same codes for a seed
    gumbel_base = next((s for s in methods if table[s][1] == "ar" and table[s][2].get("coupling") == "gumbel"), None)
    n_cls = pipe.layout.num_classes
    classes = cfg.image_classes if cfg.image_classes is not None else list(range(min(cfg.num_prompts or n_cls, n_cls)))
    bad = [c for c in classes if not -1 <= c < n_cls]
    if bad or not classes:
        raise ValueError(f"image classes must lie in -1..{n_cls - 1}, got {classes}")
    items = image_items(classes, pipe.classes)
    greedy = cfg.image_temperature <= 0

    def runner(kw: dict):
        def run(item: tuple[int, int]):
            i, cid = item
            out = pipe.generate([cid], seed=cfg.seed + i, cfg_scale=cfg.image_cfg_scale,
                                temperature=cfg.image_temperature, **{"drafter": "ar", **kw})
            return out.codes, out.stats
        return run

    def run(indices: list[int], desc: str) -> list[dict]:
        runners = {s: runner({"method": table[s][1], **table[s][2]}) for s in methods}
        runs = time_methods(runners, [(i, items[i].class_id) for i in indices], cfg.repeats, cfg.warmup, cfg.seed,
                            cfg.progress, desc)
        out = []
        for s, r in runs.items():
            for j, i in enumerate(indices):
                codes = r["outputs"][j]
                exact = bool(torch.equal(codes, runs[base]["outputs"][j])) if greedy else None
                if not greedy and gumbel_base is not None and table[s][2].get("coupling") == "gumbel":
                    exact = bool(torch.equal(codes, runs[gumbel_base]["outputs"][j]))
                secs = statistics.median(t[j] for t in r["times"])
                rec = prompt_record(secs, codes.numel(), r["stats"][j], exact)
                rec["round_seconds"] = [t[j] for t in r["times"]]  # the cost model scales round 0's parts
                out.append({"suite": "image", "method": s, "item": i, "id": items[i].id,
                            "category": items[i].category, **rec})
        return out

    notes = (f"{len(classes)} classes, one picture each at batch 1 (CFG {cfg.image_cfg_scale}, "
             f"{'greedy' if greedy else f'T = {cfg.image_temperature}'}, {pipe.layout.num_codes} codes per picture)")
    drafters = ", ".join(IMAGE_DRAFTER_MODELS[k] for k in ("ar", *have))
    return Suite("image", f"zoo:image-target (CFG); drafters {drafters}", base, available, methods, items, notes, run,
                 table)


def build_suite(cfg: EvalConfig, name: str, device: str | None = None) -> Suite:
    """``device``: this process's GPU on a multi-GPU launch (checkpoint targets only)."""
    if name in ("code", "chat"):
        return text_suite(cfg, name, device)
    if name == "vlm":
        return vlm_suite(cfg, device)
    return image_suite(cfg)


__all__ = ["Suite", "build_suite", "text_suite", "vlm_suite", "image_suite", "image_slug", "image_table",
           "chat_text", "vlm_text"]
