"""Image generation with a visual AR target: plain AR, lossless speculative decoding, LANTERN, LANTERN++.

    gen = ImageGenerator.from_zoo()                        # image-target, its drafters, image-vq
    out = gen.generate([0, 5, 11], method="lantern++", seed=0)  # λ 10, k 16, static tree, image-eagle drafter
    out = gen.generate([0, 5, 11], method="lantern++", lam=2.0, lantern_k=8, drafter="ar")  # tighter, small AR drafter
    out.images          # [B, 3, H, W] in [-1, 1]
    out.stats           # tau, mass moved per candidate, times; with measure_output_tv=True the output's true
                        # distortion (stats.output_tv: exact TV of each step's first emitted token)

Targets are LlamaGen-style: any HF causal LM over ``[class token] + VQ codes`` with a null class for
classifier-free guidance, decoded by a diffusers ``VQModel``. Guidance runs through :class:`CFGModel` for
the target *and* the drafter, so both see guided logits restricted to codes. Two drafters: ``"ar"``, a small
AR model over codes (run with CFG itself: two rows per image), and ``"feature"``, a feature drafter trained on
the guided target's features (``mmspec train image-drafter``; one row per image, the guidance already in
the features it reads).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from .arguments import reject_unknown
from .drafters import NoDrafter
from .drafters.dflash import check_target
from .drafters.dflash_model import DFlashDraftModel
from .drafters.feature_model import signature_mismatch
from .frontend import ImageOutput, call_generator
from .generator import SpeculativeGenerator, check_streamer
from .guidance import DEFAULT_CFG_SCALE, CFGModel
from .image_codes import codebook, decode_codes, generate_codes, guided_for_dflash, guided_on_codes
from .options import check_image_call
from .registry import DFLASH_IMAGE_TREES, IMAGE_CHAIN_TOKENS, IMAGE_DRAFTER_MODELS, IMAGE_DRAFTERS, \
    check_image_method, image_defaults, image_drafter, resolve_bound
from .timing import synchronize
from .tree import tree_label
from .verifiers.relaxed import Relaxation
from .zoo import load as zoo_load, zoo_home


FEATURE_KINDS = tuple(k for k in IMAGE_DRAFTERS if k != "ar")  # drafters reading the guided target's features

# ``drafter=NO_DRAFTER`` with method "spec": mmspec's decoding loop with no drafts, sampling one code per target
# forward exactly as plain AR does: the image suite's own-engine baseline (the cost model's c_t(1))
NO_DRAFTER = "none"


def _class_id(value, where: str) -> int:
    """One class id (an int, a numpy int or a 0-d integer tensor / array) as an int; bools, floats and strings
    are refused, not converted."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        if value.ndim != 0:
            raise ValueError(f"{where}: a {value.ndim}-D {type(value).__name__} is not one class id")
        if isinstance(value, torch.Tensor):
            kind = "bool" if value.dtype == torch.bool else \
                "float" if value.dtype.is_floating_point or value.dtype.is_complex else None
        else:
            kind = {"b": "bool", "f": "float", "c": "float", "i": None, "u": None}.get(value.dtype.kind,
                                                                                       str(value.dtype))
        if kind is not None:
            raise ValueError(f"{where}: a {kind} {type(value).__name__} is not a class id (class ids are ints; -1: "
                             "unconditional)")
        return int(value.item())
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{where}: {value!r} is a bool, not a class id (class ids are ints; -1: unconditional)")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        raise ValueError(f"{where}: {value!r} is a float, not a class id (class ids are ints; -1: unconditional)")
    if isinstance(value, str):
        raise ValueError(f"{where}: {value!r} is a str, not a class id (class ids are ints; a name's id is its index "
                         "in the generator's .classes)")
    raise ValueError(f"{where}: a {type(value).__name__} is not a class id (class ids are ints; -1: unconditional)")


def as_class_ids(class_ids) -> list[int]:
    """Class ids as a list of ints: one id (an int, a numpy int, a 0-d tensor) or a sequence of them (a list,
    a tuple, a 1-D tensor or array). Bools, floats and strings are a ValueError naming the problem."""
    if isinstance(class_ids, (torch.Tensor, np.ndarray)) and class_ids.ndim != 0:
        if class_ids.ndim != 1:
            raise ValueError(f"class ids: a {class_ids.ndim}-D {type(class_ids).__name__} of shape "
                             f"{tuple(class_ids.shape)}; give one id or a 1-D sequence of ids")
        class_ids = list(class_ids)
    if isinstance(class_ids, (list, tuple)):
        if not class_ids:
            raise ValueError("no class ids given: give one id or a sequence of ids (-1: unconditional)")
        return [_class_id(c, f"class id {i}") for i, c in enumerate(class_ids)]
    return [_class_id(class_ids, "class ids")]


