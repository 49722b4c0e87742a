"""Tree attention: every tree node attends to its row's committed prefix and to its own ancestors.

The visibility pattern is the 4-D boolean mask ``SpecKVCache.prepare_append`` builds (``[B, 1, T, S]``:
committed slots ``starts[b] <= s < lengths[b]`` plus the ancestor mask over the pending block, optionally
cut by a sliding window), so one kernel serves tree verification, chunked prefill and drafters alike.

* :func:`tree_attention_reference`: torch SDPA with that explicit mask (GQA by repeating K/V heads);
* :func:`tree_attention`: the same contract, dispatched to Triton for CUDA tensors (``dispatch.py``);
* ``"mmspec_tree"``: both registered with ``transformers.AttentionInterface``, so a stock model switched
  with :func:`use_tree_attention` runs them inside its own attention modules. Masks it does not handle
  (none, additive floats, dropout in training) go to the stock SDPA function unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .dispatch import backend_for, triton_module

ATTENTION_NAME = "mmspec_tree"


def tree_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.BoolTensor,
                             scale: float | None = None) -> torch.Tensor:
    """``q`` [B, H, T, D], ``k`` [B, H_kv, S, D], ``v`` [B, H_kv, S, Dv], ``mask`` bool, broadcastable to
    [B, H, T, S] (True = visible), or the same additive (0 / −inf), or None (every query sees every key) ->
    [B, H, T, Dv]. A query that sees nothing gets zeros (a bool mask; an additive one gives NaN there, as SDPA
    does)."""
    group = q.shape[1] // k.shape[1]
    if group > 1 and q.device.type == "cpu":
        # the CPU kernel reads each query head's K/V group in place: bit for bit the repeated heads' result,
        # without copying the whole context's keys and values in every layer (what HF's SDPA path does whenever
        # there is a mask: 5% of a 29-node tree's verify forward on the zoo's code target)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    return F.scaled_dot_product_attention(q, repeat_kv(k, group), repeat_kv(v, group), attn_mask=mask, scale=scale)


def tree_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.BoolTensor,
                   scale: float | None = None) -> torch.Tensor:
    """:func:`tree_attention_reference`'s contract, run by Triton on CUDA (see ``dispatch.py``)."""
    if backend_for(q, k, v, mask) == "triton":
        return triton_module("triton_tree_attention").tree_attention(q, k, v, mask, scale)
    return tree_attention_reference(q, k, v, mask, scale)


def _handles(attention_mask, key: torch.Tensor, dropout: float, kwargs: dict) -> bool:
    """Inputs tree attention covers; anything else (no mask, an additive mask for Triton, biases, softcapping,
    attention sinks, dropout) is left to the stock SDPA function. Where the torch reference runs (off a GPU), an
    additive mask is covered too: :func:`~mmspec.verifiers.tree_forward.to_model_mask` makes the mask additive once
    per forward there, instead of SDPA converting the bool one in every layer."""
    if attention_mask is None or attention_mask.dim() != 4:
        return False
    if attention_mask.dtype != torch.bool and (backend_for(attention_mask) == "triton" or
                                                not attention_mask.is_floating_point()):
        return False
    if attention_mask.shape[-1] != key.shape[-2]:
        return False
    return dropout == 0.0 and all(kwargs.get(name) is None for name in ("softcap", "position_bias", "s_aux"))


def mmspec_tree_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                          **kwargs) -> tuple[torch.Tensor, None]:
    """The ``AttentionInterface`` function: returns ``([B, T, H, Dv], None)`` like ``sdpa_attention_forward``."""
    if not _handles(attention_mask, key, dropout, kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    out = tree_attention(query, key, value, attention_mask, scaling)
    return out.transpose(1, 2).contiguous(), None


# Stock models build their own masks from 2-D padding masks (e.g. in ``model.generate``) with the function
# registered under the same name: SDPA's boolean mask is what tree attention expects.
AttentionInterface.register(ATTENTION_NAME, mmspec_tree_attention)
AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)


def prefer_tree_attention(model):
    """Switch a model mmspec loads itself to ``"mmspec_tree"`` where that is faster and the same arithmetic: grouped
    K/V heads under SDPA. With a mask (every tree verification) HF's SDPA path copies each layer's keys and values
    per query head; this attention does not (on a CPU, :func:`tree_attention_reference`; on CUDA, the Triton
    kernel). A model whose class refuses registered attention functions keeps its own. Returns the model."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads, kv_heads = getattr(cfg, "num_attention_heads", None), getattr(cfg, "num_key_value_heads", None)
    if not heads or not kv_heads or kv_heads >= heads or getattr(cfg, "_attn_implementation", None) != "sdpa":
        return model
    try:
        model.set_attn_implementation(ATTENTION_NAME)
    except (ValueError, KeyError, TypeError, NotImplementedError):
        pass
    return model


def use_tree_attention(model):
    """Switch a stock HF model (and its sub-models) to the ``"mmspec_tree"`` attention; returns the model.

    Same effect as ``from_pretrained(..., attn_implementation="mmspec_tree")`` after ``import mmspec``.
    """
    model.set_attn_implementation(ATTENTION_NAME)
    return model
