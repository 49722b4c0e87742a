"""A feature drafter's decoder layer run as a few tensor ops on the stock layer's own weights.

A feature drafter (:mod:`mmspec.drafters.feature_model`) is one ``LlamaDecoderLayer`` that runs five or six
times per speculative step, over one or two tokens each time. Through the stock module that costs about
1.8 ms on a 2-core CPU, most of it Python: module calls, keyword plumbing, the attention-interface lookup and
the rotary embedding recomputed from its frequencies. :func:`lean_layer_forward` computes the same function
(RMSNorm -> q/k/v -> rotary -> cache -> SDPA -> o_proj -> residual, RMSNorm -> SwiGLU MLP -> residual) with
the layer's parameters read directly, and :class:`RotaryTable` looks cos / sin up in a table built once.

This is for *drafters* only, where it is safe: a draft only has to be a good guess (the verifier decides
what is emitted, exactly, from the stock target's own forward). Its numbers agree with the stock layer's to
float rounding (``F.rms_norm`` instead of HF's explicit float32 RMSNorm; tested). Targets always run their
stock modules. :func:`lean_supported` says whether a layer's config is one this covers (no biases, SiLU MLP,
plain rotary, full attention); anything else keeps the stock module.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from ..kernels.int8_linear import Int8Weight, int8_fits, wants_int8
from ..kernels.tree_attention import tree_attention_reference
from ..layer_masks import attention_layout
from ..verifiers.tree_forward import draft_forward, model_dtype, to_model_mask

# rope types whose cos / sin depend on the position alone (a "dynamic" rope rescales with the sequence length)
_STATIC_ROPE = ("default", "linear", "llama3", "yarn")


def lean_supported(config) -> bool:
    """True for a Llama decoder-layer config :func:`lean_layer_forward` computes exactly as the stock layer."""
    rope = getattr(config, "rope_parameters", None) or {}
    return (not getattr(config, "attention_bias", False) and not getattr(config, "mlp_bias", False)
            and getattr(config, "hidden_act", "silu") == "silu"
            and rope.get("rope_type", "default") in _STATIC_ROPE
            and attention_layout(config).window is None  # one full-attention mask, as the cache builds it
            and getattr(config, "_attn_implementation", "sdpa") in ("sdpa", "eager"))


class RotaryTable:
    """cos / sin of a stock rotary embedding for positions 0 .. n-1, computed once and indexed per call
    (grown when a longer sequence comes; replaced whole, so concurrent readers never see a half-built one)."""

    def __init__(self, rotary_emb):
        self.rotary_emb = rotary_emb
        self._table: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(self, x: torch.Tensor, positions: torch.LongTensor, max_position: int):
        """(cos, sin), each [B, T, head_dim] in ``x``'s dtype, for ``positions`` [B, T] all below ``max_position``."""
        table = self._table
        if table is None or table[0].shape[0] < max_position or table[0].device != x.device \
                or table[0].dtype != x.dtype:
            n = max(max_position, 2 * table[0].shape[0] if table is not None else 0)
            ids = torch.arange(n, device=x.device)[None, :]
            cos, sin = self.rotary_emb(x[:1, :1], position_ids=ids)
            table = self._table = (cos[0], sin[0])
        return table[0][positions], table[1][positions]


