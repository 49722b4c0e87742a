"""Image generation with a visual AR target: plain AR, lossless speculative decoding, LANTERN, LANTERN++.

    gen = ImageGenerator.from_zoo()                        # image-target, image-drafter, image-vq
    out = gen.generate([0, 5, 11], method="lantern++", lam=2.0, k=8, tree="static", cfg_scale=3.0, seed=0)
    out = gen.generate([0, 5, 11], method="lantern++", drafter="feature")   # the zoo's image-eagle drafter
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
from dataclasses import dataclass, field

import torch

from .drafters import AutoregressiveDrafter
from .drafters.feature import FeatureDrafter
from .generator import GenerationStats, SpeculativeGenerator
from .guidance import CFGModel
from .tree import TreeTemplate
from .verifiers.relaxed import Relaxation

IMAGE_METHODS = ("ar", "spec", "lantern", "lantern++")
IMAGE_DRAFTERS = ("ar", "feature", "sar")  # small AR model; image-eagle; image-sar (4 drafts per forward)
# LANTERN++'s static tree: depth 5, wider near the root (all draft probabilities are low). Kept to 18 nodes:
# on a CPU the verify forward costs in proportion to the nodes (a (4, 2, 2, 1, 1) tree of 60 nodes made a
# 48-image batch 30x slower than plain AR in the first measurement)
LANTERN_TREE = TreeTemplate.full((2, 2, 1, 1, 1))


def lattice_tree(depth: int) -> TreeTemplate:
    """The static tree for a semi-autoregressive drafter of ``depth`` slots: LANTERN_TREE's shape cut to it."""
    return TreeTemplate.full((2, 2, 1, 1, 1)[:depth]) if depth < 5 else LANTERN_TREE


def resolve_bound(method: str, delta: float | None, lam: float | None) -> dict:
    """The bound a method relaxes acceptance by: LANTERN's δ or LANTERN++'s λ (defaults 0.1 and 2); ``{}`` for
    the lossless methods. A bound the method does not use is an error, not silently dropped."""
    if delta is not None and method != "lantern":
        raise ValueError(f"delta (LANTERN's cap δ on the mass moved per candidate) does not apply to method {method!r}; "
                         "it is used by method 'lantern' only")
    if lam is not None and method != "lantern++":
        raise ValueError(f"lam (LANTERN++'s multiplicative bound) does not apply to method {method!r}; "
                         "it is used by method 'lantern++' only")
    if method == "lantern":
        return {"delta": 0.1 if delta is None else delta}
    if method == "lantern++":
        return {"lam": 2.0 if lam is None else lam}
    return {}


def tree_options(tree, num_tokens: int, top_k: int, num_nodes: int, sar: int = 1) -> dict:
    """Drafter keyword arguments for a tree choice: ``"chain"`` (``num_tokens``, or a semi-autoregressive
    drafter's ``sar`` slots), ``"static"`` (LANTERN_TREE, or the SAR drafter's lattice), ``"dynamic"``
    (EAGLE-2) or a TreeTemplate."""
    if tree == "chain":
        return dict(num_tokens=sar if sar > 1 else num_tokens)
    if tree == "static":
        return dict(tree=LANTERN_TREE if sar == 1 else lattice_tree(sar))
    if tree == "dynamic":
        return dict(num_tokens=5, tree="dynamic", top_k=top_k, num_nodes=num_nodes)
    if isinstance(tree, TreeTemplate):
        return dict(tree=tree)
    raise ValueError(f"tree must be 'chain', 'static', 'dynamic' or a TreeTemplate, got {tree!r}")


@dataclass
class ImageOutput:
    images: torch.Tensor
    codes: torch.LongTensor
    stats: GenerationStats | None
    seconds: float
    config: dict = field(default_factory=dict)


