"""One entry point for every kind of target: ``mmspec.pipeline(target, drafter=None, method=None, **options)``.

    pipe = mmspec.pipeline("zoo:code-target")                      # text: DFlash DDTree (greedy), AR chain (sampling)
    pipe("def add(a, b):\\n", max_new_tokens=32).texts
    pipe = mmspec.pipeline("zoo:vlm-target")                       # VLM: DFlash with zoo:vlm-dflash
    pipe.generate(images=[img], prompts=["<image>\\nCaption:"])
    pipe = mmspec.pipeline("zoo:image-target", method="lantern++") # image: class ids in, pictures out
    pipe.generate([0, 5, 11], seed=0).images

The target is inspected, not named (:func:`mmspec.targets.detect_route`): a stock Janus model takes the Janus
route; a config carrying ``mmspec_image_layout`` is a visual AR generator over VQ codes (image route); a config
with an image placeholder id or a vision tower is LLaVA-class (VLM route); any other model that can generate is
a causal LM (text route). Each route picks its default method and drafter family from :mod:`mmspec.registry`
and refuses combinations that make no sense (an image method on a text model, pictures for a text-only target,
a feature drafter trained for another target, a drafter over another vocabulary) with a ValueError saying what
would work. ``method`` is the pipeline's default; ``generate(method=...)`` switches it for one call.
"""

from __future__ import annotations

import torch

from .frontend import ImageOutput, TextOutput
from .loading import as_device, as_dtype, load_target
from .registry import OPTIONS, check_applies, options_set
from .routes.image import ImagePipeline, JanusPipeline, image_pipeline, janus_pipeline
from .routes.text import TextPipeline, text_drafter
from .routes.vlm import VLMPipeline, vlm_drafter
from .routes.zoo_defaults import zoo_sampling_method


def pipeline(target, drafter=None, method: str | None = None, *, tokenizer=None, processor=None, device_map=None,
             device=None, dtype=None, drafter_device=None, home=None, trust_remote_code: bool = False, **options):
    """Inspect ``target`` and build the generator of its route (see the module docstring).

    ``target``: a model, ``zoo:<name>`` or a checkpoint directory (loaded with ``device_map``, e.g. ``"auto"``).
    ``drafter``: what drafts: a model / DiffusionLM / FeatureDraftModel / Drafter, ``zoo:<name>``, a checkpoint
    directory, ``"prompt-lookup"``, or for the zoo image target ``"ar"`` / ``"feature"`` / ``"sar"``; placed on
    ``drafter_device`` when given. ``options`` are the route's own settings (``mmspec.registry.OPTIONS``:
    num_tokens, tree, cfg_scale, ...). ``trust_remote_code``: a drafter directory that ships its own modeling code
    (LLaDA, Dream) may run it. ``device`` / ``dtype`` (e.g. ``"cuda"``, ``"bfloat16"``): where and in what
    precision the target runs (a given model is moved in place); the drafter follows to ``device`` unless
    ``drafter_device`` says otherwise, and drafters that read the target's features take its dtype.
    """
    if device is not None and device_map is not None:
        raise ValueError("give device= (one device) or device_map= (e.g. 'auto', sharded loading), not both")
    device, drafter_device = as_device(device), as_device(drafter_device, "drafter_device")  # before any loading
    dtype = as_dtype(dtype)
    t = load_target(target, tokenizer or processor, device_map, home, dtype)  # a spec loads in dtype (default float32)
    route = t.route
    if route in ("image", "janus") and dtype not in (None, torch.float32):
        raise ValueError(f"{route} targets run in float32 here (their VQ decoders and guidance are checked in "
                         f"float32); got dtype={dtype}")
    if route in ("text", "vlm") and (device is not None or dtype is not None):
        t.model.to(device=device, dtype=dtype)
    drafter_device = drafter_device if drafter_device is not None else device
    if route == "text":
        def build(m):
            return text_drafter(t, drafter, m, home, drafter_device, trust_remote_code, **options)

        sampling = zoo_sampling_method(t, drafter, method, options_set(options, "text"))
        pipe = TextPipeline(t, *build(method), build, sampling_method=sampling)
        check_applies(options, "text", pipe.method)  # a drafting setting the chosen method would drop: refused
        return pipe
    if route == "vlm":
        m, d = vlm_drafter(t, drafter, method, home, drafter_device, **options)
        return VLMPipeline(t, m, d, **{**OPTIONS["vlm"], **options})
    if route == "image":
        return image_pipeline(t, drafter, method, home, drafter_device, **options)
    return janus_pipeline(t, drafter, method, home, **options)


__all__ = ["pipeline", "TextPipeline", "VLMPipeline", "ImagePipeline", "JanusPipeline", "TextOutput", "ImageOutput"]
