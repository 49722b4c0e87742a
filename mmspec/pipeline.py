"""One entry point for every kind of target: ``mmspec.pipeline(target, drafter=None, method=None, **options)``.

    pipe = mmspec.pipeline("zoo:code-target")                      # text: DEER with the zoo's aligned dLM
    pipe("def add(a, b):\\n", max_new_tokens=32).texts
    pipe = mmspec.pipeline("zoo:vlm-target")                       # VLM: MSD with zoo:vlm-msd
    pipe.generate(images=[img], prompts=["<image>\\nCaption:"])
    pipe = mmspec.pipeline("zoo:image-target", method="lantern++") # image: class ids in, pictures out
    pipe.generate([0, 5, 11], seed=0).images

The target is inspected, not named: a stock Janus model takes the Janus route; a config carrying
``mmspec_image_layout`` is a visual AR generator over VQ codes (image route); a config with an image
placeholder id or a vision tower is LLaVA-class (VLM route); any other model that can generate is a causal
LM (text route). Each route picks its default method and drafter family and refuses combinations that make
no sense (an image method on a text model, pictures for a text-only target, a feature drafter trained for
another target, a drafter over another vocabulary) with a ValueError saying what would work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .drafters import AutoregressiveDrafter, DEERDrafter, DiffusionLM, Drafter, PromptLookupDrafter
from .drafters.feature_model import FeatureDraftModel, signature_mismatch
from .generator import GenerationStats, SpeculativeGenerator
from .tree import DEFAULT_TREE
from .verifiers.tree_forward import text_config

# method -> what it is, per route (the descriptions make the error messages)
TEXT_METHODS = {
    "plain": "the target's own generate, no drafter",
    "chain": "a small causal LM drafts a chain",
    "tree": "a small causal LM drafts a static tree",
    "dynamic": "a small causal LM drafts an EAGLE-2 dynamic tree",
    "prompt-lookup": "n-gram lookup in the context, no drafter model",
    "deer": "a diffusion LM drafts a block in one step (DEER)",
    "diffuspec": "a diffusion LM's lattice with causal path search (DiffuSpec)",
}
VLM_METHODS = {
    "plain": "the target's own generate, no drafter",
    "msd": "MSD feature drafter (decoupled visual inputs)",
    "flash": "FLASH feature drafter (compressed visual tokens, semi-autoregressive head)",
    "eagle": "EAGLE-style feature drafter",
    "text": "a text-only causal LM drafter",
    "prompt-lookup": "n-gram lookup in the context, no drafter model",
}
IMAGE_METHODS = {
    "ar": "plain AR sampling with CFG",
    "spec": "lossless speculative decoding",
    "lantern": "LANTERN relaxed acceptance (total-variation bound δ)",
    "lantern++": "LANTERN++ relaxed acceptance (multiplicative bound λ, static tree)",
}
ROUTE_METHODS = {"text": TEXT_METHODS, "vlm": VLM_METHODS, "image": IMAGE_METHODS, "janus": IMAGE_METHODS}
# zoo targets: (default method, default drafter)
ZOO_DEFAULTS = {"code-target": ("deer", "zoo:code-deer"), "vlm-target": ("msd", "zoo:vlm-msd"),
                "image-target": ("lantern++", "ar")}
ZOO_AR_DRAFTERS = {"code-target": "zoo:code-drafter", "vlm-target": "zoo:vlm-drafter"}


def detect_route(model) -> str:
    """``text``, ``vlm``, ``image`` or ``janus`` from the model's class and config (see module docstring)."""
    from .vision import image_token_id
    from .zoo.image import LAYOUT_KEY

    name = type(model).__name__
    if name == "JanusForConditionalGeneration":
        return "janus"
    cfg = getattr(model, "config", None)
    if cfg is None:
        raise ValueError(f"cannot inspect the target: a {name} has no config (pass a Hugging Face model)")
    if getattr(cfg, LAYOUT_KEY, None) is not None:
        return "image"
    if image_token_id(model) is not None or getattr(cfg, "vision_config", None) is not None:
        return "vlm"
    can_generate = getattr(model, "can_generate", lambda: hasattr(model, "generate"))()
    if can_generate and model.get_output_embeddings() is not None:
        return "text"
    raise ValueError(f"cannot tell what a {name} generates: mmspec takes causal LMs, LLaVA-class VLMs, visual AR "
                     "generators (config.mmspec_image_layout) and Janus models")


