"""One forward of a stock HF model over a block of tree nodes, through the public doors only.

Positions go in as ``position_ids`` (committed length + depth), the tree structure as a 4-D mask
(boolean for SDPA, additive float for eager attention), and K/V through ``SpecKVCache``. No modeling
file is copied or patched.
"""

from __future__ import annotations

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast

from ..cache import SpecKVCache
from ..families import add_prefix_blocks, model_position_ids
from ..hf_args import cache_kwargs
from ..kernels.dispatch import backend_for
from ..kernels.tree_attention import ATTENTION_NAME
from ..layer_masks import layer_mask, map_masks


def attn_implementation(model) -> str:
    cfg = model.config
    impl = getattr(cfg, "_attn_implementation", None) or "sdpa"
    return impl


def sees_all_without_mask(model) -> bool:
    """Whether the model's attention reads no mask as "every key is visible" (SDPA, mmspec's tree attention, flash
    attention); eager attention builds a causal mask of its own instead."""
    impl = attn_implementation(model)
    return impl in ("sdpa", ATTENTION_NAME) or impl.startswith("flash")


def to_model_mask(mask, model, dtype: torch.dtype | None = None):
    """SDPA, eager attention and mmspec's tree attention off a GPU get the bool mask additive (in ``dtype``, default
    the model's); the tree attention's Triton kernel takes it as is. ``mask`` may be a ``{layer type: mask}`` dict
    (``mmspec.layer_masks``): each mask is converted. A single query that sees every key needs no mask at all
    (:func:`hides_nothing`; None from the cache says so already): None is returned."""
    if mask is None:
        return None
    impl = attn_implementation(model)
    if impl in ("sdpa", ATTENTION_NAME) and hides_nothing(mask):
        return None
    if impl == ATTENTION_NAME and backend_for(*(mask.values() if isinstance(mask, dict) else [mask])) == "triton":
        return mask  # the Triton kernel reads the bool mask
    dtype = dtype if dtype is not None else model_dtype(model)
    # SDPA turns a bool mask into an additive one (0 / −inf, two `where`s) inside every layer's call: done once
    # here, with the same values, the attention is bit for bit the same (a 150-token prefill of a 16-layer model
    # paid 0.7 ms for the per-layer conversions on a CPU). Eager attention adds the dtype's minimum, as HF's own
    # masks do.
    fill = float("-inf") if impl in ("sdpa", ATTENTION_NAME) else torch.finfo(dtype).min

    def additive(m):
        return torch.full(m.shape, fill, dtype=dtype, device=m.device).masked_fill(m, 0.0)

    return map_masks(mask, additive)


def hides_nothing(mask) -> bool:
    """True for the mask of one query per row that sees every key (a decode step with no padding and nothing
    stale in the cache). Given no mask, transformers' SDPA path attends to all keys with grouped K/V heads
    (``enable_gqa``) instead of the masked path, and the bool mask's own cost is gone: on a 2-core CPU a
    16-layer decode step is 0.2 ms faster. Several queries always keep their mask (None would make SDPA
    causal, which a tree or a diffusion block is not)."""
    return isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.shape[-2] == 1 and bool(mask.all())


def text_config(model):
    """The language model's config (a multimodal config's text part, or the config itself)."""
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def model_dtype(model) -> torch.dtype:
    return model.dtype if hasattr(model, "dtype") else next(model.parameters()).dtype


def tree_forward(model, cache: SpecKVCache, input_ids: torch.LongTensor | None, parents: torch.LongTensor,
                 valid: torch.BoolTensor, inputs_embeds: torch.Tensor | None = None,
                 output_hidden_states: bool = False, ancestors: torch.BoolTensor | None = None,
                 depth: torch.LongTensor | None = None, position_ids: torch.LongTensor | None = None,
                 prefix_blocks: torch.BoolTensor | None = None, direct: bool = False, **model_kwargs):
    """Append the nodes ``input_ids`` ([B, T]) as pending entries of ``cache`` and return the model output.

    ``parents`` index pending nodes (-1 = attached to the committed prefix). The caller commits or
    discards the pending nodes afterwards. ``position_ids`` (the prefill of an M-RoPE target) replaces the
    cache's text positions; ``prefix_blocks`` ([B, T, T]) opens bidirectional blocks among the new nodes
    (a prompt's image / prefix block, see :mod:`mmspec.families`). ``direct``: for a model of
    ``DIRECT_CLASSES`` (or a LLaVA-class wrapper) with no other inputs, run its modules in order (:func:`direct_logits`, the same
    arithmetic without the model-level wrappers); only ``.logits`` (and ``.hidden_states`` when asked) is set on
    the output then.
    """
    positions, mask = cache.prepare_append(parents, valid, ancestors, depth)
    if mask is None and not sees_all_without_mask(model):
        # a lone row's plain step needs no mask, but an attention that builds its own from the cache's sizes when
        # given none (eager) would size it for a cache that does not yet hold the step: it gets an explicit one
        mask = torch.ones(parents.shape[0], 1, parents.shape[1], cache.get_seq_length(), dtype=torch.bool,
                          device=parents.device)
    mask = to_model_mask(add_prefix_blocks(mask, prefix_blocks, cache.layout), model)
    if position_ids is None:
        position_ids = model_position_ids(positions, cache.position_shift)
    if direct and inputs_embeds is None and not model_kwargs and direct_parts(model) is not None:
        if output_hidden_states:  # (a drafter reading the target's features: DFlash, EAGLE)
            logits, hidden = direct_logits(model, input_ids, mask, position_ids, cache, return_hidden="all")
            return CausalLMOutputWithPast(logits=logits, hidden_states=hidden)
        return CausalLMOutputWithPast(logits=direct_logits(model, input_ids, mask, position_ids, cache))
    return model(
        input_ids=input_ids,
        inputs_embeds=inputs_embeds,
        attention_mask=mask,
        position_ids=position_ids,
        use_cache=True,
        output_hidden_states=output_hidden_states,
        **cache_kwargs(model, cache),
        **model_kwargs,
    )


