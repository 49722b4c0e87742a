"""Per-family position ids and prompt masks: what a target's own forward would build from the processor's
outputs, rebuilt for mmspec's explicit ``position_ids`` and 4-D masks.

mmspec always passes positions and a mask itself (tree nodes need them), which switches off whatever the
model would have derived on its own. Two families derive more than "causal, positions 0..n-1":

* **M-RoPE** (Qwen2-VL, Qwen2.5-VL, ...: the inner model has ``get_rope_index``): image tokens get
  3-axis (time, height, width) positions and the text after an image continues from the image's largest
  position, so each row's text positions are shifted by its ``rope_deltas``. We ask the model's own
  ``get_rope_index`` for the prompt, keep the per-row delta, and give every later token (tree nodes
  included) ``text position + delta`` on all three axes, as the model does during ``generate``.
* **Bidirectional image blocks** (PaliGemma's image + prompt prefix, Gemma3's image tokens, marked by
  ``token_type_ids``): the prompt's attention is causal plus those blocks. We add the blocks to the
  prefill mask; later tokens are causal.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch



def _inner(model):
    return getattr(model, "model", model)


def uses_mrope(model) -> bool:
    """True for targets whose positions are 3-axis M-RoPE ids computed by the model (``get_rope_index``)."""
    return callable(getattr(_inner(model), "get_rope_index", None))


@dataclass
class PositionShift:
    """How a model's position ids differ from mmspec's text positions (real tokens before the node) for
    every token after the prompt: ``shift[b]`` added per row, repeated on ``axes`` axes (3 for M-RoPE)."""

    shift: torch.Tensor  # [B]
    axes: int = 1

    def apply(self, positions: torch.LongTensor) -> torch.LongTensor:
        shifted = positions + self.shift[:, None].to(positions)
        return shifted if self.axes == 1 else shifted.unsqueeze(0).expand(self.axes, -1, -1)


def prompt_positions(model, input_ids: torch.LongTensor, attention_mask: torch.LongTensor,
                     prefill_inputs: dict) -> tuple[torch.Tensor | None, PositionShift | None]:
    """``(position_ids of the prompt, shift for later tokens)``; ``(None, None)`` where mmspec's own text
    positions are what the model uses (most families, and an M-RoPE prompt without images or videos)."""
    if getattr(model.config, "model_type", "") == "paligemma":
        # PaliGemma counts positions from 1 (its forward and prepare_inputs_for_generation add 1)
        shift = PositionShift(torch.ones(input_ids.shape[0], dtype=torch.long, device=input_ids.device))
        text = (attention_mask.long().cumsum(1) - 1).clamp(min=0)
        return shift.apply(text), shift
    if not uses_mrope(model):
        return None, None
    if prefill_inputs.get("image_grid_thw") is None and prefill_inputs.get("video_grid_thw") is None:
        return None, None
    if prefill_inputs.get("mm_token_type_ids") is None:
        raise ValueError("this target places image tokens with 3-axis M-RoPE positions and needs the processor's "
                         "mm_token_type_ids next to image_grid_thw (pass every output of its processor)")
    rope_index = _inner(model).get_rope_index
    accepted = inspect.signature(rope_index).parameters
    kwargs = {k: v for k, v in prefill_inputs.items() if k in accepted and k not in ("input_ids", "attention_mask")}
    positions, deltas = rope_index(input_ids, attention_mask=attention_mask, **kwargs)
    return positions, PositionShift(deltas.reshape(-1).to(input_ids.device), axes=positions.shape[0])


def model_position_ids(positions: torch.LongTensor, shift: PositionShift | None) -> torch.LongTensor:
    """The ``position_ids`` a model takes for nodes at mmspec text positions ``positions`` ([B, T])."""
    return positions if shift is None else shift.apply(positions)


# ---------------------------------------------------------------------------------------------- prefix masks
def bidirectional_blocks(model, prefill_inputs: dict, valid: torch.BoolTensor) -> torch.BoolTensor | None:
    """``[B, P, P]``: pairs of prompt tokens that see each other although the later one comes second
    (the model's own prefix mask beyond causal), or None without ``token_type_ids`` (PaliGemma without them: what
    transformers does then, see :func:`_paligemma_untyped_prompt`). Other families that take them are refused:
    mmspec's 4-D mask would silently replace theirs."""
    token_type_ids = prefill_inputs.get("token_type_ids")
    model_type = getattr(model.config, "model_type", "")
    if token_type_ids is None:
        return _paligemma_untyped_prompt(model, valid) if model_type == "paligemma" else None
    tt = token_type_ids.to(valid.device)
    if model_type == "paligemma":
        # PaliGemma: the prefix (image + prompt, token type 0) attends bidirectionally; the suffix (type 1)
        # is causal
        prefix = (tt == 0) & valid
        return prefix[:, :, None] & prefix[:, None, :]
    if model_type == "gemma3":
        # Gemma3: each run of consecutive image tokens (token type 1) is one bidirectional block
        image = (tt == 1) & valid
        start = image & ~torch.nn.functional.pad(image, (1, 0))[:, :-1]
        block = torch.cumsum(start.long(), 1)
        return (block[:, :, None] == block[:, None, :]) & image[:, :, None] & image[:, None, :]
    raise ValueError(f"token_type_ids given to a {model_type or type(model).__name__} target: mmspec rebuilds the "
                     "prompt masks they describe only for PaliGemma and Gemma3 (its own mask replaces the model's)")