@dataclass
class Target:
    """A loaded target: the model, what turns inputs into ids (tokenizer / processor / VQ), where it came from."""
    model: Any
    tokenizer: Any = None
    name: str = "given"
    zoo: str | None = None  # zoo model name when loaded from the zoo
    extras: dict = field(default_factory=dict)

    @property
    def route(self) -> str:
        return detect_route(self.model)


def _zoo_device(device_map):
    if device_map in (None, "cpu"):
        return None
    if device_map == "auto":  # the zoo's models are a few MB: one device holds them
        return "cuda" if torch.cuda.is_available() else None
    return device_map


def load_target(spec, tokenizer=None, device_map=None, home=None) -> Target:
    """``zoo:<name>``, a local checkpoint directory (``device_map`` goes to ``from_pretrained``), or a model."""
    if not isinstance(spec, (str, Path)):
        return Target(spec, tokenizer, type(spec).__name__)
    spec = str(spec)
    if spec.startswith("zoo:"):
        from .zoo import load

        name = spec.split(":", 1)[1]
        entry = load(name, home)
        device = _zoo_device(device_map)
        if device is not None:
            entry.model.to(device)
        return Target(entry.model, tokenizer or entry.tokenizer, spec, name, dict(entry.extras))
    path = Path(spec)
    if not path.is_dir():
        raise ValueError(f"target {spec!r} is neither 'zoo:<name>' nor a local checkpoint directory")
    return _load_checkpoint(path, tokenizer, device_map)


def _load_checkpoint(path: Path, tokenizer, device_map) -> Target:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoProcessor, AutoTokenizer

    from .zoo.image import LAYOUT_KEY

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    kw = dict(local_files_only=True, device_map=device_map) if device_map else dict(local_files_only=True)
    mtype = getattr(config, "model_type", "")
    if mtype == "janus":
        from transformers import JanusForConditionalGeneration

        model, proc_cls = JanusForConditionalGeneration.from_pretrained(path, **kw), AutoProcessor
    elif getattr(config, "vision_config", None) is not None:
        from transformers import AutoModelForImageTextToText, LlavaForConditionalGeneration

        cls = LlavaForConditionalGeneration if mtype == "llava" else AutoModelForImageTextToText
        model, proc_cls = cls.from_pretrained(path, **kw), AutoProcessor
    else:
        model = AutoModelForCausalLM.from_pretrained(path, **kw)
        proc_cls = None if getattr(config, LAYOUT_KEY, None) is not None else AutoTokenizer
    if tokenizer is None and proc_cls is not None:
        try:
            tokenizer = proc_cls.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError, TypeError):  # weights without a tokenizer: ids in, ids out
            tokenizer = None
    return Target(model.eval(), tokenizer, str(path))


# ---------------------------------------------------------------------------------------------------- drafters


def _is_causal_lm(obj) -> bool:
    return isinstance(obj, torch.nn.Module) and hasattr(obj, "config") and hasattr(obj, "get_output_embeddings") \
        and obj.get_output_embeddings() is not None


def drafter_kind(obj) -> str:
    """What a drafter argument is: none, drafter (ready), diffusion, feature, ngram, causal, janus, or a name."""
    from .drafters.ngram import NGramLM

    if obj is None:
        return "none"
    if isinstance(obj, str):
        return "name"
    if isinstance(obj, Drafter):
        return "drafter"
    if isinstance(obj, DiffusionLM):
        return "diffusion"
    if isinstance(obj, FeatureDraftModel):
        return "feature"
    if isinstance(obj, NGramLM):
        return "ngram"
    if type(obj).__name__ == "JanusForConditionalGeneration":
        return "janus"
    if _is_causal_lm(obj):
        return "causal"
    raise ValueError(f"cannot use a {type(obj).__name__} as a drafter")


