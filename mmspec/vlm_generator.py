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
``mmspec train msd``, or a ``FeatureDraftModel``); ``dflash`` a block-diffusion drafter (``zoo:vlm-dflash``, a
directory written by ``mmspec train dflash``: a chain cut at ``confidence``, or a DDTree of ``tree_nodes``); ``chain`` / ``tree`` / ``dynamic`` a small text-only causal LM
over the same tokenizer; ``prompt-lookup``, ``plain`` (the target's own generate) and ``mmspec-plain`` none.
Greedy outputs equal ``target.generate(do_sample=False, pixel_values=...)``.
"""

from __future__ import annotations

import time

import torch
from PIL import Image

from .arguments import reject_unknown
from .frontend import TextOutput, call_generator, engine_eos, generated_count, eos_token_id, hf_sampling_rng, \
    refuse_hf_coupling
from .generator import check_streamer
from .loading import load_drafter, load_target
from .options import check_generate
from .drafters.adaptive import unwrap
from .registry import CHAIN_CONFIDENCE, VLM_METHODS, build_drafter, check_applies, engine
from .request import check_positions
from .vision import forward_inputs, picture_rows


class VLMGenerator:
    """Pictures and prompts in, answers out, through the one decoding loop. ``method`` (see
    :data:`mmspec.registry.VLM_METHODS`) is the default; ``generate(method=...)`` switches it for one call with
    the same drafter model. The drafting options (``tree``, ``num_tokens``, ``compress_to``, ``top_k``,
    ``num_nodes``, ``adaptive``) are fixed here."""

    def __init__(self, target, processor, drafter=None, method: str = "msd", tree=None, num_tokens: int | None = None,
                 compress_to: int | None = None, top_k: int = 4, num_nodes: int | None = None,
                 adaptive: bool | None = None, confidence: float | None = CHAIN_CONFIDENCE,
                 tree_nodes: int | None = None, block: int | None = None, draft_vocab=None,
                 lookup: int | None = None, lookup_alone: int | None = None, tree_cut: float | None = None,
                 weights: str | None = None):
        if processor is None:
            raise ValueError("a processor is needed to turn images and prompts into model inputs")
        self.target, self.processor, self.drafter_model = target.eval(), processor, drafter
        self.options = dict(tree=tree, num_tokens=num_tokens, compress_to=compress_to, top_k=top_k,
                            num_nodes=num_nodes, adaptive=adaptive, weights=weights)
        if method == "dflash":  # the block drafter's cut / DDTree budget (the text route's default cut)
            self.options.update(confidence=confidence, tree_nodes=tree_nodes, block=block, draft_vocab=draft_vocab,
                                lookup=lookup, lookup_alone=lookup_alone, tree_cut=tree_cut)
        if method in VLM_METHODS:  # types, ranges, and no drafting setting the method would drop
            check_applies(self.options, "vlm", method)
        self._engines = {}  # method -> decoding loop (None: plain generate); bounded by the VLM methods
        self.method = method
        self.engine = self._engine_for(method)
        # the method's drafter (what a user inspects); the engine may run it under the adaptive policy
        self.drafter = unwrap(self.engine.drafter) if self.engine is not None else None

    def _engine_for(self, method: str | None):
        method = method or self.method
        if method not in VLM_METHODS:
            raise ValueError(f"unknown VLM method {method!r}; choose from {tuple(VLM_METHODS)}")
        if method not in self._engines:
            drafter = build_drafter(method, self.drafter_model, target=self.target, **self.options)
            self._engines[method] = engine(self.target, drafter)
        return self._engines[method]

    @classmethod
    def from_pretrained(cls, target, drafter=None, method: str = "msd", processor=None, home=None,
                        **kwargs) -> "VLMGenerator":
        """``target`` and ``drafter`` as ``zoo:<name>``, a checkpoint directory or a model (see mmspec.loading)."""
        t = load_target(target, processor, home=home)
        if t.route != "vlm":
            raise ValueError(f"{t.name} is a {t.route} target, not a vision-language model: VLMGenerator serves "
                             "LLaVA-class targets; mmspec.pipeline takes any target")
        return cls(t.model, t.tokenizer, load_drafter(drafter, t, home), method, **kwargs)

    @property
    def tokenizer(self):
        return getattr(self.processor, "tokenizer", self.processor)

    def prepare(self, images, prompts: list[str]) -> dict:
        """Processor inputs, left-padded. ``images[i]``: prompt i's picture (a PIL image, a numpy array or torch
        tensor HWC or CHW, uint8 or float in [0, 1], a file path), a list of them, or None; one picture with one
        prompt needs no list (:func:`mmspec.vision.picture_rows`). Pictures reach the processor as PIL images, so
        every form of one picture gives the same ``pixel_values``."""
        if isinstance(prompts, str):
            prompts = [prompts]
        if isinstance(prompts, tuple):
            prompts = list(prompts)
        if not isinstance(prompts, list) or not prompts or any(not isinstance(p, str) or not p.strip()
                                                               for p in prompts):
            raise ValueError("prompts must be a non-empty list of non-empty strings")
        rows = picture_rows(images, len(prompts))
        placeholder = getattr(self.processor, "image_token", "<image>")
        flat = []
        for i, (row, prompt) in enumerate(zip(rows, prompts)):
            n = prompt.count(placeholder)
            if n != len(row):
                raise ValueError(f"prompt {i} has {n} image placeholder(s) {placeholder!r} for {len(row)} image(s)")
            flat.extend(row)
        self._check_sizes(flat)
        inputs = self.processor(images=flat or None, text=list(prompts), return_tensors="pt", padding=True,
                                padding_side="left")  # decoder-only generation: real tokens last
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
        for i, img in enumerate(images):  # PIL images (prepare converted every form)
            size = tuple(img.size) if isinstance(img, Image.Image) else None
            if size is not None and size != want:
                raise ValueError(f"image {i} is {size[0]}x{size[1]} pixels, but this model's processor takes "
                                 f"{want[0]}x{want[1]} pictures and does not resize: resize it first")

    @torch.no_grad()
    def generate(self, images=None, prompts: list[str] | str = (), max_new_tokens: int = 64, do_sample: bool = False,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                 generator: torch.Generator | None = None, seed: int | None = None, stop_at_eos: bool = True,
                 method: str | None = None, streamer=None, coupling: str = "rejection", **unknown) -> TextOutput:
        """``streamer``: HF's streamer protocol (``TextStreamer(gen.tokenizer, skip_prompt=True)``, ...), fed each
        step's committed tokens as they are verified; one prompt per call. ``coupling``: as the text pipeline's
        (plain decoding through the target's own generate takes ``"rejection"`` only)."""
        reject_unknown(unknown, VLMGenerator.generate, "VLMGenerator.generate")
        checked = check_generate("VLMGenerator.generate", max_new_tokens=max_new_tokens, do_sample=do_sample,
                                 temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                 stop_at_eos=stop_at_eos, method=method, coupling=coupling)  # greedy: sampling -> None
        temperature, top_k, top_p = checked["temperature"], checked["top_k"], checked["top_p"]
        coupling = checked["coupling"] or "rejection"
        spec = self._engine_for(method)
        if spec is None:
            refuse_hf_coupling(coupling, method or self.method)
        inputs = self.prepare(images, prompts)
        ids, mask = inputs.pop("input_ids"), inputs.pop("attention_mask")
        check_streamer(streamer, ids)
        eos = eos_token_id(stop_at_eos, self.tokenizer, self.target)
        rng = call_generator(generator, seed, self.target.device)
        t0 = time.perf_counter()
        if spec is None:
            check_positions(self.target, ids.shape[1], max_new_tokens)
            sampling = dict(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p) if do_sample else \
                dict(do_sample=False)
            with hf_sampling_rng(rng):
                seqs = self.target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                            eos_token_id=eos, pad_token_id=self.tokenizer.pad_token_id, **sampling,
                                            streamer=streamer, **inputs)
            stats = None
        else:
            out = spec.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=do_sample,
                                temperature=temperature, top_k=top_k, top_p=top_p, generator=rng,
                                eos_token_id=engine_eos(eos), pad_token_id=self.tokenizer.pad_token_id,
                                streamer=streamer, coupling=coupling, **inputs)
            seqs, stats = out.sequences, out.stats
        seconds = time.perf_counter() - t0
        texts = self.tokenizer.batch_decode(seqs[:, ids.shape[1]:], skip_special_tokens=True)
        config = dict(method=method or self.method, max_new_tokens=max_new_tokens, do_sample=do_sample,
                      temperature=temperature, top_k=top_k, top_p=top_p, stop_at_eos=stop_at_eos, seed=seed)
        if coupling != "rejection":
            config["coupling"] = coupling
        count = stats.new_tokens if stats is not None else generated_count(seqs[:, ids.shape[1]:], eos)
        return TextOutput([t.strip() for t in texts], seqs, stats, seconds, config, count)


__all__ = ["VLMGenerator"]
