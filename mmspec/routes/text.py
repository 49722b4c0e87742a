"""The text route: a causal LM target with an AR, diffusion (DEER / DiffuSpec) or prompt-lookup drafter."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..arguments import reject_unknown
from ..drafters import AutoregressiveDrafter, DEERDrafter, DiffusionLM, Drafter, PromptLookupDrafter
from ..generator import GenerationStats, SpeculativeGenerator
from ..tree import DEFAULT_TREE
from ..verifiers.tree_forward import text_config
from .common import (TEXT_METHODS, ZOO_AR_DRAFTERS, ZOO_DEFAULTS, Target, check_feature, check_vocab, drafter_kind,
                     load_drafter, take_options, wrong_method)

@dataclass
class TextOutput:
    texts: list[str] | None
    sequences: torch.LongTensor
    stats: GenerationStats | None  # None for plain decoding
    seconds: float


TEXT_OPTIONS = dict(num_tokens=None, tree=None, top_k=4, num_nodes=16, causal=None, cps=True, adl=True,
                    lattice=False, cps_config=None, adl_config=None)


def text_drafter(target: Target, drafter, method: str | None, home=None, device=None, trust_remote_code: bool = False,
                 **options):
    """(method, Drafter or None) for a causal LM target; None for plain decoding. ``trust_remote_code``: a
    drafter directory shipping its own modeling code (LLaDA, Dream) may run it."""
    opts = take_options(options, TEXT_OPTIONS, "text")
    if method is not None and method not in TEXT_METHODS:
        raise wrong_method(method, "text", target)
    if drafter is None and target.zoo in ZOO_DEFAULTS and method in (None, "deer"):
        method, drafter = "deer", ZOO_DEFAULTS[target.zoo][1]
    elif drafter is None and target.zoo in ZOO_AR_DRAFTERS and method in ("chain", "tree", "dynamic"):
        drafter = ZOO_AR_DRAFTERS[target.zoo]
    elif drafter is None and target.zoo == "code-target" and method == "diffuspec":
        drafter = "zoo:code-dlm"
    drafter = load_drafter(drafter, target, home, device, trust_remote_code)
    kind = drafter_kind(drafter)
    if kind == "name" and drafter == "prompt-lookup":
        kind, drafter, method = "none", None, method or "prompt-lookup"
    if kind == "name":
        raise ValueError(f"drafter {drafter!r} names an image drafter kind; a text target takes a causal LM, a "
                         "diffusion LM, a Drafter, 'zoo:<name>' or a checkpoint directory")
    if kind == "drafter":
        if method not in (None, "custom"):
            raise ValueError(f"a ready Drafter object is used as it is: leave method unset (got {method!r})")
        return "custom", drafter
    if kind == "feature":
        check_feature(drafter, target.model)
        raise ValueError("feature drafters (EAGLE / MSD / FLASH) serve VLM and image targets here; for a text "
                         "target pass a small causal LM (chain / tree / dynamic) or a diffusion LM (deer / diffuspec)")
    if kind in ("ngram", "janus"):
        raise ValueError(f"a {type(drafter).__name__} cannot draft for a text target")
    if method is None:
        method = {"causal": "chain", "diffusion": "deer", "none": "prompt-lookup"}[kind]
    k = opts["num_tokens"]
    if method in ("plain", "prompt-lookup"):
        if kind != "none":
            raise ValueError(f"method {method!r} takes no drafter model (got a {type(drafter).__name__})")
        return method, None if method == "plain" else PromptLookupDrafter(num_tokens=k or 4)
    if method in ("chain", "tree", "dynamic"):
        if kind != "causal":
            raise ValueError(f"method {method!r} needs a small causal LM drafter (drafter=...), got "
                             f"{'none' if drafter is None else type(drafter).__name__}")
        check_vocab(drafter, target)
        if method == "chain":
            return method, AutoregressiveDrafter(drafter, num_tokens=k or 4)
        if method == "tree":
            return method, AutoregressiveDrafter(drafter, tree=opts["tree"] or DEFAULT_TREE)
        return method, AutoregressiveDrafter(drafter, num_tokens=k or 4, tree="dynamic", top_k=opts["top_k"],
                                             num_nodes=opts["num_nodes"])
    # deer / diffuspec
    if kind != "diffusion":
        raise ValueError(f"method {method!r} needs a diffusion LM drafter (DiffusionLM, zoo:code-deer, or a "
                         f"Dream / LLaDA checkpoint), got {'none' if drafter is None else type(drafter).__name__}")
    tv = text_config(target.model).vocab_size
    if drafter.vocab_size != tv:
        raise ValueError(f"diffusion drafter proposes {drafter.vocab_size} ids but the target has {tv}: build it "
                         f"with DiffusionLM(..., target_vocab_size={tv})")
    if method == "deer":
        return method, DEERDrafter(drafter, num_tokens=k or 8)
    return method, _diffuspec(drafter, target, opts, k or 8, home)


def _diffuspec(dlm: DiffusionLM, target: Target, opts: dict, k: int, home):
    from ..drafters.diffuspec import ADLConfig, CPSConfig, DiffuSpecDrafter

    causal, cps_cfg, adl_cfg = opts["causal"], opts["cps_config"], opts["adl_config"]
    if target.zoo == "code-target":  # the zoo's tuned settings (see mmspec.eval.code_suite)
        from ..eval.code_suite import CPS_LAMBDA
        from ..zoo import load

        causal = load("code-ngram", home).model if causal is None and opts["cps"] else causal
        cps_cfg = cps_cfg or CPSConfig(lam=CPS_LAMBDA)
        adl_cfg = adl_cfg or ADLConfig(k_min=4, k_max=16, delta=4)
    eos = getattr(target.tokenizer, "eos_token_id", None)
    return DiffuSpecDrafter(dlm, causal=causal, eos_token_id=eos, num_tokens=k, cps=opts["cps"], adl=opts["adl"],
                            lattice=opts["lattice"], cps_config=cps_cfg, adl_config=adl_cfg)


class TextPipeline:
    """Prompts (strings or ids) in, continuations out, through the one decoding loop (or plain ``generate``)."""
    route = "text"

    def __init__(self, target: Target, method: str, drafter: Drafter | None):
        self.target, self.model, self.tokenizer = target, target.model, target.tokenizer
        self.method, self.drafter = method, drafter
        self.engine = SpeculativeGenerator(self.model, drafter) if drafter is not None else None

    def _inputs(self, prompts, input_ids, attention_mask):
        if isinstance(prompts, torch.Tensor):  # ids given positionally
            prompts, input_ids = None, prompts
        if input_ids is not None:
            ids = input_ids if input_ids.dim() == 2 else input_ids[None]
            return ids, attention_mask
        if prompts is None:
            raise ValueError("give prompts (strings) or input_ids")
        if self.tokenizer is None:
            raise ValueError("this target has no tokenizer: pass input_ids, or tokenizer= to mmspec.pipeline")
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        if not prompts or any(not isinstance(p, str) or not p for p in prompts):
            raise ValueError("prompts must be a non-empty list of non-empty strings")
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None and len(prompts) > 1:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        return enc.input_ids, enc.attention_mask

    @torch.no_grad()
    def generate(self, prompts=None, *, input_ids=None, attention_mask=None, max_new_tokens: int = 64,
                 do_sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int = 0, stop_at_eos: bool = True, images=None,
                 pixel_values=None, class_ids=None, **unknown) -> TextOutput:
        reject_unknown(unknown, type(self).generate, "the text pipeline's generate")
        if images is not None or pixel_values is not None:
            raise ValueError(f"images given, but {self.target.name} ({type(self.model).__name__}) is a text-only "
                             "target; use a LLaVA-class target for images")
        if class_ids is not None:
            raise ValueError("class ids are inputs of class-conditional image targets, not of a text target")
        ids, mask = self._inputs(prompts, input_ids, attention_mask)
        dev = self.model.device
        ids, mask = ids.to(dev), (torch.ones_like(ids) if mask is None else mask.to(dev))
        eos = None
        if stop_at_eos:
            eos = getattr(self.tokenizer, "eos_token_id", None)
            eos = eos if eos is not None else getattr(self.model.generation_config, "eos_token_id", None)
        pad = getattr(self.tokenizer, "pad_token_id", None)
        t0 = time.perf_counter()
        if self.engine is None:
            torch.manual_seed(seed)
            kw = dict(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p) if do_sample else \
                dict(do_sample=False)
            seqs = self.model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, eos_token_id=eos,
                                       pad_token_id=pad if pad is not None else 0, **kw)
            stats = None
        else:
            out = self.engine.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=do_sample,
                                       temperature=temperature, top_k=top_k, top_p=top_p,
                                       eos_token_id=eos if eos is not None else [], pad_token_id=pad,
                                       generator=torch.Generator(device=dev).manual_seed(seed))
            seqs, stats = out.sequences, out.stats
        seconds = time.perf_counter() - t0
        texts = None
        if self.tokenizer is not None:
            texts = self.tokenizer.batch_decode(seqs[:, ids.shape[1]:], skip_special_tokens=True)
        return TextOutput(texts, seqs, stats, seconds)

    __call__ = generate