def load_drafter(spec, target: Target, home=None, device=None):
    """A drafter spec as an object: ``zoo:<name>`` or a checkpoint directory (feature drafter, diffusion LM or
    causal LM, told apart by the files they carry). Other strings and objects come back unchanged."""
    if not isinstance(spec, (str, Path)) or str(spec) in ("ar", "feature", "sar", "prompt-lookup"):
        return _place(spec, device)
    spec = str(spec)
    vocab = text_config(target.model).vocab_size if target.route in ("text", "vlm") else None
    if spec.startswith("zoo:"):
        from .zoo import load
        from .zoo.code_diffusion import NAMES as DIFFUSION_NAMES, diffusion_lm

        name = spec.split(":", 1)[1]
        entry = load(name, home)
        if name == "code-ngram":
            raise ValueError("zoo:code-ngram is an n-gram model: DiffuSpec's causal proxy (causal=...), not a drafter")
        if name in DIFFUSION_NAMES:
            return _place(diffusion_lm(entry, target_vocab_size=vocab), device)
        return _place(entry.model, device)
    path = Path(spec)
    if not path.is_dir():
        raise ValueError(f"drafter {spec!r} is neither 'zoo:<name>' nor a local checkpoint directory")
    if (path / "feature_drafter.json").exists():
        return _place(FeatureDraftModel.from_pretrained(path, target=target.model), device)
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    mtype = str(getattr(config, "model_type", "")).lower()
    if (path / "zoo.json").exists() and "mask_token_id" in (path / "zoo.json").read_text() or \
            any(k in mtype for k in ("dream", "llada", "diffucoder")):
        return DiffusionLM.from_pretrained(path, target_vocab_size=vocab)
    kw = dict(device_map={"": device}) if device else {}
    return AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **kw).eval()


def _place(obj, device):
    if device is None:
        return obj
    if isinstance(obj, DiffusionLM):
        obj.model.to(device)
    elif isinstance(obj, torch.nn.Module):
        obj.to(device)
    return obj


def _wrong_method(method: str, route: str, target: Target) -> ValueError:
    allowed = ROUTE_METHODS[route]
    owners = [r for r, ms in ROUTE_METHODS.items() if method in ms and r != route]
    where = f"it is a method for {' / '.join(owners)} targets; " if owners else ""
    return ValueError(f"method {method!r} does not apply to {target.name} ({type(target.model).__name__}, a {route} "
                      f"target): {where}choose from {list(allowed)}")


def _check_vocab(drafter_model, target: Target) -> None:
    dv, tv = text_config(drafter_model).vocab_size, text_config(target.model).vocab_size
    if dv != tv:
        raise ValueError(f"drafter vocabulary ({dv} tokens) does not match the target's ({tv} tokens): the drafter "
                         "must share the target's tokenizer")


def _check_feature(net: FeatureDraftModel, target_model) -> None:
    problem = signature_mismatch(net.config.target, target_model)
    if problem:
        raise ValueError(f"this feature drafter was trained for another target: {problem}")


def _take(options: dict, allowed: dict, route: str) -> dict:
    unknown = set(options) - set(allowed)
    if unknown:
        raise ValueError(f"unknown options for the {route} route: {sorted(unknown)}; it takes {sorted(allowed)}")
    return {**allowed, **options}


# ---------------------------------------------------------------------------------------------------- text


@dataclass
class TextOutput:
    texts: list[str] | None
    sequences: torch.LongTensor
    stats: GenerationStats | None  # None for plain decoding
    seconds: float


