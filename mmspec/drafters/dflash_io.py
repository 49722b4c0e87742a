"""DFlash drafter directories: mmspec's own, and the two layouts serving engines load.

* **z-lab** (the reference, z-lab/dflash; what mmspec writes by default): ``config.json`` is a Qwen3 config of the
  draft layers plus ``block_size``, ``num_target_layers`` and ``dflash_config: {mask_token_id, target_layer_ids}``
  (0-based target layer indices, read as ``hidden_states[i + 1]``); ``model.safetensors`` holds ``layers.*``,
  ``fc``, ``hidden_norm`` and ``norm``, no embedding or LM head (the target's are used).
* **speculators** (vLLM's ``speculators``, ``speculators_model_type: "dflash"``): the draft layers' config under
  ``transformer_layer_config``, ``aux_hidden_state_layer_ids`` in ``hidden_states`` numbering (layer index + 1),
  ``mask_token_id`` and ``block_size`` at the top, ``speculators_config`` naming the verifier; the weights use the
  same names, and may carry frozen copies of the verifier's ``embed_tokens`` / ``lm_head`` (ignored here: the
  target's own are used, and a copy that differs from the target's is refused as a drafter of another model).
  ``sliding_window_non_causal`` is written true: vLLM 0.33 turns a false value into a causal block for every
  layer, which is not what the drafter was trained for.

:func:`load_dflash` reads any of them; :func:`save_dflash` writes either.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config

from .dflash_model import DFlashDraftModel

WEIGHTS = "model.safetensors"
_DROPPED = ("embed_tokens.weight", "lm_head.weight", "t2d", "d2t", "verifier_lm_head.weight", "verifier_norm.weight")


def is_dflash_dir(path: str | Path) -> bool:
    """True for a directory in either DFlash layout."""
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return False
    try:
        data = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return False
    return data.get("speculators_model_type") == "dflash" or "dflash_config" in data


def _zlab_config(data: dict) -> Qwen3Config:
    fields = {k: v for k, v in data.items() if k not in ("architectures", "auto_map", "model_type")}
    cfg = Qwen3Config(**fields)
    for key in ("block_size", "dflash_config", "num_target_layers"):
        if key in data:
            setattr(cfg, key, data[key])
    if getattr(cfg, "block_size", None) is None:
        raise ValueError("a z-lab DFlash config needs block_size")
    cfg.architectures = ["DFlashDraftModel"]
    return cfg


VISUAL_QUERIES_KEY = "mmspec_visual_queries"  # the speculators layout's field for mmspec's picture compression
# (engines that do not know it ignore the field, and refuse the extra ``queries`` weight: a drafter without visual
# queries is what they serve)
FEATURE_BRANCHES_KEY = "mmspec_feature_branches"  # its field for a guided image target's two-branch features (the
# wider ``fc`` is refused by engines that do not know it: they serve one feature per layer)

DRAFT_VOCAB_KEY = "mmspec_draft_vocab"  # its field for the ids the drafter drafts by default (engines that do not
# know it draft from the whole vocabulary, as any DFlash drafter can)


def _speculators_config(data: dict) -> Qwen3Config:
    layer = dict(data.get("transformer_layer_config") or {})
    if not layer:
        raise ValueError("a speculators DFlash config needs transformer_layer_config")
    if layer.get("model_type", "qwen3") != "qwen3":
        raise ValueError(f"speculators DFlash drafters with {layer['model_type']!r} layers are not supported "
                         "(Qwen3-style layers only)")
    aux = data.get("aux_hidden_state_layer_ids")
    if not aux:
        raise ValueError("a speculators DFlash config needs aux_hidden_state_layer_ids")
    if data.get("mask_token_id") is None:
        raise ValueError("a speculators DFlash config needs mask_token_id")
    if data.get("draft_vocab_size") not in (None, layer.get("vocab_size")):
        raise ValueError("reduced draft vocabularies (d2t / t2d) are not supported: the drafter must propose from "
                         "the target's whole vocabulary")
    cfg = Qwen3Config(**{k: v for k, v in layer.items() if k != "model_type"})
    cfg.block_size = int(data.get("block_size") or 8)
    cfg.dflash_config = {"mask_token_id": int(data["mask_token_id"]),
                         "target_layer_ids": [int(i) - 1 for i in aux]}  # hidden_states numbering -> layer index
    if data.get(VISUAL_QUERIES_KEY):
        cfg.dflash_config["visual_queries"] = int(data[VISUAL_QUERIES_KEY])
    if data.get(FEATURE_BRANCHES_KEY, 1) != 1:
        cfg.dflash_config["feature_branches"] = int(data[FEATURE_BRANCHES_KEY])
    if data.get(DRAFT_VOCAB_KEY):
        cfg.dflash_config["draft_vocab"] = [int(i) for i in data[DRAFT_VOCAB_KEY]]
    verifier = (data.get("speculators_config") or {}).get("verifier") or {}
    cfg.num_target_layers = data.get("num_target_layers")
    cfg.verifier = verifier
    cfg.architectures = ["DFlashDraftModel"]
    return cfg


def read_config(path: str | Path) -> tuple[Qwen3Config, str]:
    """(the drafter config, ``"zlab"`` or ``"speculators"``) of a DFlash directory."""
    data = json.loads((Path(path) / "config.json").read_text())
    if data.get("speculators_model_type") == "dflash":
        return _speculators_config(data), "speculators"
    if "dflash_config" in data:
        return _zlab_config(data), "zlab"
    raise ValueError(f"{path} is not a DFlash drafter directory (its config.json has neither dflash_config nor "
                     "speculators_model_type 'dflash')")


def load_dflash(path: str | Path, dtype: torch.dtype = torch.float32) -> DFlashDraftModel:
    """A DFlash drafter from a directory in either layout, on the CPU in ``dtype``. Weights the drafter does not use
    (the verifier's embeddings / LM head copies) are dropped; a missing or unexpected weight is an error."""
    path = Path(path)
    cfg, _ = read_config(path)
    net = DFlashDraftModel(cfg)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{path} holds no .safetensors weights")
    state = {}
    for f in files:
        state.update(load_file(str(f)))
    state = {k.removeprefix("model."): v for k, v in state.items()}
    state = {k: v for k, v in state.items() if k not in _DROPPED}
    missing, unexpected = net.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("inv_freq")]
    if missing or unexpected:
        raise ValueError(f"{path}: DFlash weights do not match the config (missing {missing[:5]}, unexpected "
                         f"{unexpected[:5]})")
    return net.to(dtype).eval()


