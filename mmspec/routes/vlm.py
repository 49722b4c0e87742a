"""The VLM route: a LLaVA-class target with a feature drafter (MSD / FLASH / EAGLE), a text-only causal LM
drafter or prompt lookup, through :class:`~mmspec.vlm_generator.VLMGenerator`."""

from __future__ import annotations

import torch

from ..arguments import reject_unknown
from .common import VLM_METHODS, ZOO_AR_DRAFTERS, Target, check_feature, check_vocab, drafter_kind, load_drafter, \
    wrong_method

VLM_OPTIONS = dict(num_tokens=None, tree=None, top_k=4, num_nodes=None, compress_to=None)


class VLMPipeline:
    """Pictures and prompts in, answers out: :class:`~mmspec.vlm_generator.VLMGenerator` (or plain generate)."""
    route = "vlm"

    def __init__(self, target: Target, method: str, drafter_model, **options):
        from ..vlm_generator import VLMGenerator

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
        from ..vlm_generator import VLMOutput

        if class_ids is not None:
            raise ValueError("class ids are inputs of class-conditional image targets, not of a VLM")
        if self.method != "plain":
            reject_unknown(kw, self.generator.generate, "the VLM pipeline's generate")
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
        raise wrong_method(method, "vlm", target)
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
        check_feature(drafter, target.model)
        method = method or drafter.config.method
        if method != drafter.config.method:
            raise ValueError(f"the drafter was trained as {drafter.config.method!r}, not {method!r}")
        return method, drafter
    if kind == "causal":
        check_vocab(drafter, target)
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