TEXT_OPTIONS = dict(num_tokens=None, tree=None, top_k=4, num_nodes=16, causal=None, cps=True, adl=True,
                    lattice=False, cps_config=None, adl_config=None)


def text_drafter(target: Target, drafter, method: str | None, home=None, device=None, **options):
    """(method, Drafter or None) for a causal LM target; None for plain decoding."""
    opts = _take(options, TEXT_OPTIONS, "text")
    if method is not None and method not in TEXT_METHODS:
        raise _wrong_method(method, "text", target)
    if drafter is None and target.zoo in ZOO_DEFAULTS and method in (None, "deer"):
        method, drafter = "deer", ZOO_DEFAULTS[target.zoo][1]
    elif drafter is None and target.zoo in ZOO_AR_DRAFTERS and method in ("chain", "tree", "dynamic"):
        drafter = ZOO_AR_DRAFTERS[target.zoo]
    elif drafter is None and target.zoo == "code-target" and method == "diffuspec":
        drafter = "zoo:code-dlm"
    drafter = load_drafter(drafter, target, home, device)
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
        _check_feature(drafter, target.model)
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
        _check_vocab(drafter, target)
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
    from .drafters.diffuspec import ADLConfig, CPSConfig, DiffuSpecDrafter

    causal, cps_cfg, adl_cfg = opts["causal"], opts["cps_config"], opts["adl_config"]
    if target.zoo == "code-target":  # the zoo's tuned settings (see mmspec.eval.code_suite)
        from .eval.code_suite import CPS_LAMBDA
        from .zoo import load

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
                 pixel_values=None, class_ids=None) -> TextOutput:
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


# ---------------------------------------------------------------------------------------------------- VLM

VLM_OPTIONS = dict(num_tokens=None, tree=None, top_k=4, num_nodes=None, compress_to=None)


class VLMPipeline:
    """Pictures and prompts in, answers out: :class:`~mmspec.vlm_generator.VLMGenerator` (or plain generate)."""
    route = "vlm"

    def __init__(self, target: Target, method: str, drafter_model, **options):
        from .vlm_generator import VLMGenerator

        if target.tokenizer is None:
            raise ValueError(f"{target.name} has no processor: pass processor= (tokenizer=) to mmspec.pipeline")
        self.target, self.model, self.method = target, target.model, method
        gen_method = "prompt-lookup" if method == "plain" else method
        self.generator = VLMGenerator(target.model, target.tokenizer, drafter_model, gen_method, **options)
        self.drafter = None if method == "plain" else self.generator.drafter
        self.tokenizer = self.generator.tokenizer

    @torch.no_grad()
    def generate(self, images=None, prompts=(), max_new_tokens: int = 64, do_sample: bool = False,
                 temperature: float = 1.0, seed: int = 0, stop_at_eos: bool = True, class_ids=None, **kw):
        from .vlm_generator import VLMOutput

        if class_ids is not None:
            raise ValueError("class ids are inputs of class-conditional image targets, not of a VLM")
        if self.method != "plain":
            return self.generator.generate(images, prompts, max_new_tokens=max_new_tokens, do_sample=do_sample,
                                           temperature=temperature, generator=torch.Generator().manual_seed(seed),
                                           stop_at_eos=stop_at_eos, **kw)
        inputs = self.generator.prepare(images, prompts)
        width = inputs["input_ids"].shape[1]
        torch.manual_seed(seed)
        eos = self.tokenizer.eos_token_id if stop_at_eos else None
        sampling = dict(do_sample=True, temperature=temperature) if do_sample else dict(do_sample=False)
        seqs = self.model.generate(**inputs, max_new_tokens=max_new_tokens, eos_token_id=eos,
                                   pad_token_id=self.tokenizer.pad_token_id, **sampling, **kw)
        texts = self.tokenizer.batch_decode(seqs[:, width:], skip_special_tokens=True)
        return VLMOutput([t.strip() for t in texts], seqs, None)

    __call__ = generate


