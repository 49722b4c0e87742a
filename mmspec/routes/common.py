"""What every route shares: the method tables, reading a target's route off the model, loading targets and
drafters from specs (``zoo:<name>``, checkpoint directories) and the checks that turn a nonsensical
combination into a ValueError."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..drafters import DiffusionLM, Drafter
from ..drafters.feature_model import FeatureDraftModel, signature_mismatch
from ..drafters.remote_code import needs_trust, require_trust
from ..model_dirs import require_config
from ..verifiers.tree_forward import text_config

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
    "lantern": "LANTERN relaxed acceptance (δ caps the mass moved per candidate)",
    "lantern++": "LANTERN++ relaxed acceptance (multiplicative bound λ, static tree)",
}
ROUTE_METHODS = {"text": TEXT_METHODS, "vlm": VLM_METHODS, "image": IMAGE_METHODS, "janus": IMAGE_METHODS}
# zoo targets: (default method, default drafter)
ZOO_DEFAULTS = {"code-target": ("deer", "zoo:code-deer"), "vlm-target": ("msd", "zoo:vlm-msd"),
                "image-target": ("lantern++", "ar")}
ZOO_AR_DRAFTERS = {"code-target": "zoo:code-drafter", "vlm-target": "zoo:vlm-drafter"}


def detect_route(model) -> str:
    """``text``, ``vlm``, ``image`` or ``janus`` from the model's class and config (see module docstring)."""
    from ..vision import image_token_id
    from ..zoo.image import LAYOUT_KEY

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
        from ..zoo import load

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

    from ..zoo.image import LAYOUT_KEY

    require_config(path, "target")
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
    from ..drafters.ngram import NGramLM

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


def load_drafter(spec, target: Target, home=None, device=None, trust_remote_code: bool = False):
    """A drafter spec as an object: ``zoo:<name>`` or a checkpoint directory (feature drafter, diffusion LM or
    causal LM, told apart by the files they carry). Other strings and objects come back unchanged.
    A directory shipping its own modeling code (LLaDA, Dream) loads only with ``trust_remote_code=True``."""
    if not isinstance(spec, (str, Path)) or str(spec) in ("ar", "feature", "sar", "prompt-lookup"):
        return place(spec, device)
    spec = str(spec)
    vocab = text_config(target.model).vocab_size if target.route in ("text", "vlm") else None
    if spec.startswith("zoo:"):
        from ..zoo import load
        from ..zoo.code_diffusion import NAMES as DIFFUSION_NAMES, diffusion_lm

        name = spec.split(":", 1)[1]
        entry = load(name, home)
        if name == "code-ngram":
            raise ValueError("zoo:code-ngram is an n-gram model: DiffuSpec's causal proxy (causal=...), not a drafter")
        if name in DIFFUSION_NAMES:
            return place(diffusion_lm(entry, target_vocab_size=vocab), device)
        return place(entry.model, device)
    path = Path(spec)
    if not path.is_dir():
        raise ValueError(f"drafter {spec!r} is neither 'zoo:<name>' nor a local checkpoint directory")
    from ..training.artifact import read_record

    record = read_record(path)  # what `mmspec train ...` wrote: kind, method, the route it serves
    if record is not None and record.get("route") not in (None, target.route):
        raise ValueError(f"drafter {spec} was trained for {record['route']} targets ({record.get('trained_by')}, "
                         f"against {record.get('target', {}).get('spec')}); {target.name} is a {target.route} target")
    if (path / "feature_drafter.json").exists():  # it reads the target's features: same dtype
        net = FeatureDraftModel.from_pretrained(path, target=target.model).to(dtype=target.model.dtype)
        return place(net, device)
    from transformers import AutoConfig, AutoModelForCausalLM

    require_config(path, "drafter", ("config.json", "feature_drafter.json"))
    if needs_trust(path):  # remote-code checkpoints are diffusion LMs (LLaDA / Dream style) here
        require_trust(path, trust_remote_code, "trust_remote_code=True (CLI: --trust-remote-code)")
        return place(DiffusionLM.from_pretrained(path, trust_remote_code=True, target_vocab_size=vocab), device)
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    mtype = str(getattr(config, "model_type", "")).lower()
    if record is not None and record.get("kind") == "diffusion-lm" or \
            (path / "zoo.json").exists() and "mask_token_id" in (path / "zoo.json").read_text() or \
            any(k in mtype for k in ("dream", "llada", "diffucoder")):
        return place(DiffusionLM.from_pretrained(path, target_vocab_size=vocab), device)
    kw = dict(device_map={"": device}) if device else {}
    return AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **kw).eval()


def place(obj, device):
    if device is None:
        return obj
    if isinstance(obj, DiffusionLM):
        obj.model.to(device)
    elif isinstance(obj, torch.nn.Module):
        obj.to(device)
    return obj


def wrong_method(method: str, route: str, target: Target) -> ValueError:
    allowed = ROUTE_METHODS[route]
    owners = [r for r, ms in ROUTE_METHODS.items() if method in ms and r != route]
    where = f"it is a method for {' / '.join(owners)} targets; " if owners else ""
    return ValueError(f"method {method!r} does not apply to {target.name} ({type(target.model).__name__}, a {route} "
                      f"target): {where}choose from {list(allowed)}")


def check_vocab(drafter_model, target: Target) -> None:
    dv, tv = text_config(drafter_model).vocab_size, text_config(target.model).vocab_size
    if dv != tv:
        raise ValueError(f"drafter vocabulary ({dv} tokens) does not match the target's ({tv} tokens): the drafter "
                         "must share the target's tokenizer")


def check_feature(net: FeatureDraftModel, target_model) -> None:
    problem = signature_mismatch(net.config.target, target_model)
    if problem:
        raise ValueError(f"this feature drafter was trained for another target: {problem}")


def take_options(options: dict, allowed: dict, route: str) -> dict:
    unknown = set(options) - set(allowed)
    if unknown:
        raise ValueError(f"unknown options for the {route} route: {sorted(unknown)}; it takes {sorted(allowed)}")
    return {**allowed, **options}

