"""Which models the decoding loop can drive, decided before the first forward.

Tree verification needs three public doors of a model: explicit ``position_ids`` (tree nodes at the same
depth share a position), a 4-D attention mask (who sees whom inside the tree) and a KV cache made of
per-token keys and values (``SpecKVCache`` keeps, drops and moves single tokens). Models without one of
them would otherwise fail deep inside transformers, or worse, run and return other tokens than their own
``generate``. :func:`check_supported` names the reason instead:

* state-space / recurrent layers (Mamba, Mamba2, Jamba, Bamba, FalconH1, Zamba, RWKV, ...): a recurrent
  state summarises the whole past and cannot keep one branch of a tree and drop its siblings;
* ALiBi position biases (Bloom, MPT, Falcon with ``alibi=True``): the bias is computed from slot indices,
  not from ``position_ids``, so tree nodes and left padding get the wrong distances;
* other attention layer types than full and sliding-window (chunked attention, KV shared across layers);
* no ``position_ids`` argument in the model's forward;
* attention logit soft-capping (Gemma2) under SDPA or ``"mmspec_tree"`` attention, which cannot apply it.

Detection reads the config (``layer_types`` as transformers' cache code derives them, well-known attribute
names) and the forward's signature; a short list of model types is the last resort.
"""

from __future__ import annotations

import inspect

SUPPORTED_LAYER_TYPES = {"full_attention", "sliding_attention"}
RECURRENT_LAYER_TYPES = {"linear_attention", "conv", "hybrid", "hybrid_sliding", "mamba", "recurrent", "ssm"}
# config attributes that only state-space / recurrent architectures carry
RECURRENT_ATTRIBUTES = ("ssm_state_size", "mamba_d_state", "mamba_d_ssm", "mamba_expand", "attn_layer_period",
                        "attn_layer_indices", "time_step_rank", "lru_width", "block_types")
RECURRENT_MODEL_TYPES = {"rwkv", "xlstm", "mamba", "mamba2", "recurrent_gemma"}
ALIBI_MODEL_TYPES = {"bloom"}  # always ALiBi, with no config flag saying so


def _text_config(model):
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def _layer_types(cfg) -> list[str]:
    """Per-layer types as transformers' cache code sees them (inferred when the config lists none)."""
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs

        return list(get_layer_types_and_kwargs(cfg)[0])
    except Exception:  # an older or custom config without per-layer information
        return list(getattr(cfg, "layer_types", None) or [])


def _uses_alibi(cfg) -> bool:
    if getattr(cfg, "alibi", False) is True or getattr(cfg, "position_embedding_type", None) == "alibi":
        return True
    attn = getattr(cfg, "attn_config", None)  # MPT
    alibi = attn.get("alibi") if isinstance(attn, dict) else getattr(attn, "alibi", None)
    return alibi is True or str(getattr(cfg, "model_type", "")).lower() in ALIBI_MODEL_TYPES


def unsupported_reason(model) -> str | None:
    """Why mmspec cannot drive ``model`` exactly, or None when it can."""
    cfg = _text_config(model)
    mtype = str(getattr(cfg, "model_type", "") or "").lower()
    kinds = set(_layer_types(cfg))
    recurrent = sorted(kinds & RECURRENT_LAYER_TYPES)
    if (recurrent or mtype in RECURRENT_MODEL_TYPES
            or any(getattr(cfg, name, None) is not None for name in RECURRENT_ATTRIBUTES)):
        found = f" (layer types {recurrent})" if recurrent else ""
        return (f"it has state-space / recurrent layers{found}: their state summarises the whole past and cannot "
                "keep one branch of a draft tree and drop the others")
    if _uses_alibi(cfg):
        return ("it uses ALiBi position biases, computed from cache slots rather than position_ids, so draft-tree "
                "nodes and left-padded rows would get wrong distances")
    other = sorted(kinds - SUPPORTED_LAYER_TYPES)
    if other:
        return (f"it has attention layers of type {other}; mmspec supports full and sliding-window attention "
                "layers only")
    forward = getattr(model, "forward", None)
    if forward is not None and type(model).__module__.startswith("transformers."):
        params = inspect.signature(forward).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        if "position_ids" not in params and not takes_any:
            return "its forward takes no position_ids, which draft-tree nodes need (siblings share a position)"
    impl = getattr(cfg, "_attn_implementation", None) or getattr(model.config, "_attn_implementation", None)
    if getattr(cfg, "attn_logit_softcapping", None) is not None and impl in ("sdpa", "mmspec_tree"):
        return (f"its attention logits are soft-capped (attn_logit_softcapping), which {impl!r} attention cannot "
                "apply: load it with attn_implementation='eager'")
    return None


def check_supported(model, role: str = "target") -> None:
    """Raise a ValueError naming why ``model`` cannot be used as ``role``; return quietly when it can."""
    reason = unsupported_reason(model)
    if reason is not None:
        raise ValueError(f"{type(model).__name__} cannot be used as the speculative-decoding {role}: {reason}")


__all__ = ["check_supported", "unsupported_reason"]
