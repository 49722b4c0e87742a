"""The text route: a causal LM target with an AR, diffusion (DEER / DiffuSpec), block-diffusion (DFlash) or
prompt-lookup drafter."""

from __future__ import annotations

import time

import torch

from ..arguments import reject_unknown
from ..frontend import TextOutput, call_generator, engine_eos, generated_count, eos_token_id, hf_sampling_rng, \
    refuse_hf_coupling
from ..drafters.adaptive import unwrap
from ..generator import check_streamer
from ..loading import load_drafter
from ..options import check_generate
from ..request import check_positions
from ..registry import (CAUSAL_METHODS, DIFFUSION_METHODS, NO_MODEL_METHODS, TEXT_METHODS, build_drafter,
                        causal_method, check_feature, check_vocab, drafter_kind, engine, take_options, wrong_method,
                        zoo_diffuspec)
from ..targets import Target
from ..verifiers.tree_forward import text_config
from ..zoo import load as zoo_load
from .zoo_defaults import zoo_default, zoo_settings


def text_drafter(target: Target, drafter, method: str | None, home=None, device=None, trust_remote_code: bool = False,
                 **options):
    """(method, Drafter or None) for a causal LM target; None for plain decoding. ``trust_remote_code``: a
    drafter directory shipping its own modeling code (LLaDA, Dream) may run it."""
    opts = take_options(options, "text")
    if method is not None and method not in TEXT_METHODS:
        raise wrong_method(method, "text", target.name, target.model)
    zoo_drafter = drafter is None
    if zoo_drafter:
        method, drafter = zoo_default(target, method)
    spec = drafter if isinstance(drafter, str) else None  # what the caller named, for messages
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
        if drafter.config.method != "eagle":
            raise ValueError(f"a {drafter.config.method.upper()} feature drafter serves VLM targets; a text target takes "
                             "an EAGLE-style feature drafter (method 'eagle'), a small causal LM, a diffusion LM or a "
                             "DFlash drafter")
    if kind in ("ngram", "janus"):
        raise ValueError(f"a {type(drafter).__name__} cannot draft for a text target")
    if method is None:
        method = {"causal": causal_method(opts["tree"]), "diffusion": "deer", "none": "prompt-lookup",
                  "dflash": "dflash", "feature": "eagle"}[kind]
    got = ("'prompt-lookup' (no drafter model)" if spec == "prompt-lookup" else "none") if drafter is None else \
        type(drafter).__name__
    if method in NO_MODEL_METHODS and kind != "none":
        raise ValueError(f"method {method!r} takes no drafter model (got a {got})")
    if method in CAUSAL_METHODS:
        if kind != "causal":
            raise ValueError(f"method {method!r} needs a small causal LM drafter (drafter=...), got {got}")
        check_vocab(drafter, target.model)
    if method in DIFFUSION_METHODS:
        if kind != "diffusion":
            raise ValueError(f"method {method!r} needs a diffusion LM drafter (DiffusionLM, zoo:code-deer, or a "
                             f"Dream / LLaDA checkpoint), got {got}")
        tv = text_config(target.model).vocab_size
        if drafter.vocab_size != tv:
            raise ValueError(f"diffusion drafter proposes {drafter.vocab_size} ids but the target has {tv}: build "
                             f"it with DiffusionLM(..., target_vocab_size={tv})")
    if (method == "eagle") != (kind == "feature"):
        raise ValueError(f"method 'eagle' takes an EAGLE-style feature drafter (FeatureDraftModel, zoo:code-eagle); "
                         f"method {method!r} with a {got} does not fit")
    if (method == "dflash") != (kind == "dflash"):
        raise ValueError(f"method 'dflash' takes a block-diffusion drafter (DFlashDraftModel, zoo:code-dflash, or a "
                         f"z-lab / speculators DFlash directory); method {method!r} with a {got} does not fit")
    if zoo_drafter:  # the zoo's drafter runs with the zoo's tuned settings unless the caller shaped its drafts
        opts = zoo_settings(target, method, opts)
    if opts["tree_nodes"] is not None and method != "dflash":
        raise ValueError(f"tree_nodes (a DDTree's node budget) applies to method 'dflash' only, not {method!r}")
    if method == "diffuspec" and target.zoo == "code-target":  # the zoo's tuned settings, unless given
        causal = zoo_load("code-ngram", home).model if opts["causal"] is None and opts["cps"] else opts["causal"]
        tuned = zoo_diffuspec(causal)
        opts.update(causal=causal, cps_config=opts["cps_config"] or tuned["cps_config"],
                    adl_config=opts["adl_config"] or tuned["adl_config"])
    eos = getattr(target.tokenizer, "eos_token_id", None)
    return method, build_drafter(method, drafter, target=target.model, eos_token_id=eos, **opts)


