"""The vision-language benchmark on the zoo: held-out scenes, captions and questions, every VLM method.

Methods: plain decoding; the baselines — the text-only zoo drafter (``vlm-drafter``, no picture) as a
chain and a static tree, prompt lookup (mmspec's and HF's), and the plain feature drafter
(``vlm-eagle``: no decoupling, no compression); MSD (``vlm-msd``) as a chain and an EAGLE-2 dynamic
tree; FLASH (``vlm-flash``) at 8, 4 and 1 compressed tokens per image, and as a lattice tree. Every method
stops at EOS, as a user's VLM answers do, and greedy outputs are compared with plain decoding's."""

from __future__ import annotations

from pathlib import Path

from .. import DEFAULT_TREE, TreeTemplate
from ..drafters import AutoregressiveDrafter
from ..drafters.feature import FeatureDrafter
from ..zoo import load
from .bench import compare

VLM_METHODS = ["plain", "mmspec-plain", "hf-prompt-lookup", "mmspec-prompt-lookup", "text-chain", "text-tree", "eagle-chain",
               "eagle-dynamic", "msd-chain", "msd-dynamic", "flash-8", "flash-4", "flash-1", "flash-4-lattice"]
DYNAMIC = dict(top_k=4, num_nodes=16)
# FLASH's slots are independent given the context: a static lattice tree over their ranked tokens
FLASH_LATTICE = TreeTemplate.full((3, 2, 1, 1))


def feature_factories(home: str | Path | None = None, num_tokens: int = 4) -> dict:
    """Zero-argument drafter factories for the VLM methods (models loaded once)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = load(name, home).model
        return cache[name]

    target = get("vlm-target")

    def feature(name, **kw):
        return lambda: FeatureDrafter(get(name), target, **kw)

    return {
        "text-chain": lambda: AutoregressiveDrafter(get("vlm-drafter"), num_tokens=num_tokens),
        "text-tree": lambda: AutoregressiveDrafter(get("vlm-drafter"), tree=DEFAULT_TREE),
        "eagle-chain": feature("vlm-eagle", num_tokens=num_tokens),
        "eagle-dynamic": feature("vlm-eagle", num_tokens=num_tokens + 1, tree="dynamic", **DYNAMIC),
        "msd-chain": feature("vlm-msd", num_tokens=num_tokens),
        "msd-dynamic": feature("vlm-msd", num_tokens=num_tokens + 1, tree="dynamic", **DYNAMIC),
        "flash-8": feature("vlm-flash", compress_to=8),
        "flash-4": feature("vlm-flash", compress_to=4),
        "flash-1": feature("vlm-flash", compress_to=1),
        "flash-4-lattice": feature("vlm-flash", compress_to=4, tree=FLASH_LATTICE),
    }


def vlm_prompts(processor, num_prompts: int, kind: str = "mixed", start: int = 0) -> list[dict]:
    """Held-out test scenes: ``caption``, ``question`` (every question type in turn) or ``mixed``
    (alternating)."""
    from ..zoo import vlm_data as vd

    scenes = vd.scenes("test", num_prompts, start)
    items = []
    for i, sc in enumerate(scenes):
        caption = kind == "caption" or (kind == "mixed" and i % 2 == 0)
        items.append(sc.items()[-1] if caption else sc.questions[i % len(sc.questions)])
    prompts = []
    for sc, q in zip(scenes, items):
        p = processor(images=[sc.image()], text=[vd.with_image(q.prompt)], return_tensors="pt")
        prompts.append({"input_ids": p["input_ids"], "pixel_values": p["pixel_values"]})
    return prompts


def run_vlm_suite(methods: list[str] | None = None, num_prompts: int = 8, max_new_tokens: int = 48,
                  do_sample: bool = False, temperature: float = 0.6, repeats: int = 1, num_tokens: int = 4,
                  kind: str = "mixed", home: str | Path | None = None, progress: bool = True) -> dict:
    methods = methods or VLM_METHODS
    target = load("vlm-target", home)
    factories = feature_factories(home, num_tokens)
    prompts = vlm_prompts(target.tokenizer, num_prompts, kind)
    eos = target.extras["tokenizer"].eos_token_id
    report = compare(target.model, None, prompts, methods, max_new_tokens=max_new_tokens, num_tokens=num_tokens,
                     do_sample=do_sample, temperature=temperature, repeats=repeats, progress=progress,
                     extra={m: f for m, f in factories.items() if m in methods}, eos_token_id=eos)
    report["config"].update(model="zoo:vlm-target", draft="zoo:vlm-drafter (text only) / vlm-eagle / vlm-msd / "
                            "vlm-flash", prompts=f"held-out scenes ({kind})")
    return report


__all__ = ["VLM_METHODS", "feature_factories", "vlm_prompts", "run_vlm_suite"]
