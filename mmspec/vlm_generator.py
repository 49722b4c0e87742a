"""The Python API for VLM inference: images + prompts in, texts + stats out.

    gen = VLMGenerator.from_pretrained("zoo:vlm-target", "zoo:vlm-msd", method="msd")
    out = gen.generate(images=[img], prompts=["<image>\\nCaption:"], max_new_tokens=48)
    out.texts, out.stats.mean_accepted_tokens

Targets: ``zoo:vlm-target`` (with the zoo's ``LlavaProcessor``) or a local checkpoint of a VLM family mmspec
runs exactly (LLaVA-1.5, LLaVA-NeXT, Qwen2-VL, Qwen2.5-VL, PaliGemma, Gemma3, Idefics3 / SmolVLM; loaded with
its ``AutoProcessor``), or ready objects. Every processor output the model's forward takes (``image_sizes``,
``image_grid_thw``, ``mm_token_type_ids``, ``pixel_attention_mask``, ``token_type_ids``, ...) goes to the
prefill. Drafters by method:
``msd`` / ``flash`` / ``eagle`` take a feature drafter (``zoo:vlm-msd``, a directory written by
``mmspec train msd``, or a ``FeatureDraftModel``); ``text`` a small causal LM over the same tokenizer;
``prompt-lookup`` none. Greedy outputs equal ``target.generate(do_sample=False, pixel_values=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .drafters import AutoregressiveDrafter, PromptLookupDrafter
from .drafters.feature import FeatureDrafter
from .drafters.feature_model import FeatureDraftModel
from .arguments import reject_unknown
from .generator import GenerationStats, SpeculativeGenerator
from .vision import forward_inputs
from .model_dirs import require_config

VLM_API_METHODS = ("msd", "flash", "eagle", "text", "prompt-lookup")


@dataclass
class VLMOutput:
    texts: list[str]
    sequences: torch.LongTensor
    stats: GenerationStats


def _load_target(target):
    if not isinstance(target, str):
        return target, None
    if target.startswith("zoo:"):
        from .zoo import load

        entry = load(target.split(":", 1)[1])
        return entry.model, entry.tokenizer
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor, LlavaForConditionalGeneration

    llava = AutoConfig.from_pretrained(require_config(target, "target"), local_files_only=True).model_type == "llava"
    cls = LlavaForConditionalGeneration if llava else AutoModelForImageTextToText
    model = cls.from_pretrained(target, local_files_only=True).eval()
    return model, AutoProcessor.from_pretrained(target, local_files_only=True)


def _load_drafter_model(drafter, method: str, target):
    if drafter is None or not isinstance(drafter, str):
        return drafter
    if drafter.startswith("zoo:"):
        from .zoo import load

        return load(drafter.split(":", 1)[1]).model
    if method in ("msd", "flash", "eagle"):
        return FeatureDraftModel.from_pretrained(drafter, target=target)
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(require_config(drafter, "drafter"), local_files_only=True).eval()


class VLMGenerator:
    def __init__(self, target, processor, drafter=None, method: str = "msd", tree=None, num_tokens: int | None = None,
                 compress_to: int | None = None, top_k: int = 4, num_nodes: int | None = None):
        if method not in VLM_API_METHODS:
            raise ValueError(f"unknown VLM method {method!r}; choose from {VLM_API_METHODS}")
        if processor is None:
            raise ValueError("a processor is needed to turn images and prompts into model inputs")
        self.target, self.processor, self.method = target.eval(), processor, method
        if method in ("msd", "flash", "eagle"):
            if not isinstance(drafter, FeatureDraftModel):
                raise ValueError(f"method {method!r} needs a feature drafter (FeatureDraftModel or its directory)")
            if drafter.config.method != method:
                raise ValueError(f"the drafter was trained as {drafter.config.method!r}, not {method!r}")
            self.drafter = FeatureDrafter(drafter, target, num_tokens=num_tokens, tree=tree, top_k=top_k,
                                          num_nodes=num_nodes, compress_to=compress_to)
        elif method == "text":
            if drafter is None:
                raise ValueError("method 'text' needs a small causal LM drafter")
            self.drafter = AutoregressiveDrafter(drafter, num_tokens=num_tokens or 4, tree=tree)
        else:
            self.drafter = PromptLookupDrafter(num_tokens=num_tokens or 4)
        self.engine = SpeculativeGenerator(target, self.drafter)

    @classmethod
    def from_pretrained(cls, target, drafter=None, method: str = "msd", processor=None, **kwargs) -> "VLMGenerator":
        model, proc = _load_target(target)
        return cls(model, processor or proc, _load_drafter_model(drafter, method, model), method, **kwargs)

    @property
    def tokenizer(self):
        return getattr(self.processor, "tokenizer", self.processor)

    def prepare(self, images, prompts: list[str]) -> dict:
        """Processor inputs, left-padded; ``images[i]`` is one PIL image, a list of them, or None."""
        if isinstance(prompts, str):
            prompts = [prompts]
        if not prompts or any(not isinstance(p, str) or not p.strip() for p in prompts):
            raise ValueError("prompts must be a non-empty list of non-empty strings")
        if images is None:
            images = [None] * len(prompts)
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} image entries for {len(prompts)} prompts (one entry per prompt)")
        placeholder = getattr(self.processor, "image_token", "<image>")
        flat = []
        for i, (img, prompt) in enumerate(zip(images, prompts)):
            row = [] if img is None else list(img) if isinstance(img, (list, tuple)) else [img]
            n = prompt.count(placeholder)
            if n != len(row):
                raise ValueError(f"prompt {i} has {n} image placeholder(s) {placeholder!r} for {len(row)} image(s)")
            flat.extend(row)
        self._check_sizes(flat)
        tok = self.tokenizer
        tok.padding_side = "left"  # decoder-only generation: real tokens last
        inputs = self.processor(images=flat or None, text=list(prompts), return_tensors="pt", padding=True)
        out = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
        out.update(forward_inputs(self.target, dict(inputs)))  # pixel_values, image_sizes, image_grid_thw, ...
        return out

    def _check_sizes(self, images: list) -> None:
        """A processor that neither resizes nor crops (the zoo's) takes pictures of one size only; another size
        would surface later as a placeholder-count mismatch, so it is named here."""
        ip = getattr(self.processor, "image_processor", None)
        if ip is None or getattr(ip, "do_resize", True) or getattr(ip, "do_center_crop", True):
            return
        crop = getattr(ip, "crop_size", None) or {}
        want = (crop.get("width"), crop.get("height"))
        if None in want:
            return
        for i, img in enumerate(images):
            size = tuple(img.size) if hasattr(img, "size") and not callable(img.size) else \
                (int(img.shape[-1]), int(img.shape[-2])) if hasattr(img, "shape") else None
            if size is not None and size != want:
                raise ValueError(f"image {i} is {size[0]}x{size[1]} pixels, but this model's processor takes "
                                 f"{want[0]}x{want[1]} pictures and does not resize: resize it first")

    @torch.no_grad()
    def generate(self, images=None, prompts: list[str] | str = (), max_new_tokens: int = 64, do_sample: bool = False,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                 generator: torch.Generator | None = None, stop_at_eos: bool = True, **unknown) -> VLMOutput:
        reject_unknown(unknown, VLMGenerator.generate, "VLMGenerator.generate")
        inputs = self.prepare(images, prompts)
        width = inputs["input_ids"].shape[1]
        eos = self.tokenizer.eos_token_id if stop_at_eos else None
        out = self.engine.generate(inputs.pop("input_ids"), attention_mask=inputs.pop("attention_mask"),
                                   max_new_tokens=max_new_tokens, do_sample=do_sample, temperature=temperature,
                                   top_k=top_k, top_p=top_p, generator=generator,
                                   eos_token_id=eos if eos is not None else [],
                                   pad_token_id=self.tokenizer.pad_token_id, **inputs)
        texts = self.tokenizer.batch_decode(out.sequences[:, width:], skip_special_tokens=True)
        return VLMOutput([t.strip() for t in texts], out.sequences, out.stats)


__all__ = ["VLMGenerator", "VLMOutput", "VLM_API_METHODS"]
