"""One loader for every model spec mmspec takes: ``zoo:<name>``, a local checkpoint directory (a Hugging Face
model directory, or what ``mmspec train`` wrote, told apart by the files it holds), or a ready object passed
through. The pipeline, the generators, eval, bench and training all load here, so a spec means the same thing
everywhere and a bad one fails with the same ValueError naming it."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import (AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor,
                          AutoTokenizer, JanusForConditionalGeneration, LlavaForConditionalGeneration)

from .drafters import DiffusionLM
from .drafters.dflash_io import is_dflash_dir, load_dflash
from .drafters.feature_model import FeatureDraftModel
from .drafters.ngram import NGramLM
from .drafters.remote_code import needs_trust, require_trust
from .image_codes import LAYOUT_KEY
from .kernels.tree_attention import prefer_tree_attention
from .model_dirs import require_config
from .targets import Target
from .verifiers.tree_forward import text_config
from .zoo import ZooEntry, load as zoo_load

RECORD = "mmspec.json"  # what `mmspec train ...` writes next to the weights
NAMED_DRAFTERS = ("prompt-lookup", "ar", "feature", "sar", "dflash")  # drafters named, not loaded


def read_record(path: str | Path) -> dict | None:
    """The ``mmspec.json`` of a trained directory, or None when there is none."""
    file = Path(path) / RECORD
    if not file.exists():
        return None
    try:
        record = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{file} cannot be read ({err}); retrain into that directory") from None
    if not isinstance(record, dict) or "kind" not in record:
        raise ValueError(f"{file} is not an mmspec training record (no 'kind')")
    return record


def zoo_name(spec) -> str | None:
    """``name`` for ``"zoo:<name>"``, else None."""
    return spec.split(":", 1)[1] if isinstance(spec, str) and spec.startswith("zoo:") else None


def model_dir(spec, what: str) -> Path:
    """``spec`` as an existing directory, or the ValueError every loader raises for a spec it cannot read."""
    path = Path(spec)
    if not path.is_dir():
        raise ValueError(f"{what} {str(spec)!r} is neither 'zoo:<name>' nor a local checkpoint directory")
    return path


def _zoo_device(device_map):
    if device_map in (None, "cpu"):
        return None
    if device_map == "auto":  # the zoo's models are a few MB: one device holds them
        return "cuda" if torch.cuda.is_available() else None
    return device_map


DEFAULT_DTYPE = torch.float32  # what a loaded model computes in unless a dtype is asked


def load_target(spec, tokenizer=None, device_map=None, home=None, dtype=None) -> Target:
    """``zoo:<name>``, a local checkpoint directory (``device_map`` goes to ``from_pretrained``), or a model.
    ``tokenizer`` (a tokenizer or processor) replaces the one found next to the weights. Loaded models compute in
    ``dtype`` (a dtype or its name), float32 unless asked, whatever the checkpoint stores (the zoo's folders store
    float16 to stay small; a hub checkpoint may store bfloat16); a given model is returned as it is."""
    if not isinstance(spec, (str, Path)):
        return Target(spec, tokenizer, type(spec).__name__)
    dtype = as_dtype(dtype) or DEFAULT_DTYPE
    name = zoo_name(spec)
    if name is not None:
        entry = zoo_load(name, home)  # the zoo's loaders give float32
        device = _zoo_device(device_map)
        if isinstance(entry.model, torch.nn.Module) and (device is not None or dtype != DEFAULT_DTYPE):
            entry.model.to(device=device, dtype=dtype)
        return Target(entry.model, tokenizer or entry.tokenizer, spec, name, dict(entry.extras))
    return _load_checkpoint(model_dir(spec, "target"), tokenizer, device_map, dtype)


def _load_checkpoint(path: Path, tokenizer, device_map, dtype: torch.dtype = DEFAULT_DTYPE) -> Target:
    require_config(path, "target")
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    kw = dict(local_files_only=True, dtype=dtype)  # never the stored dtype silently ("auto" in transformers 5)
    if device_map:
        kw["device_map"] = device_map
    mtype = getattr(config, "model_type", "")
    if mtype == "janus":
        model, proc_cls = JanusForConditionalGeneration.from_pretrained(path, **kw), AutoProcessor
    elif getattr(config, "vision_config", None) is not None:
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
    return Target(prefer_tree_attention(model.eval()), tokenizer, str(path))


def zoo_diffusion_lm(entry: ZooEntry, context: str = "cache", **kwargs) -> DiffusionLM:
    """A zoo diffusion model (its zoo.json records the mask id and logits convention) as a DiffusionLM."""
    return DiffusionLM(entry.model, entry.config["mask_token_id"], convention=entry.config["convention"],
                       context=context, **kwargs)


def load_drafter(spec, target: Target, home=None, device=None, trust_remote_code: bool = False):
    """A drafter spec as an object: ``zoo:<name>`` or a checkpoint directory (feature drafter, DFlash drafter in
    the z-lab or speculators layout, diffusion LM or causal LM, told apart by the files they carry), placed on ``device`` when given. Named drafters
    (``"prompt-lookup"``, the image target's ``"ar"`` / ``"feature"`` / ``"sar"``) and objects come back as
    they are. A directory shipping its own modeling code (LLaDA, Dream) loads only with
    ``trust_remote_code=True``. A drafter loaded from a directory computes in the target's dtype (float32 unless
    one was asked for the target), whatever its files store."""
    if not isinstance(spec, (str, Path)) or str(spec) in NAMED_DRAFTERS:
        return place(spec, device)
    vocab = text_config(target.model).vocab_size if target.route in ("text", "vlm") else None
    name = zoo_name(spec)
    if name is not None:
        entry = zoo_load(name, home)
        if isinstance(entry.model, NGramLM):
            raise ValueError(f"{spec} is an n-gram model: DiffuSpec's causal proxy (causal=...), not a drafter")
        if isinstance(entry.model, torch.nn.Module):  # a fresh copy per load: computes in the target's dtype
            entry.model.to(dtype=target_dtype(target))
        if "mask_token_id" in entry.config:
            return place(zoo_diffusion_lm(entry, target_vocab_size=vocab), device)
        return place(entry.model, device)
    path = model_dir(spec, "drafter")
    record = read_record(path)  # what `mmspec train ...` wrote: kind, method, the route it serves
    if record is not None and record.get("route") not in (None, target.route):
        raise ValueError(f"drafter {spec} was trained for {record['route']} targets ({record.get('trained_by')}, "
                         f"against {record.get('target', {}).get('spec')}); {target.name} is a {target.route} target")
    dtype = target_dtype(target)  # a drafter computes in the target's dtype, never in what its files store
    if (path / "feature_drafter.json").exists():  # it reads the target's features: same dtype
        net = FeatureDraftModel.from_pretrained(path, target=target.model).to(dtype=dtype)
        return place(net, device)
    if is_dflash_dir(path):  # a DFlash drafter in the z-lab or speculators layout: reads the target's features
        return place(load_dflash(path, dtype=dtype), device)
    require_config(path, "drafter", ("config.json", "feature_drafter.json"))
    if needs_trust(path):  # remote-code checkpoints are diffusion LMs (LLaDA / Dream style) here
        require_trust(path, trust_remote_code, "trust_remote_code=True (CLI: --trust-remote-code)")
        return place(DiffusionLM.from_pretrained(path, trust_remote_code=True, target_vocab_size=vocab, dtype=dtype),
                     device)
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    mtype = str(getattr(config, "model_type", "")).lower()
    if record is not None and record.get("kind") == "diffusion-lm" or \
            (path / "zoo.json").exists() and "mask_token_id" in (path / "zoo.json").read_text() or \
            any(k in mtype for k in ("dream", "llada", "diffucoder")):
        return place(DiffusionLM.from_pretrained(path, target_vocab_size=vocab, dtype=dtype), device)
    kw = dict(device_map={"": device}) if device else {}
    return AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype, **kw).eval()


def target_dtype(target: Target) -> torch.dtype:
    """The floating dtype the target computes in (float32 when it does not say): what drafters loaded for it
    take."""
    dtype = getattr(target.model, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else DEFAULT_DTYPE


def as_device(value, what: str = "device") -> torch.device | None:
    """A torch device from a device or its name, checked to exist on this machine; None stays None."""
    if value is None:
        return None
    try:
        dev = torch.device(value)
    except (RuntimeError, TypeError):
        raise ValueError(f"{what} must be a torch device such as 'cpu', 'cuda' or 'cuda:1', got {value!r}") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"{what}={value!r}, but this machine has no CUDA device (torch.cuda.is_available() is "
                             "False): use 'cpu'")
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"{what}={value!r}, but this machine has {count} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{what}={value!r}, but MPS is not available on this machine")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"{what}={value!r}: mmspec runs on 'cpu', 'cuda' or 'mps'")
    return dev


def as_dtype(value) -> torch.dtype | None:
    """A floating torch dtype from a dtype or its name (``"bfloat16"``, ``"torch.float16"``, ``"fp16"``);
    None stays None."""
    if value is None or isinstance(value, torch.dtype) and value.is_floating_point:
        return value
    names = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16", "float": "float32"}
    name = str(value).removeprefix("torch.")
    dtype = getattr(torch, names.get(name, name), None) if isinstance(value, str) else None
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch dtype or its name (float32, float16, bfloat16), got "
                         f"{value!r}")
    return dtype


def place(obj, device):
    """``obj`` moved to ``device`` (a DiffusionLM moves its model); None leaves it where it is."""
    if device is None:
        return obj
    if isinstance(obj, DiffusionLM):
        obj.model.to(device)
    elif isinstance(obj, torch.nn.Module):
        obj.to(device)
    return obj


__all__ = ["RECORD", "NAMED_DRAFTERS", "DEFAULT_DTYPE", "as_device", "as_dtype", "target_dtype", "read_record", "zoo_name",
           "model_dir", "load_target", "load_drafter", "zoo_diffusion_lm", "place"]