def _weights(net: DFlashDraftModel, dtype: torch.dtype | None = None) -> dict:
    return {k: v.detach().to("cpu", dtype or v.dtype).contiguous() for k, v in net.state_dict().items()
            if "rotary_emb" not in k}


def save_dflash(net: DFlashDraftModel, path: str | Path, layout: str = "zlab", verifier: str | None = None,
                verifier_architectures: list[str] | None = None, dtype: torch.dtype | None = None) -> Path:
    """Write ``net`` to ``path`` in the ``"zlab"`` (default) or ``"speculators"`` layout (weights in ``dtype``, default
    the model's own)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = net.config
    save_file(_weights(net, dtype), str(path / WEIGHTS), metadata={"format": "pt"})
    base = cfg.to_dict()
    for key in ("dflash_config", "block_size", "num_target_layers", "verifier", "architectures"):
        base.pop(key, None)
    if layout == "zlab":
        data = {**base, "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": net.block_size,
                "num_target_layers": cfg.num_target_layers,
                "dflash_config": {"mask_token_id": net.mask_token_id, "target_layer_ids": net.target_layer_ids,
                                  **({"visual_queries": net.visual_queries} if net.visual_queries else {}),
                                  **({"feature_branches": net.feature_branches} if net.feature_branches != 1
                                     else {}),
                                  **({"draft_vocab": net.draft_vocab} if net.draft_vocab is not None else {})}}
    elif layout == "speculators":
        base["model_type"] = "qwen3"
        data = {
            "architectures": ["DFlashDraftModel"], "speculators_model_type": "dflash",
            "aux_hidden_state_layer_ids": net.hidden_entries,
            "block_size": net.block_size, "mask_token_id": net.mask_token_id,
            "draft_vocab_size": cfg.vocab_size, "num_target_layers": cfg.num_target_layers,
            "sliding_window_non_causal": True, "tie_word_embeddings": False,
            "transformer_layer_config": base,
            **({VISUAL_QUERIES_KEY: net.visual_queries} if net.visual_queries else {}),
            **({FEATURE_BRANCHES_KEY: net.feature_branches} if net.feature_branches != 1 else {}),
            **({DRAFT_VOCAB_KEY: net.draft_vocab} if net.draft_vocab is not None else {}),
            "speculators_config": {
                "algorithm": "dflash", "default_proposal_method": "greedy",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": net.block_size - 1,
                                      "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                "verifier": {"name_or_path": verifier, "architectures": verifier_architectures or []}},
        }
    else:
        raise ValueError(f"layout must be 'zlab' or 'speculators', got {layout!r}")
    (path / "config.json").write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    return path


__all__ = ["is_dflash_dir", "read_config", "load_dflash", "save_dflash"]