# Decoder-only classes whose forward is exactly: embed -> rotary -> layers -> norm -> lm_head (no embedding
# scaling, no per-layer mask types beyond what our 4-D mask already encodes)
DIRECT_CLASSES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")
# LLaVA-class wrappers: with no pictures in the step (every decode step) their forward is the embedding, their
# language model (one of the stacks above) and their LM head
DIRECT_WRAPPERS = ("LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration")
DIRECT_STACKS = ("LlamaModel", "Qwen2Model", "MistralModel")


def direct_parts(model):
    """(decoder stack, LM head) of a model whose forward :func:`direct_logits` can replace, else None."""
    name = type(model).__name__
    if name in DIRECT_CLASSES:
        return model.model, model.lm_head
    if name in DIRECT_WRAPPERS:
        stack = getattr(model.model, "language_model", None)
        if type(stack).__name__ in DIRECT_STACKS:
            return stack, model.lm_head
    return None


def direct_logits(model, input_ids: torch.LongTensor, mask: torch.Tensor | None, positions: torch.LongTensor,
                  cache, return_hidden: bool = False, first: int = 0):
    """The logits of a stock model of ``DIRECT_CLASSES`` (or a ``DIRECT_WRAPPERS`` one, given tokens only)
    computed by calling its own modules in order (embedding, rotary embedding, decoder layers, final norm, LM
    head) with our mask, positions and cache; None for any other model. The model-level wrappers (output
    capture, mask construction) cost a quarter of a small model's forward on CPU: drafters run several times
    a step, and the verifier once. ``return_hidden``: also the last hidden state after the final norm (what
    ``hidden_states[-1]`` holds), as ``(logits, hidden)``, or with ``"all"`` the whole ``hidden_states`` tuple a
    stock forward returns (embedding output, each layer's, the last one normed); ``first``: the norm and LM head
    run on positions ``first`` onward only. ``mask`` None: every query sees every cached key (one query per row)."""
    parts = direct_parts(model)
    if parts is None:
        return None
    inner, head = parts
    config = inner.config
    h = inner.embed_tokens(input_ids)
    every = [h] if return_hidden == "all" else None
    rope = inner.rotary_emb(h, position_ids=positions)
    for i, layer in enumerate(inner.layers[: config.num_hidden_layers]):
        h = layer(h, attention_mask=layer_mask(mask, config, i), position_ids=positions,
                  position_embeddings=rope, **cache_kwargs(layer, cache))
        if every is not None:
            every.append(h)
    h = inner.norm(h[:, first:])
    if every is not None:
        every[-1] = h
        return head(h), tuple(every)
    return (head(h), h) if return_hidden else head(h)


def draft_forward(model, cache: SpecKVCache, input_ids: torch.LongTensor, parents: torch.LongTensor,
                  valid: torch.BoolTensor, ancestors: torch.BoolTensor | None = None,
                  depth: torch.LongTensor | None = None, first: int = 0) -> torch.Tensor:
    """``tree_forward(...).logits[:, first:]`` for drafters, through :func:`direct_logits` where the class
    allows; the LM head runs on positions ``first`` onward only."""
    if direct_parts(model) is not None:
        positions, mask = cache.prepare_append(parents, valid, ancestors, depth)
        return direct_logits(model, input_ids, to_model_mask(mask, model), positions, cache, first=first)
    keep = input_ids.shape[1] - first
    logits = tree_forward(model, cache, input_ids, parents, valid, ancestors=ancestors, depth=depth,
                          logits_to_keep=keep).logits
    return logits[:, -keep:]  # a wrapper (CFGModel's guided pass, remote code) may return every position


def chain_parents(valid: torch.BoolTensor) -> torch.LongTensor:
    """Parents for a left-aligned ragged chain: node t hangs off node t-1 (node 0 off the prefix)."""
    B, T = valid.shape
    return (torch.arange(T, device=valid.device) - 1).expand(B, T).contiguous()


def prefill_parents(attention_mask: torch.LongTensor) -> torch.LongTensor:
    """Parents for a left-padded prompt: padding and the first real token hang off the (empty) prefix."""
    B, T = attention_mask.shape
    parents = (torch.arange(T, device=attention_mask.device) - 1).expand(B, T).clone()
    first_real = (attention_mask == 0).sum(1)
    col = torch.arange(T, device=attention_mask.device)[None, :]
    parents[col <= first_real[:, None]] = -1
    return parents


@torch.no_grad()
def prefill_cache(model, state, max_len: int) -> SpecKVCache:
    """A drafter's own cache holding the (left-padded) prompt of ``state``, committed."""
    B, P = state.batch_size, state.prompt_length
    dev = model.device
    cache = SpecKVCache.for_model(model, B, max_len)
    prompt = state.tokens[:, :P].to(dev)
    valid = torch.arange(P, device=dev)[None, :] >= state.starts[:, None].to(dev)
    tree_forward(model, cache, prompt, prefill_parents(valid.long()), valid)
    cache.commit(torch.arange(P, device=dev).expand(B, P), torch.full((B,), P, device=dev))
    cache.starts = state.starts.to(dev).clone()
    return cache