def vlm_drafter(target: Target, drafter, method: str | None, home=None, device=None):
    if method is not None and method not in VLM_METHODS:
        raise _wrong_method(method, "vlm", target)
    if drafter is None and target.zoo == "vlm-target":
        if method in (None, "msd", "flash", "eagle"):
            method = method or "msd"
            drafter = f"zoo:vlm-{method}"
        elif method == "text":
            drafter = ZOO_AR_DRAFTERS["vlm-target"]
    drafter = load_drafter(drafter, target, home, device)
    kind = drafter_kind(drafter)
    if kind == "name" and drafter == "prompt-lookup":
        kind, drafter, method = "none", None, method or "prompt-lookup"
    if kind == "feature":
        _check_feature(drafter, target.model)
        method = method or drafter.config.method
        if method != drafter.config.method:
            raise ValueError(f"the drafter was trained as {drafter.config.method!r}, not {method!r}")
        return method, drafter
    if kind == "causal":
        _check_vocab(drafter, target)
        if method not in (None, "text"):
            raise ValueError(f"a causal LM drafter drafts from text alone: method 'text', not {method!r}")
        return "text", drafter
    if kind == "none":
        method = method or "prompt-lookup"
        if method not in ("plain", "prompt-lookup"):
            raise ValueError(f"method {method!r} needs a drafter (drafter=...)")
        return method, None
    raise ValueError(f"a {type(drafter).__name__} cannot draft for a VLM target: use a feature drafter (msd / flash "
                     "/ eagle), a text-only causal LM ('text') or prompt lookup")


# ---------------------------------------------------------------------------------------------------- image

IMAGE_OPTIONS = dict(cfg_scale=3.0, temperature=1.0, k=8, delta=None, lam=None, tree="static", num_tokens=4,
                     vq=None, feature_drafter=None, sar_drafter=None)


class ImagePipeline:
    """Class ids in, pictures out: :class:`~mmspec.image_gen.ImageGenerator` with the method and drafter fixed
    at construction (each overridable per call)."""
    route = "image"

    def __init__(self, generator, method: str, drafter: str, **defaults):
        self.generator, self.method, self.drafter_kind, self.defaults = generator, method, drafter, defaults
        self.target = generator.target

    @property
    def layout(self):
        return self.generator.layout

    @property
    def classes(self):
        return self.generator.classes

    def generate(self, class_ids=None, *, prompts=None, images=None, **kw):
        if prompts is not None or images is not None:
            raise ValueError("a class-conditional image target takes class ids (-1: unconditional), not prompts or "
                             "images")
        if class_ids is None:
            raise ValueError("give class ids")
        opts = {**self.defaults, "method": self.method, "drafter": self.drafter_kind, **kw}
        return self.generator.generate(class_ids, **opts)

    __call__ = generate


def image_pipeline(target: Target, drafter, method: str | None, home=None, device=None, **options):
    from .image_gen import IMAGE_DRAFTERS, ImageGenerator

    opts = _take(options, IMAGE_OPTIONS, "image")
    method = method or "lantern++"
    if method not in IMAGE_METHODS:
        raise _wrong_method(method, "image", target)
    drafter = "ar" if drafter is None else drafter
    if target.zoo == "image-target":
        if not isinstance(drafter, str) or drafter not in IMAGE_DRAFTERS:
            raise ValueError(f"the zoo image target drafts with one of {IMAGE_DRAFTERS} (its own drafters)")
        gen = ImageGenerator.from_zoo(home)
        if device is not None:
            gen.target.to(device)
        kind = drafter
    else:  # a checkpoint over [class token] + VQ codes: an AR drafter over the same layout and the VQ decoder
        from .zoo.image import layout_of

        vq = opts["vq"]
        if vq is None:
            raise ValueError("an image target from a checkpoint needs vq= (a diffusers VQModel or its directory)")
        if isinstance(vq, (str, Path)):
            from diffusers import VQModel

            vq = VQModel.from_pretrained(vq, torch_dtype=torch.float32).eval()
        model = load_drafter(drafter, target, home, device) if drafter != "ar" else None
        if model is None or drafter_kind(model) != "causal":
            raise ValueError("an image target from a checkpoint needs drafter= (a small AR model over its codes)")
        _check_vocab(model, target)
        layout = layout_of(target.model)
        gen = ImageGenerator(target.model, model, vq, layout, None, opts["feature_drafter"], opts["sar_drafter"])
        kind = "ar"
    if method != "ar" and kind != "ar" and gen.feature_drafters.get(kind) is None:
        name = "image-eagle" if kind == "feature" else "image-sar"
        raise ValueError(f"no {kind} drafter loaded for this target: build it (`mmspec zoo build --only {name}`)")
    defaults = {k: v for k, v in opts.items() if k not in ("vq", "feature_drafter", "sar_drafter")}
    return ImagePipeline(gen, method, kind, **defaults)