def rms_norm(norm, h: torch.Tensor) -> torch.Tensor:
    """A stock RMSNorm module's function as one fused op."""
    return F.rms_norm(h, h.shape[-1:], norm.weight, norm.variance_epsilon)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoFormer rotary embedding in the half-split layout HF's Llama uses (x: [B, heads, T, D])."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def decoder_layer(layer, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys_values,
                  mask: torch.Tensor | None, extra: torch.Tensor | None = None,
                  int8: "Int8Layer | None" = None) -> torch.Tensor:
    """One Llama / Qwen3-style decoder layer over ``h`` [B, T, H] as tensor ops on its own weights (q / k RMSNorm when
    the attention module has them, as Qwen3's does); ``cos`` / ``sin`` [B, T, D]. ``keys_values(k, v)`` returns the
    keys / values the queries attend to given the new nodes' own (a cache's update, or a drafter's extra context in
    front of them). ``mask``: [B, 1, T, S] boolean (True = attend), or None for a single query that sees every key.
    ``extra`` [B, n, H]: rows that get keys and values only, projected in the same products as the nodes' own (a
    DFlash drafter's new context entries, already normed); ``cos`` / ``sin`` then cover [B, n + T] (extra first) and
    ``keys_values`` gets the n + T keys / values, extra's first. ``int8``: the layer's projections as int8 weights
    (:class:`Int8Layer`; a drafter on a CPU), q / k / v and gate / up each in one product."""
    attn, mlp = layer.self_attn, layer.mlp
    B, T, _ = h.shape
    D = attn.head_dim
    x = rms_norm(layer.input_layernorm, h)
    kv_in = x if extra is None else torch.cat([extra.to(x.dtype), x], 1)
    n = kv_in.shape[1] - T
    if int8 is None:
        q, k, v = F.linear(x, attn.q_proj.weight), F.linear(kv_in, attn.k_proj.weight), F.linear(kv_in, attn.v_proj.weight)
    else:  # (q over the extra rows too, then dropped: one product instead of three)
        q, k, v = int8.qkv.split(kv_in)
        q = q[:, n:]
    q, k = q.reshape(B, T, -1, D), k.reshape(B, n + T, -1, D)
    if getattr(attn, "q_norm", None) is not None:
        q, k = rms_norm(attn.q_norm, q), rms_norm(attn.k_norm, k)
    v = v.reshape(B, n + T, -1, D).transpose(1, 2)
    cos, sin = cos[:, None], sin[:, None]
    q, k = _rotate(q.transpose(1, 2), cos[:, :, n:], sin[:, :, n:]), _rotate(k.transpose(1, 2), cos, sin)
    k, v = keys_values(k, v)
    # SDPA with grouped K/V heads read in place on a CPU (repeated elsewhere): the tree attention's reference
    o = tree_attention_reference(q, k, v, mask, attn.scaling)
    o = o.transpose(1, 2).reshape(B, T, -1)
    h = h + (F.linear(o, attn.o_proj.weight) if int8 is None else int8.o(o))
    x = rms_norm(layer.post_attention_layernorm, h)
    if int8 is None:
        return h + F.linear(F.silu(F.linear(x, mlp.gate_proj.weight)) * F.linear(x, mlp.up_proj.weight),
                            mlp.down_proj.weight)
    gate, up = int8.gate_up.split(x)
    return h + int8.down(F.silu(gate) * up)


class Int8Layer:
    """A Llama / Qwen3-style decoder layer's projections as int8 weights (:mod:`mmspec.kernels.int8_linear`), quantised
    once: q / k / v stacked (one product over the rows that get keys), k / v stacked (a context's keys and values
    alone), o, gate / up stacked, down. For drafters on a CPU only (see that module)."""

    def __init__(self, layer):
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv = Int8Weight(attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight)
        self.kv = Int8Weight(attn.k_proj.weight, attn.v_proj.weight)
        self.o = Int8Weight(attn.o_proj.weight)
        self.gate_up = Int8Weight(mlp.gate_proj.weight, mlp.up_proj.weight)
        self.down = Int8Weight(mlp.down_proj.weight)

    @staticmethod
    def fits(layer) -> bool:
        """Whether every projection of ``layer`` (no biases) has rows the int8 kernel takes."""
        attn, mlp = layer.self_attn, layer.mlp
        mods = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        return all(m.bias is None and int8_fits(m.in_features) for m in mods)


class Int8Drafter:
    """A drafter's matrices as int8 weights (:mod:`mmspec.kernels.int8_linear`), quantised once: each decoder layer's
    projections (``layers``, :class:`Int8Layer`), its input map ``fc`` and the LM head it drafts through (``head``).
    :meth:`build` decides from the drafter's ``weights`` setting whether there is one (training the drafter afterwards
    does not reach them)."""

    def __init__(self, layers, fc: Int8Weight, head: Int8Weight):
        self.layers, self.fc, self.head = [Int8Layer(layer) for layer in layers], fc, head

    @classmethod
    def build(cls, weights: str, layers, fc, head_weight: torch.Tensor, head_bias: torch.Tensor | None, device,
              what: str, lean: bool = True) -> "Int8Drafter | None":
        """The int8 weights of ``layers``, the linear module ``fc`` and the head ``head_weight`` / ``head_bias`` when
        ``weights`` ("float", "int8", "auto") asks for them and they can run (:func:`wants_int8`; ``lean``: the layers
        run through :func:`decoder_layer`), else None."""
        fits = lean and all(Int8Layer.fits(layer) for layer in layers) and int8_fits(fc.in_features) \
            and int8_fits(head_weight.shape[1])
        nbytes = 4 * (sum(p.numel() for p in layers.parameters() if p.dim() == 2) + fc.weight.numel()
                      + head_weight.numel())
        if not wants_int8(weights, device, nbytes, fits, what):
            return None
        return cls(layers, Int8Weight(fc.weight, bias=fc.bias), Int8Weight(head_weight, bias=head_bias))


