"""One ``generate`` call's arguments, checked before any forward runs: errors name what is wrong."""

from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass

import torch

from .options import check_sampling
from .verifiers.logits import SamplingConfig
from .verifiers.tree_forward import text_config
from .vision import check_image_tokens

# inputs of the target's forward that the decoding loop sets itself: never accepted from the caller
# (the KV cache is `cache` in newer transformers, `past_key_values` before: see mmspec.hf_args)
_SET_BY_LOOP = {"self", "input_ids", "attention_mask", "cache", "past_key_values", "position_ids",
                "cache_position", "use_cache", "inputs_embeds", "labels", "logits_to_keep", "output_hidden_states",
                "output_attentions", "return_dict", "kwargs"}
GENERATE_ARGS = ("input_ids", "attention_mask", "max_new_tokens", "do_sample", "temperature", "top_k", "top_p",
                 "eos_token_id", "generator", "pad_token_id")


@dataclass
class Request:
    """A checked ``generate`` call, on the target's device."""

    input_ids: torch.LongTensor  # [B, P]
    attention_mask: torch.LongTensor  # [B, P] left-padded 0s then 1s
    max_new_tokens: int
    sampling: SamplingConfig
    eos: torch.LongTensor  # [n] ids that end a row (empty: rows run to max_new_tokens)
    pad_token_id: int
    generator: torch.Generator | None
    prefill_inputs: dict  # named inputs of the target's forward for the prefill (pixel_values, ...)


def prefill_names(target) -> set[str]:
    """Named inputs of the target's forward a caller may pass for the prefill (``pixel_values``, ...)."""
    params = inspect.signature(target.forward).parameters.values()
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - _SET_BY_LOOP


def check_prefill_inputs(accepted: set[str], prefill_inputs: dict) -> None:
    unknown = sorted(k for k in prefill_inputs if k not in accepted)
    if unknown:
        raise ValueError(f"generate got unknown keyword argument(s) {unknown}: it takes {list(GENERATE_ARGS)}"
                         f" and the target's prefill inputs {sorted(accepted) or '(none)'}")
    for k, v in prefill_inputs.items():
        if k.endswith("pixel_values") and v is not None and not isinstance(v, torch.Tensor):
            raise ValueError(f"{k} must be a torch.Tensor (the processor's output with return_tensors='pt'), "
                             f"got {type(v).__name__}")


def check_prompt(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, max_new_tokens,
                 vocab_size: int) -> torch.LongTensor:
    """The prompt's shape, ids and budget; returns the attention mask as 0/1 longs (all ones when None)."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError("input_ids must be a LongTensor of shape [batch, prompt_len]")
    if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
        raise ValueError("empty prompt: input_ids has no tokens")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral):
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be > 0, got {max_new_tokens}")
    if (input_ids < 0).any() or (input_ids >= vocab_size).any():
        raise ValueError(f"input_ids contain ids outside the target vocabulary [0, {vocab_size})")
    if attention_mask is None:
        return torch.ones_like(input_ids)
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask shape {tuple(attention_mask.shape)} does not match input_ids "
            f"shape {tuple(input_ids.shape)}"
        )
    if not ((attention_mask == 0) | (attention_mask == 1)).all():
        raise ValueError("attention_mask must contain only 0 and 1")
    mask = attention_mask.long()
    if (mask.sum(1) == 0).any():
        raise ValueError("empty prompt: a row of attention_mask has no real token")
    if (mask[:, 1:] < mask[:, :-1]).any():
        raise ValueError(
            "attention_mask must be left-padded (0s then 1s) like HF generate for decoder-only models; "
            "right padding or holes are not supported"
        )
    return mask


def _as_id_list(ids) -> list[int]:
    if ids is None:
        return []
    if isinstance(ids, torch.Tensor):
        return [int(i) for i in ids.flatten().tolist()]
    if isinstance(ids, int):
        return [ids]
    return [int(i) for i in ids]


def make_request(target, input_ids, attention_mask, max_new_tokens, do_sample, temperature, top_k, top_p,
                 eos_token_id, generator, pad_token_id, prefill_inputs, coupling: str = "rejection") -> Request:
    """Check a call's arguments and fill in the target's defaults (EOS and padding ids from its
    ``generation_config``, like HF ``generate``)."""
    dev = target.device
    input_ids = input_ids.to(dev)
    mask = check_prompt(input_ids, attention_mask.to(dev) if attention_mask is not None else None,
                        max_new_tokens, text_config(target).vocab_size)
    check_image_tokens(target, input_ids, prefill_inputs)
    sampling = SamplingConfig(**check_sampling(do_sample, temperature, top_k, top_p),  # greedy: settings ignored
                              coupling=coupling)
    gen_cfg = getattr(target, "generation_config", None)
    eos = _as_id_list(eos_token_id if eos_token_id is not None else getattr(gen_cfg, "eos_token_id", None))
    if pad_token_id is None:
        pad_token_id = getattr(gen_cfg, "pad_token_id", None)
    if pad_token_id is None:
        pad_token_id = eos[0] if eos else 0
    return Request(input_ids, mask, max_new_tokens, sampling, torch.tensor(eos, dtype=torch.long, device=dev),
                   pad_token_id, generator, prefill_inputs)


def check_positions(target, prompt_len: int, max_new_tokens: int) -> None:
    """The prompt and the budget fit the model's positions: every method, plain decoding included, refuses a
    request that would run past them (HF's ``generate`` would run on, into positions the model never learned)."""
    max_pos = getattr(text_config(target), "max_position_embeddings", None)
    if max_pos is not None and prompt_len + max_new_tokens > max_pos:
        raise ValueError(
            f"request longer than the model supports: prompt {prompt_len} + max_new_tokens "
            f"{max_new_tokens} > max_position_embeddings {max_pos}"
        )


def cache_length(target, prompt_len: int, max_new_tokens: int, max_nodes: int, max_cache_len: int | None) -> int:
    """Slots the target's cache needs for this call (the prompt, the budget and one draft tree), checked against
    the model's positions and the caller's ``max_cache_len``."""
    need = prompt_len + max_new_tokens + max_nodes + 1
    check_positions(target, prompt_len, max_new_tokens)
    if max_cache_len is not None:
        if need > max_cache_len:
            raise ValueError(
                f"request longer than the cache: prompt {prompt_len} + max_new_tokens {max_new_tokens} "
                f"+ draft tree {max_nodes} needs {need} slots, max_cache_len is {max_cache_len}"
            )
        return max_cache_len
    return need


__all__ = ["Request", "GENERATE_ARGS", "make_request", "prefill_names", "check_prefill_inputs", "check_prompt",
           "cache_length", "check_positions"]