JANUS_OPTIONS = dict(cfg_scale=5.0, do_sample=False, temperature=1.0, k=8, delta=None, lam=None, tree=None,
                     num_tokens=4, decode=True)


class JanusPipeline:
    """Janus text-to-image: prompt ids ending with ``<begin_of_image>`` in, codes and pictures out."""
    route = "janus"

    def __init__(self, generator, method: str, **defaults):
        self.generator, self.method, self.defaults = generator, method, defaults

    def generate(self, input_ids=None, attention_mask=None, *, class_ids=None, images=None, **kw):
        if class_ids is not None or images is not None or input_ids is None:
            raise ValueError("a Janus target takes prompt ids (input_ids ending with <begin_of_image>)")
        return self.generator.generate(input_ids, attention_mask, **{**self.defaults, "method": self.method, **kw})

    __call__ = generate


# ---------------------------------------------------------------------------------------------------- entry


def pipeline(target, drafter=None, method: str | None = None, *, tokenizer=None, processor=None, device_map=None,
             drafter_device=None, home=None, **options):
    """Inspect ``target`` and build the generator of its route (see the module docstring).

    ``target``: a model, ``zoo:<name>`` or a checkpoint directory (loaded with ``device_map``, e.g. ``"auto"``).
    ``drafter``: a model / DiffusionLM / FeatureDraftModel / Drafter, ``zoo:<name>``, a checkpoint directory,
    ``"prompt-lookup"``, or for the zoo image target ``"ar"`` / ``"feature"`` / ``"sar"``; placed on
    ``drafter_device`` when given. ``options`` are the route's own settings (num_tokens, tree, cfg_scale, ...).
    """
    t = load_target(target, tokenizer or processor, device_map, home)
    route = t.route
    if route == "text":
        m, d = text_drafter(t, drafter, method, home, drafter_device, **options)
        return TextPipeline(t, m, d)
    if route == "vlm":
        opts = _take(options, VLM_OPTIONS, "vlm")
        m, d = vlm_drafter(t, drafter, method, home, drafter_device)
        return VLMPipeline(t, m, d, **opts)
    if route == "image":
        return image_pipeline(t, drafter, method, home, drafter_device, **options)
    from .janus import JanusImageGenerator

    method = method or "lantern++"
    if method not in IMAGE_METHODS:
        raise _wrong_method(method, "janus", t)
    opts = _take(options, JANUS_OPTIONS, "janus")
    draft = load_target(drafter, None, None, home).model if isinstance(drafter, (str, Path)) else drafter
    if draft is not None and drafter_kind(draft) != "janus":
        raise ValueError("a Janus target drafts with a smaller Janus model sharing its codebook")
    return JanusPipeline(JanusImageGenerator(t.model, draft), method, **opts)


__all__ = ["pipeline", "detect_route", "load_target", "load_drafter", "Target", "TextPipeline", "VLMPipeline",
           "ImagePipeline", "JanusPipeline", "TextOutput", "TEXT_METHODS", "VLM_METHODS", "IMAGE_METHODS"]
