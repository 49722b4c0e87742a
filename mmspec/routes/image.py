"""The image routes: class-conditional visual AR targets (:class:`~mmspec.image_gen.ImageGenerator`) and
Janus text-to-image (:class:`~mmspec.janus.JanusImageGenerator`)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..arguments import reject_unknown
from ..frontend import ImageOutput
from ..image_codes import layout_of
from ..image_gen import ImageGenerator
from ..janus import JanusImageGenerator, fill_boi_token_id, janus_prompt_ids
from ..loading import load_drafter, load_target
from ..options import IMAGE as IMAGE_OPTIONS
from ..guidance import DEFAULT_CFG_SCALE
from ..registry import IMAGE_DRAFTER_MODELS, IMAGE_DRAFTERS, IMAGE_METHODS, check_vocab, drafter_kind, resolve_bound, \
    take_options, wrong_method
from ..targets import Target

DEFAULT_METHOD = "lantern++"


class ImagePipeline:
    """Class ids in, pictures out: :class:`~mmspec.image_gen.ImageGenerator` with the method and drafter fixed
    at construction (each overridable per call)."""
    route = "image"

    def __init__(self, generator, method: str, drafter: str, **defaults):
        self.generator, self.method, self.drafter_kind, self.defaults = generator, method, drafter, defaults
        self.target = generator.target

    @property
    def drafter(self):
        """The Drafter a call with the pipeline's defaults builds (None for plain AR): image drafters are built per
        call, for its guidance scale."""
        if self.method == "ar":
            return None
        d, gen = self.defaults, self.generator
        tree, num_tokens, _ = gen.drafting(self.drafter_kind, self.method, d.get("tree"), d.get("num_tokens"), None)
        return gen._drafter(self.drafter_kind, d.get("cfg_scale", DEFAULT_CFG_SCALE), tree, num_tokens)

    @property
    def layout(self):
        return self.generator.layout

    @property
    def classes(self):
        return self.generator.classes

    def generate(self, class_ids=None, *, prompts=None, images=None, **kw) -> ImageOutput:
        if prompts is not None or images is not None:
            raise ValueError("a class-conditional image target takes class ids (-1: unconditional), not prompts or "
                             "images")
        if class_ids is None:
            raise ValueError("give class ids")
        reject_unknown(kw, self.generator.generate, "the image pipeline's generate")
        opts = {**_applying(self.defaults, kw.get("method") or self.method), "method": self.method,
                "drafter": self.drafter_kind, **kw}
        return self.generator.generate(class_ids, **opts)

    __call__ = generate


def _applying(defaults: dict, method: str) -> dict:
    """The pipeline's settings that apply to ``method``: a call switching to another method (``method="ar"`` on a
    LANTERN++ pipeline) leaves out the drafting settings given for the pipeline's own method."""
    return {k: v for k, v in defaults.items() if k not in IMAGE_OPTIONS or IMAGE_OPTIONS[k].applies(method)}


def _refuse_drafter_for_ar(method: str, drafter) -> None:
    if method == "ar" and drafter is not None:
        raise ValueError(f"drafter={drafter!r} does not apply to method 'ar' (plain AR drafts nothing); give a "
                         "drafting method (spec, lantern, lantern++) to use it")


def _feature_net(spec, target: Target, home, device, what: str, kinds=("feature",)):
    net = load_drafter(spec, target, home, device)
    if drafter_kind(net) not in kinds:
        raise ValueError(f"{what}={spec!r}: the zoo image target drafts with one of {IMAGE_DRAFTERS}, a feature "
                         "drafter trained by `mmspec train image-drafter` (its directory or the FeatureDraftModel) or "
                         "a DFlash block drafter of the guided target (zoo:image-dflash, or its DFlashDraftModel)")
    return net


def _vq_model(vq):
    """A diffusers VQModel, or its directory loaded (diffusers is needed only for image targets)."""
    if isinstance(vq, (str, Path)):
        from diffusers import VQModel  # noqa: PLC0415 - optional dependency, image targets only

        return VQModel.from_pretrained(vq, torch_dtype=torch.float32).eval()
    return vq