class ImageGenerator:
    """A visual AR target with its drafters (``drafter``: the small AR model; ``feature_drafter`` / ``sar_drafter``:
    feature drafters of the guided target) and VQ decoder. ``method`` is the default; ``generate(method=...,
    drafter=...)`` picks the method and which of the drafters drafts, per call."""

    def __init__(self, target, drafter, vq, layout, classes: list[str] | None = None, feature_drafter=None,
                 sar_drafter=None, method: str = "lantern++", dflash_drafter=None):
        check_image_method(method)
        self.target, self.drafter_model, self.vq, self.layout = target.eval(), drafter, vq, layout
        self.classes, self.method = classes, method
        self.feature_drafters = dict.fromkeys(FEATURE_KINDS)
        for kind, net in (("feature", feature_drafter), ("sar", sar_drafter), ("dflash", dflash_drafter)):
            if net is not None:
                self.set_feature_drafter(net, kind)
        book = codebook(vq)
        if book.shape[0] != layout.codebook_size:
            raise ValueError(f"the VQ codebook has {book.shape[0]} codes but the target's image vocabulary has "
                             f"{layout.codebook_size}")
        self.codebook = book
        vocab = target.config.vocab_size
        if layout.vocab_size != vocab:
            raise ValueError(f"token layout of {layout.vocab_size} ids does not match the target's vocabulary "
                             f"({vocab})")

    @classmethod
    def from_zoo(cls, home=None, method: str = "lantern++") -> "ImageGenerator":
        t, d = zoo_load("image-target", home), zoo_load("image-drafter", home)

        def optional(name):  # `mmspec zoo build --only image-eagle,image-sar`
            return zoo_load(name, home).model if (Path(home or zoo_home()) / name / "zoo.json").exists() else None

        m = IMAGE_DRAFTER_MODELS
        return cls(t.model, d.model, t.extras["vq"], t.extras["layout"], t.extras.get("classes"),
                   optional(m["feature"]), optional(m["sar"]), method, optional(m["dflash"]))

    def to(self, device) -> "ImageGenerator":
        """Every model (target, drafters, VQ decoder) and the codebook on ``device``."""
        for model in (self.target, self.drafter_model, self.vq, *self.feature_drafters.values()):
            if model is not None:
                model.to(device)
        self.codebook = self.codebook.to(device)
        return self

    @property
    def default_drafter(self) -> str:
        """``"dflash"`` (image-dflash) when a DFlash drafter is loaded, else ``"feature"`` (image-eagle) when a feature
        drafter is, else ``"ar"``: on the zoo the block drafter is the fastest measured (a block per forward: see
        :data:`~mmspec.registry.IMAGE_DRAFTER_DEFAULTS`), and the feature drafter reaches a higher τ than the small AR
        model at a lower drafting cost (one row per picture instead of two)."""
        for kind in ("dflash", "feature"):
            if self.feature_drafters[kind] is not None:
                return kind
        return "ar"

    def default_drafter_for(self, tree=None) -> str:
        """:attr:`default_drafter` for a call asking for ``tree``: a shape the block drafter does not draft (a
        template or its label, ``"dynamic"``) goes to the next drafter that does (image-eagle, else the AR model)."""
        kind = self.default_drafter
        if kind == "dflash" and tree is not None and tree not in DFLASH_IMAGE_TREES:
            return "feature" if self.feature_drafters["feature"] is not None else "ar"
        return kind

    def set_feature_drafter(self, net, kind: str) -> None:
        """Use ``net`` as the ``"feature"`` (one token per forward), ``"sar"`` or ``"dflash"`` (a
        :class:`~mmspec.drafters.dflash_model.DFlashDraftModel`: a block per forward) drafter, checked against the
        target."""
        if kind not in FEATURE_KINDS:
            raise ValueError(f"feature drafter kind must be one of {FEATURE_KINDS}, got {kind!r}")
        if kind == "dflash":
            if not isinstance(net, DFlashDraftModel):
                raise ValueError(f"the 'dflash' drafter must be a DFlashDraftModel, got a {type(net).__name__}")
            check_target(net, self.target)  # width, depth and vocabulary: a ValueError naming the mismatch
        else:
            problem = signature_mismatch(net.config.target, self.target)
            if problem:
                raise ValueError(f"the feature drafter was trained against another target: {problem}")
        self.feature_drafters[kind] = net

    def relaxation(self, lantern_k: int, delta: float | None = None, lam: float | None = None) -> Relaxation:
        return Relaxation.from_codebook(self.codebook, self.layout.vocab_size, lantern_k, self.layout.code_offset,
                                        delta=delta, lam=lam)

    def _guided(self, model, cfg_scale: float) -> CFGModel:
        return guided_on_codes(model, self.layout, cfg_scale)

    def _drafter(self, kind: str, cfg_scale: float, tree, num_tokens: int, guided_target: CFGModel | None = None,
                 coupling: str = "rejection"):
        """The named drafter (``ar`` / ``feature`` / ``sar``, or ``none``: the loop's own plain sampling) built for
        one call."""
        if kind == NO_DRAFTER:
            return NoDrafter()
        if kind not in IMAGE_DRAFTERS:
            raise ValueError(f"unknown image drafter {kind!r}; choose from {IMAGE_DRAFTERS}")
        if kind == "ar":
            return image_drafter(self._guided(self.drafter_model, cfg_scale), tree=tree, num_tokens=num_tokens)
        net = self.feature_drafters[kind]
        if net is None:
            how = "`mmspec train dflash`" if kind == "dflash" else "`mmspec train image-drafter`"
            raise ValueError(f"no {kind} drafter loaded: build it (`mmspec zoo build --only "
                             f"{IMAGE_DRAFTER_MODELS[kind]}`) or train one ({how}) and pass it as {kind}_drafter=")
        guided_target = guided_target or self._feature_target(kind, cfg_scale)
        return image_drafter(net=net, guided_target=guided_target, tree=tree, num_tokens=num_tokens, coupling=coupling)

    def drafting(self, drafter: str, method: str, tree, num_tokens: int | None, lam: float | None) -> tuple:
        """``(tree, num_tokens, lam)`` a call with ``drafter`` applies: the drafter's own defaults for what is unset
        (:func:`~mmspec.registry.image_defaults`), a chain's length (4; the block drafter's whole block), and a
        chain length given with another shape refused."""
        tree, num_tokens, lam = image_defaults(drafter, method, tree, num_tokens, lam)
        if num_tokens is not None and method != "ar" and (tree != "chain" or drafter == "sar"):
            raise ValueError(f"num_tokens sets the length of a chain: it applies to tree='chain' with the 'ar', "
                             f"'feature' or 'dflash' drafter, not tree={tree_label(tree)!r} with the {drafter!r} "
                             "drafter")
        block = self.feature_drafters["dflash"]
        if num_tokens is None and drafter == "dflash" and block is not None and tree == "chain":
            num_tokens = block.block_size - 1  # the DFlash chain: its whole block
        elif num_tokens is None and drafter != "dflash":
            num_tokens = IMAGE_CHAIN_TOKENS
        return tree, num_tokens, lam

    def _feature_target(self, kind: str, cfg_scale: float) -> CFGModel:
        """The guided target returning the features drafter ``kind`` reads: a DFlash drafter reads several layers'
        features, each guided as the last one is or (``feature_branches`` = 2) both branches' side by side; the
        others the last layer's only."""
        net = self.feature_drafters.get(kind)
        if kind != "dflash" or net is None:
            return self._guided(self.target, cfg_scale)
        return guided_for_dflash(self.target, self.layout, cfg_scale, net)

    @torch.no_grad()
    def generate(self, class_ids, method: str | None = None, cfg_scale: float = DEFAULT_CFG_SCALE,
                 temperature: float = 1.0, lantern_k: int | None = None, delta: float | None = None,
                 lam: float | None = None, tree=None, num_tokens: int | None = None,
                 generator: torch.Generator | None = None,
                 seed: int | None = None, drafter: str | None = None, measure_output_tv: bool | int = False,
                 streamer=None, coupling: str = "rejection", **unknown) -> ImageOutput:
        """``drafter``: ``"ar"``, ``"feature"``, ``"sar"``, ``"dflash"`` or ``"none"``; None: the default for ``tree``
        (:meth:`default_drafter_for`).
        ``measure_output_tv`` (LANTERN / LANTERN++): compute the exact TV of each step's first emitted token
        from the target's (``stats.output_tv``), for every picture (True) or the first n of the batch (an int);
        its cost is kept out of ``seconds``. ``tree`` (default ``"static"``) and ``num_tokens`` (default 4) draft
        (the drafter's own defaults where it has them: :data:`~mmspec.registry.IMAGE_DRAFTER_DEFAULTS`, image-dflash's
        chain of 8 at λ = 50 when ``tree``, ``num_tokens`` and ``lam`` are unset): given to plain AR (``method="ar"``) they are refused, as are bounds the method does not use.
        ``streamer``: HF's streamer protocol, one picture per call: the class token, then each step's committed
        code tokens (``layout.tokens_to_codes`` maps them to codebook indices), then ``end()``.
        ``coupling`` (``"rejection"`` or ``"gumbel"``; :mod:`mmspec.verifiers.coupling`): with ``"gumbel"`` every
        code is the guided target's Gumbel-max draw under noise fixed per position by the seed, drafts are kept iff
        they equal it, and ``method="spec"`` gives the very picture ``method="ar"`` gives for the same seed, with
        any drafter; LANTERN's relaxed methods take ``"rejection"`` only."""
        reject_unknown(unknown, ImageGenerator.generate, "ImageGenerator.generate")
        drafter = self.default_drafter_for(tree) if drafter is None else drafter
        method = method or self.method
        check_image_method(method)
        # types, ranges, finite values (mmspec.options.IMAGE); a drafting setting given to plain AR is refused (the
        # drafter's name is not: it picks among the generator's drafters, and plain AR simply uses none)
        settings = dict(cfg_scale=cfg_scale, temperature=temperature, tree=tree, num_tokens=num_tokens, seed=seed,
                        measure_output_tv=measure_output_tv or None)
        if coupling != "rejection":  # (a drafting method it does not apply to is refused by name)
            settings["coupling"] = coupling
        check_image_call(settings, method, where="ImageGenerator.generate")
        tree, num_tokens, lam = self.drafting(drafter, method, tree, num_tokens, lam)
        class_ids = as_class_ids(class_ids)
        check_streamer(streamer, torch.empty(len(class_ids), 1))
        n_classes = self.layout.num_classes
        bad = [c for c in class_ids if not (c == -1 or 0 <= c < n_classes)]
        if bad:
            raise ValueError(f"class ids must be in [0, {n_classes}) (or -1: unconditional), got {class_ids}")
        bound = resolve_bound(method, delta, lam, lantern_k)  # before any work: a setting the method ignores is refused
        if drafter == NO_DRAFTER and method != "spec":
            raise ValueError(f"drafter={NO_DRAFTER!r} (no drafts) runs with method 'spec' only, not {method!r}")
        rng = call_generator(generator, seed, self.target.device)
        t0 = time.perf_counter()
        stats = None
        if method == "ar":
            codes = generate_codes(self.target, class_ids, cfg_scale, temperature, 0, rng, self.layout, streamer,
                                   coupling)
        else:
            relax = self.relaxation(**bound) if bound else None
            guided = self._feature_target(drafter, cfg_scale)  # the engine's and the drafter's
            engine = SpeculativeGenerator(guided, self._drafter(drafter, cfg_scale, tree, num_tokens, guided,
                                                                coupling if temperature > 0 else "rejection"),
                                          relaxation=relax, measure_output_tv=measure_output_tv)
            ids = self.layout.class_tokens(class_ids)[:, None].to(self.target.device)
            out = engine.generate(ids, max_new_tokens=self.layout.num_codes, do_sample=temperature > 0,
                                  temperature=max(temperature, 1e-5), eos_token_id=[], generator=rng,
                                  streamer=streamer, coupling=coupling)
            codes = self.layout.tokens_to_codes(out.sequences[:, 1:])
            stats = out.stats
        synchronize(codes.device)  # a GPU's queued work belongs to this call's time
        seconds = time.perf_counter() - t0 - (stats.output_tv_time if stats is not None else 0.0)
        images = decode_codes(self.vq, codes, self.layout.grid)
        config = dict(method=method, cfg_scale=cfg_scale, temperature=temperature, seed=seed, class_ids=class_ids)
        if coupling != "rejection" and temperature > 0:  # (greedy: a sampling setting not applied)
            config["coupling"] = coupling
        if method != "ar":  # only what this method applied, bounds resolved to their defaults
            config.update(drafter=drafter, tree=str(tree_label(tree)), **bound)
            if tree == "chain" and drafter != "sar":
                config["num_tokens"] = num_tokens
        return ImageOutput(images, codes, stats, seconds, config)


__all__ = ["ImageGenerator", "NO_DRAFTER", "as_class_ids"]