class ImageGenerator:
    def __init__(self, target, drafter_model, vq, layout, classes: list[str] | None = None, feature_drafter=None,
                 sar_drafter=None):
        from .drafters.feature_model import signature_mismatch
        from .zoo.image import codebook

        self.target, self.drafter_model, self.vq, self.layout = target.eval(), drafter_model, vq, layout
        self.classes = classes
        for net in (feature_drafter, sar_drafter):
            problem = signature_mismatch(net.config.target, target) if net is not None else None
            if problem:
                raise ValueError(f"the feature drafter was trained against another target: {problem}")
        self.feature_drafters = {"feature": feature_drafter, "sar": sar_drafter}
        book = codebook(vq)
        if book.shape[0] != layout.codebook_size:
            raise ValueError(f"the VQ codebook has {book.shape[0]} codes but the target's image vocabulary has "
                             f"{layout.codebook_size}")
        self.codebook = book
        vocab = target.config.vocab_size
        if layout.vocab_size != vocab:
            raise ValueError(f"token layout of {layout.vocab_size} ids does not match the target's vocabulary ({vocab})")

    @classmethod
    def from_zoo(cls, home=None) -> "ImageGenerator":
        from .zoo import load, zoo_home

        t, d = load("image-target", home), load("image-drafter", home)

        def optional(name):  # `mmspec zoo build --only image-eagle,image-sar`
            return load(name, home).model if (Path(home or zoo_home()) / name / "zoo.json").exists() else None

        return cls(t.model, d.model, t.extras["vq"], t.extras["layout"], t.extras.get("classes"),
                   optional("image-eagle"), optional("image-sar"))

    def set_feature_drafter(self, net, kind: str) -> None:
        """Use ``net`` as the ``"feature"`` (one token per forward) or ``"sar"`` drafter, checked against the target."""
        from .drafters.feature_model import signature_mismatch

        if kind not in ("feature", "sar"):
            raise ValueError(f"feature drafter kind must be 'feature' or 'sar', got {kind!r}")
        problem = signature_mismatch(net.config.target, self.target)
        if problem:
            raise ValueError(f"the feature drafter was trained against another target: {problem}")
        self.feature_drafters[kind] = net

    def relaxation(self, k: int, delta: float | None = None, lam: float | None = None) -> Relaxation:
        return Relaxation.from_codebook(self.codebook, self.layout.vocab_size, k, self.layout.code_offset,
                                        delta=delta, lam=lam)

    def drafter(self, cfg_scale: float, tree="chain", num_tokens: int = 4, top_k: int = 4, num_nodes: int = 24,
                kind: str = "ar"):
        if kind not in IMAGE_DRAFTERS:
            raise ValueError(f"unknown image drafter {kind!r}; choose from {IMAGE_DRAFTERS}")
        if kind != "ar":
            return self._feature_drafter(kind, cfg_scale, tree, num_tokens, top_k, num_nodes)
        d = CFGModel(self.drafter_model, cfg_scale, self.layout.null_id, self._codes())
        return AutoregressiveDrafter(d, adaptive=False, **tree_options(tree, num_tokens, top_k, num_nodes))

    def _feature_drafter(self, kind: str, cfg_scale: float, tree, num_tokens: int, top_k: int, num_nodes: int):
        net = self.feature_drafters[kind]
        if net is None:
            zoo_name, arg = ("image-eagle", "feature_drafter") if kind == "feature" else ("image-sar", "sar_drafter")
            raise ValueError(f"no {kind} drafter loaded: build it (`mmspec zoo build --only {zoo_name}`) or train "
                             f"one (`mmspec train image-drafter`) and pass it as {arg}=")
        guided = CFGModel(self.target, cfg_scale, self.layout.null_id, self._codes())
        return FeatureDrafter(net, guided, **tree_options(tree, num_tokens, top_k, num_nodes, net.config.sar_tokens))

    def _codes(self) -> torch.Tensor:
        return torch.arange(self.layout.code_offset, self.layout.code_offset + self.layout.codebook_size)

    @torch.no_grad()
    def generate(self, class_ids, method: str = "lantern++", cfg_scale: float = 3.0, temperature: float = 1.0,
                 k: int = 8, delta: float | None = None, lam: float | None = None, tree="static",
                 num_tokens: int = 4, seed: int = 0, drafter: str = "ar", measure_output_tv: bool = False,
                 **unknown) -> ImageOutput:
        """``measure_output_tv`` (LANTERN / LANTERN++): compute the exact TV of each step's first emitted token
        from the target's (``stats.output_tv``); its cost is kept out of ``seconds``."""
        from .arguments import reject_unknown
        from .zoo.image import decode_codes, generate_codes

        reject_unknown(unknown, ImageGenerator.generate, "ImageGenerator.generate")
        if method not in IMAGE_METHODS:
            raise ValueError(f"unknown method {method!r}; choose from {IMAGE_METHODS}")
        for name, value in (("k", k), ("num_tokens", num_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        class_ids = [int(c) for c in class_ids]
        n_classes = self.layout.num_classes
        bad = [c for c in class_ids if not (c == -1 or 0 <= c < n_classes)]
        if not class_ids or bad:
            raise ValueError(f"class ids must be in [0, {n_classes}) (or -1: unconditional), got {class_ids}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature}")
        bound = resolve_bound(method, delta, lam)  # before any work: a bound the method ignores is refused
        gen = torch.Generator().manual_seed(seed)
        t0 = time.perf_counter()
        stats = None
        if method == "ar":
            codes = generate_codes(self.target, class_ids, cfg_scale, temperature, 0, gen, self.layout)
        else:
            relax = self.relaxation(k, **bound) if bound else None
            target = CFGModel(self.target, cfg_scale, self.layout.null_id, self._codes())
            engine = SpeculativeGenerator(target, self.drafter(cfg_scale, tree, num_tokens, kind=drafter),
                                          relaxation=relax, measure_output_tv=measure_output_tv)
            ids = self.layout.class_tokens(class_ids)[:, None]
            out = engine.generate(ids, max_new_tokens=self.layout.num_codes, do_sample=temperature > 0,
                                  temperature=max(temperature, 1e-5), eos_token_id=[], generator=gen)
            codes = self.layout.tokens_to_codes(out.sequences[:, 1:])
            stats = out.stats
        seconds = time.perf_counter() - t0 - (stats.output_tv_time if stats is not None else 0.0)
        images = decode_codes(self.vq, codes, self.layout.grid)
        config = dict(method=method, cfg_scale=cfg_scale, temperature=temperature, seed=seed, class_ids=class_ids)
        if method != "ar":  # only what this method applied, bounds resolved to their defaults
            config.update(drafter=drafter, tree=str(tree), **bound)
            if bound:
                config["k"] = k
            if tree == "chain" and drafter != "sar":
                config["num_tokens"] = num_tokens
        return ImageOutput(images, codes, stats, seconds, config)


__all__ = ["ImageGenerator", "ImageOutput", "IMAGE_METHODS", "IMAGE_DRAFTERS", "LANTERN_TREE", "lattice_tree",
           "resolve_bound", "tree_options"]