def image_pipeline(target: Target, drafter, method: str | None, home=None, device=None, **options):
    method = method or DEFAULT_METHOD
    if method not in IMAGE_METHODS:
        raise wrong_method(method, "image", target.name, target.model)
    opts = take_options(options, "image", method)  # types, ranges, and no setting the method would drop
    _refuse_drafter_for_ar(method, drafter)
    resolve_bound(method, opts["delta"], opts["lam"], opts["lantern_k"])  # refused here: a setting the method ignores
    if opts["temperature"] < 0:
        raise ValueError(f"temperature must be >= 0 (0: greedy), got {opts['temperature']}")
    if target.zoo == "image-target":
        gen = ImageGenerator.from_zoo(home)
        for name, kind in (("feature_drafter", "feature"), ("sar_drafter", "sar")):  # replace the zoo's own
            if opts[name] is not None:
                gen.set_feature_drafter(_feature_net(opts[name], target, home, device, name), kind)
        if drafter is None:
            kind = gen.default_drafter_for(opts["tree"])
        elif isinstance(drafter, str) and drafter in IMAGE_DRAFTERS:
            kind = drafter
        else:  # a trained feature drafter (`mmspec train image-drafter`; its head decides feature or sar) or DFlash's
            net = _feature_net(drafter, target, home, device, "drafter", kinds=("feature", "dflash"))
            kind = "dflash" if drafter_kind(net) == "dflash" else "sar" if net.config.sar_tokens > 1 else "feature"
            gen.set_feature_drafter(net, kind)
    else:  # a checkpoint over [class token] + VQ codes: an AR drafter over the same layout and the VQ decoder
        if opts["vq"] is None:
            raise ValueError("an image target from a checkpoint needs vq= (a diffusers VQModel or its directory)")
        model = load_drafter(drafter, target, home, device) if drafter not in (None, "ar") else None
        if model is not None and drafter_kind(model) != "causal" or model is None and method != "ar":
            raise ValueError("an image target from a checkpoint needs drafter= (a small AR model over its codes)")
        if model is not None:
            check_vocab(model, target.model)
        gen = ImageGenerator(target.model, model, _vq_model(opts["vq"]), layout_of(target.model), None,
                             opts["feature_drafter"], opts["sar_drafter"])
        kind = "ar"
    if device is not None:
        gen.to(device)  # every model of the route (target, drafters, VQ decoder) where it was asked for
    if method != "ar" and kind != "ar" and gen.feature_drafters.get(kind) is None:
        raise ValueError(f"no {kind} drafter loaded for this target: build it (`mmspec zoo build --only "
                         f"{IMAGE_DRAFTER_MODELS[kind]}`)")
    defaults = {k: v for k, v in opts.items() if k not in ("vq", "feature_drafter", "sar_drafter")}
    return ImagePipeline(gen, method, kind, **defaults)


class JanusPipeline:
    """Janus text-to-image: text prompts (``prompts=``, through the checkpoint's processor and chat template:
    :func:`~mmspec.janus.janus_prompt_ids`) or prompt ids ending with ``<begin_of_image>`` in, codes and
    pictures out, one picture per prompt."""
    route = "janus"

    def __init__(self, generator, method: str, processor=None, **defaults):
        self.generator, self.method, self.processor, self.defaults = generator, method, processor, defaults

    def encode(self, prompts, chat_template: bool = True):
        """``(input_ids, attention_mask)`` of text prompts, left-padded, ending with ``<begin_of_image>``."""
        return janus_prompt_ids(self.processor, prompts, self.generator.boi, chat_template)

    def generate(self, input_ids=None, attention_mask=None, *, prompts=None, chat_template: bool = True,
                 class_ids=None, images=None, **kw) -> ImageOutput:
        if class_ids is not None or images is not None or (input_ids is None) == (prompts is None):
            raise ValueError("a Janus target takes text prompts (prompts=) or prompt ids (input_ids ending with "
                             "<begin_of_image>), one of them")
        if prompts is not None:
            input_ids, attention_mask = self.encode(prompts, chat_template)
            if bool(attention_mask.all()):
                attention_mask = None  # unpadded: what the stock generate (method 'ar') takes
        return self.generator.generate(input_ids, attention_mask, **{**_applying(self.defaults, kw.get("method") or
                                                                                  self.method),
                                                                      "method": self.method, **kw})

    __call__ = generate


def janus_pipeline(target: Target, drafter, method: str | None, home=None, **options) -> JanusPipeline:
    method = method or DEFAULT_METHOD
    if method not in IMAGE_METHODS:
        raise wrong_method(method, "janus", target.name, target.model)
    opts = take_options(options, "janus", method)
    _refuse_drafter_for_ar(method, drafter)
    draft = load_target(drafter, None, None, home).model if isinstance(drafter, (str, Path)) else drafter
    if draft is not None and drafter_kind(draft) != "janus":
        raise ValueError("a Janus target drafts with a smaller Janus model sharing its codebook")
    fill_boi_token_id(target.model, target.tokenizer)
    return JanusPipeline(JanusImageGenerator(target.model, draft), method, target.tokenizer, **opts)