def lean_layer_forward(layer, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache,
                       mask: torch.Tensor | None, int8: "Int8Layer | None" = None) -> torch.Tensor:
    """One decoder layer over ``h`` [B, T, H]: K / V are written to ``cache`` (a SpecKVCache with the nodes
    already registered by ``prepare_append``) and the layer's output is returned. ``mask``: [B, 1, T, S]
    boolean (True = attend), or None for a single query that sees every key. ``int8``: its projections as int8
    weights."""
    return decoder_layer(layer, h, cos, sin, cache.layers[layer.self_attn.layer_idx].update, mask, int8=int8)


def lean_stack(layers, h: torch.Tensor, table: RotaryTable, positions: torch.LongTensor, cache,
               mask: torch.Tensor | None, int8: "list[Int8Layer] | None" = None) -> torch.Tensor:
    """``layers`` run in turn through :func:`lean_layer_forward` over ``h`` [B, T, H] at ``positions`` [B, T], cos /
    sin read from ``table`` (``int8``: each layer's int8 weights)."""
    cos, sin = table(h, positions, cache.max_len + 1)
    for i, layer in enumerate(layers):
        h = lean_layer_forward(layer, h, cos, sin, cache, mask, None if int8 is None else int8[i])
    return h


# a whole causal LM drafter run lean: the classes whose forward is embed -> layers -> final norm -> LM head with
# nothing else (no embedding scale, no logit soft-cap); Qwen2 / Mistral configs fail lean_supported (biases,
# sliding windows) in the zoo's and most real cases, and keep draft_forward
LEAN_LM_CLASSES = ("LlamaForCausalLM",)
# per drafter model, decided once: its rotary table when it runs lean, None when it keeps its stock modules
_LEAN_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def lean_lm_supported(model) -> bool:
    """True for a stock causal LM that :func:`drafter_logits` can run through :func:`lean_layer_forward`."""
    return (type(model).__name__ in LEAN_LM_CLASSES and lean_supported(model.config)
            and getattr(model.lm_head, "bias", None) is None)


def drafter_logits(model, cache, input_ids: torch.LongTensor, parents: torch.LongTensor, valid: torch.BoolTensor,
                   ancestors: torch.BoolTensor | None = None, depth: torch.LongTensor | None = None,
                   first: int = 0) -> torch.Tensor:
    """A drafter LM's logits [B, T - first, V] for new nodes ``input_ids`` [B, T] appended to its ``cache`` as
    pending entries (``parents`` / ``valid`` / ``ancestors`` / ``depth`` as in ``SpecKVCache.prepare_append``).
    The LM head runs on positions ``first`` onward only. A small drafter's step is mostly module plumbing on a
    CPU (a 2-layer 192-wide diffusion LM: 4.3 ms a block through the stock model, of which the math is a
    fraction), so a :func:`lean_lm_supported` model runs its own weights through :func:`lean_layer_forward`;
    any other model runs its stock modules (:func:`~mmspec.verifiers.tree_forward.draft_forward`)."""
    if model not in _LEAN_TABLES:
        _LEAN_TABLES[model] = RotaryTable(model.model.rotary_emb) if lean_lm_supported(model) else None
    table = _LEAN_TABLES[model]
    if table is None:
        return draft_forward(model, cache, input_ids, parents, valid, ancestors, depth, first)
    positions, mask = cache.prepare_append(parents, valid, ancestors, depth)
    mask = to_model_mask(mask, model, model_dtype(model))
    inner = model.model
    h = lean_stack(inner.layers[: model.config.num_hidden_layers], inner.embed_tokens(input_ids), table, positions,
                   cache, mask)
    return F.linear(rms_norm(inner.norm, h[:, first:]), model.lm_head.weight)


__all__ = ["lean_supported", "RotaryTable", "rms_norm", "decoder_layer", "Int8Layer", "Int8Drafter", "lean_layer_forward", "lean_stack", "LEAN_LM_CLASSES", "lean_lm_supported",
           "drafter_logits"]
