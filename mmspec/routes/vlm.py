"""The VLM route: a LLaVA-class target with a feature drafter (MSD / FLASH / EAGLE), a text-only causal LM
drafter or prompt lookup, through :class:`~mmspec.vlm_generator.VLMGenerator`."""

from __future__ import annotations

import torch

from ..arguments import reject_unknown
from ..frontend import TextOutput
from ..drafters.dflash import check_target
from ..loading import load_drafter
from ..registry import CAUSAL_METHODS, NO_MODEL_METHODS, VLM_METHODS, causal_method, check_feature, check_vocab, \
    drafter_kind, take_options, wrong_method
from ..targets import Target
from ..vlm_generator import VLMGenerator
from .zoo_defaults import zoo_default


class VLMPipeline:
    """Pictures and prompts in, answers out: :class:`~mmspec.vlm_generator.VLMGenerator`, whose ``method`` is the
    default a call may switch (``generate(method=...)``)."""
    route = "vlm"

    def __init__(self, target: Target, method: str, drafter_model, **options):
        if target.tokenizer is None:
            raise ValueError(f"{target.name} has no processor: pass processor= (tokenizer=) to mmspec.pipeline")
        self.target, self.model, self.method = target, target.model, method
        self.generator = VLMGenerator(target.model, target.tokenizer, drafter_model, method, **options)
        self.drafter = self.generator.drafter
        self.tokenizer = self.generator.tokenizer

    @torch.no_grad()
    def generate(self, images=None, prompts=(), class_ids=None, **kw) -> TextOutput:
        if class_ids is not None:
            raise ValueError("class ids are inputs of class-conditional image targets, not of a VLM")
        reject_unknown(kw, self.generator.generate, "the VLM pipeline's generate")
        if isinstance(images, str) and not prompts:
            raise ValueError("the VLM pipeline's first argument is the pictures: call generate(images=[picture], "
                             f"prompts=[{images!r}]) (a prompt without pictures: images=None)")
        return self.generator.generate(images, prompts, **kw)

    __call__ = generate


def vlm_drafter(target: Target, drafter, method: str | None, home=None, device=None, **options):
    """(method, drafter model or None) for a VLM target, checked against it (kind, vocabulary, the method a
    feature drafter was trained as)."""
    tree = take_options(options, "vlm")["tree"]
    if method is not None and method not in VLM_METHODS:
        raise wrong_method(method, "vlm", target.name, target.model)
    if drafter is None:
        method, drafter = zoo_default(target, method)
    drafter = load_drafter(drafter, target, home, device)
    kind = drafter_kind(drafter)
    if kind == "name" and drafter == "prompt-lookup":
        kind, drafter, method = "none", None, method or "prompt-lookup"
    if kind == "feature":
        check_feature(drafter, target.model)
        method = method or drafter.config.method
        if method != drafter.config.method:
            raise ValueError(f"the drafter was trained as {drafter.config.method!r}, not {method!r}")
        return method, drafter
    if kind == "dflash":
        check_target(drafter, target.model)  # its layers, width and vocabulary are this target's
        method = method or "dflash"
        if method != "dflash":
            raise ValueError(f"a DFlash block drafter drafts as method 'dflash', not {method!r}")
        return method, drafter
    if kind == "causal":
        check_vocab(drafter, target.model)
        method = method or causal_method(tree)
        if method not in CAUSAL_METHODS:
            raise ValueError(f"a causal LM drafter drafts from text alone: method 'chain', 'tree' or 'dynamic', "
                             f"not {method!r}")
        return method, drafter
    if kind == "none":
        method = method or "prompt-lookup"
        if method not in NO_MODEL_METHODS:
            raise ValueError(f"method {method!r} needs a drafter (drafter=...)")
        return method, None
    raise ValueError(f"a {type(drafter).__name__} cannot draft for a VLM target: use a feature drafter (msd / flash "
                     "/ eagle), a DFlash block drafter (dflash), a text-only causal LM (chain / tree / dynamic) or "
                     "prompt lookup")