def _paligemma_untyped_prompt(model, valid: torch.BoolTensor) -> torch.BoolTensor | None:
    """The prompt mask HF (5.x) gives PaliGemma called without ``token_type_ids``, beyond causal.

    Its forward then adds no prefix block and asks ``create_causal_mask`` for a plain causal mask; but PaliGemma's
    language model is built with ``use_bidirectional_attention=True`` (the config's default), so its attention
    modules are not causal themselves (``is_causal=False``). Under SDPA (or ``"mmspec_tree"``, which falls back to
    it), a prefill whose batch has no padding gets no mask at all (``_ignore_causal_mask_sdpa``), and SDPA then
    attends bidirectionally over the whole prompt: the same as ``token_type_ids`` of 0 everywhere. With any padded
    row (the decision is for the whole batch), or eager / flex attention, the mask is materialised and causal.
    Sliding-window layers (PaliGemma 2) skip their mask only while the prompt is shorter than the window; a longer
    prompt would leave them causal and the full layers bidirectional, which mmspec does not rebuild: refused."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if not getattr(cfg, "use_bidirectional_attention", False):
        return None  # causal attention modules: no mask means SDPA's causal path
    impl = getattr(cfg, "_attn_implementation", None) or getattr(model.config, "_attn_implementation", None) or "sdpa"
    if impl not in ("sdpa", "mmspec_tree") or not bool(valid.all()):
        return None  # a materialised causal (+ padding) mask
    window = getattr(cfg, "sliding_window", None)
    sliding = "sliding_attention" in (getattr(cfg, "layer_types", None) or ["sliding_attention"])
    if window is not None and sliding and valid.shape[1] >= window:
        raise ValueError(
            f"PaliGemma called without token_type_ids on an unpadded prompt of {valid.shape[1]} tokens, not shorter "
            f"than its sliding window ({window}): transformers then attends bidirectionally over the whole prompt in "
            "the full-attention layers but causally in the sliding-window ones, a mask mmspec does not rebuild. Pass "
            "the processor's token_type_ids (0 on the image + prompt prefix, 1 on a suffix), which give PaliGemma's "
            "prefix attention")
    return valid[:, :, None] & valid[:, None, :]


def add_prefix_blocks(mask, blocks: torch.BoolTensor | None, layout=None):
    """The prefill's ``[B, 1, P, S]`` causal mask (prompt in its last P columns) with ``blocks`` opened.

    ``layout`` is the cache's :class:`~mmspec.layer_masks.AttentionLayout`. Every sliding-window mask (the
    ``"sliding_attention"`` entry of a hybrid model's ``{layer type: mask}`` dict such as Gemma3's, or the one
    mask of a model whose layers all slide) keeps a block inside the window (key > query − window), as the
    model's own builder composes it: AND(window, OR(causal, block)); full-attention masks get whole blocks."""
    if blocks is None:
        return mask
    P = blocks.shape[-1]
    window = getattr(layout, "window", None)
    i = torch.arange(P, device=blocks.device)
    windowed = blocks if window is None else blocks & (i[None, :] > i[:, None] - window)[None]

    def opened(m: torch.BoolTensor, b: torch.BoolTensor) -> torch.BoolTensor:
        m = m.clone()
        m[:, 0, :, -P:] |= b
        return m

    if not isinstance(mask, dict):  # one mask: sliding for every layer iff the layout has a window
        return opened(mask, windowed)
    return {kind: opened(m, windowed if kind == "sliding_attention" else blocks) for kind, m in mask.items()}


__all__ = ["uses_mrope", "PositionShift", "prompt_positions", "model_position_ids", "bidirectional_blocks",
           "add_prefix_blocks"]