def encode_prompts(tokenizer, prompts) -> tuple[torch.LongTensor, torch.Tensor]:
    """Left-padded ids and attention mask for a batch of prompts; the caller's tokenizer is left as it is (a
    tokenizer without a pad token pads with EOS)."""
    rows = [tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + list(r) for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return ids, mask


class TextPipeline:
    """Prompts (strings or ids) in, continuations out, through the one decoding loop (or plain ``generate``).
    ``method`` is the default; ``generate(method=...)`` switches it for a call, building that method's drafter
    with ``build(method) -> (method, Drafter or None)`` once. ``sampling_method``: the default of sampling calls
    where it differs (a zoo target's method that is fastest when greedy but not when sampling)."""
    route = "text"

    def __init__(self, target: Target, method: str, drafter, build=None, sampling_method: str | None = None):
        if sampling_method is not None and build is None:
            raise ValueError("a sampling_method other than the pipeline's method needs build= to make its drafter")
        self.target, self.model, self.tokenizer = target, target.model, target.tokenizer
        # the method's drafter (what a user inspects); the engine may run it under the adaptive policy
        self.method, self.drafter = method, unwrap(drafter)
        self.sampling_method = sampling_method
        self.engine = engine(self.model, drafter)
        self._build = build
        self._engines = {method: self.engine}  # one per method used: bounded by the route's methods

    def _engine_for(self, method: str | None):
        method = method or self.method
        if method not in self._engines:
            if self._build is None:
                raise ValueError(f"this pipeline runs method {self.method!r} only")
            self._engines[method] = engine(self.model, self._build(method)[1])
        return method, self._engines[method]

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
        if not isinstance(prompts, (str, list, tuple)):
            raise ValueError(f"prompts must be a string or a list of strings (or input_ids= a LongTensor), got "
                             f"{type(prompts).__name__}")
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        if not prompts or any(not isinstance(p, str) or not p for p in prompts):
            raise ValueError("prompts must be a non-empty list of non-empty strings")
        return encode_prompts(self.tokenizer, prompts)

    @torch.no_grad()
    def generate(self, prompts=None, *, input_ids=None, attention_mask=None, max_new_tokens: int = 64,
                 do_sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, generator: torch.Generator | None = None, seed: int | None = None,
                 stop_at_eos: bool = True, method: str | None = None, streamer=None, images=None,
                 pixel_values=None, class_ids=None, coupling: str = "rejection", **unknown) -> TextOutput:
        """``streamer``: HF's streamer protocol (e.g. ``TextIteratorStreamer(pipe.tokenizer, skip_prompt=True)``),
        fed each step's committed tokens as they are verified; one prompt per call. ``coupling`` (sampling):
        ``"rejection"`` or ``"gumbel"`` (:mod:`mmspec.verifiers.coupling`: the same tokens as ``mmspec-plain``
        under the coupling for a seed, whatever the drafter)."""
        reject_unknown(unknown, type(self).generate, "the text pipeline's generate")
        checked = check_generate("the text pipeline's generate", max_new_tokens=max_new_tokens, do_sample=do_sample,
                                 temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                 stop_at_eos=stop_at_eos, method=method, coupling=coupling)  # greedy: sampling -> None
        temperature, top_k, top_p = checked["temperature"], checked["top_k"], checked["top_p"]
        coupling = checked["coupling"] or "rejection"
        if images is not None or pixel_values is not None:
            raise ValueError(f"images given, but {self.target.name} ({type(self.model).__name__}) is a text-only "
                             "target; use a LLaVA-class target for images")
        if class_ids is not None:
            raise ValueError("class ids are inputs of class-conditional image targets, not of a text target")
        if method is None and do_sample and self.sampling_method is not None:
            method = self.sampling_method
        method, spec = self._engine_for(method)
        ids, mask = self._inputs(prompts, input_ids, attention_mask)
        check_streamer(streamer, ids)
        dev = self.model.device
        ids, mask = ids.to(dev), (torch.ones_like(ids) if mask is None else mask.to(dev))
        eos = eos_token_id(stop_at_eos, self.tokenizer, self.model)
        pad = self._pad_id()
        rng = call_generator(generator, seed, dev)
        t0 = time.perf_counter()
        if spec is None:
            refuse_hf_coupling(coupling, method)
            check_positions(self.model, ids.shape[1], max_new_tokens)
            kw = dict(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p) if do_sample else \
                dict(do_sample=False)
            with hf_sampling_rng(rng):
                seqs = self.model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, eos_token_id=eos,
                                           pad_token_id=pad if pad is not None else 0, streamer=streamer, **kw)
            stats = None
        else:
            out = spec.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=do_sample,
                                temperature=temperature, top_k=top_k, top_p=top_p, eos_token_id=engine_eos(eos),
                                pad_token_id=pad, generator=rng, streamer=streamer, coupling=coupling)
            seqs, stats = out.sequences, out.stats
        seconds = time.perf_counter() - t0
        texts = None
        if self.tokenizer is not None:
            texts = self.tokenizer.batch_decode(seqs[:, ids.shape[1]:], skip_special_tokens=True)
        config = dict(method=method, max_new_tokens=max_new_tokens, do_sample=do_sample, temperature=temperature,
                      top_k=top_k, top_p=top_p, stop_at_eos=stop_at_eos, seed=seed)
        if coupling != "rejection":
            config["coupling"] = coupling
        count = stats.new_tokens if stats is not None else generated_count(seqs[:, ids.shape[1]:], eos)
        return TextOutput(texts, seqs, stats, seconds, config, count)

    def _pad_id(self):
        tok = self.tokenizer
        if tok is None:
            return None
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    __call__ = generate
