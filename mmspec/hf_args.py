"""The name transformers gives the KV cache, in forwards and in model outputs: one place that knows it.

transformers 5.0 to (at least) 5.20 call it ``past_key_values`` everywhere; 5.24 renamed it ``cache``:
model forwards, decoder layers, attention modules and ``prepare_inputs_for_generation`` still accept
``past_key_values`` through ``@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")`` but warn
(``FutureWarning``) on every call, ``generate`` does the same until 6.0, and output classes keep a
``past_key_values`` property that logs a deprecation. mmspec passes the cache under the name the installed
version prefers, decided once here:

* :data:`CACHE_ARG` — the forward keyword of the installed transformers (``"cache"`` or ``"past_key_values"``);
* :func:`cache_kwargs` — ``{name: cache}`` for one module's forward: :data:`CACHE_ARG`, unless that module's class
  (remote code, a wrapper written for an older version) only names the other one; decided once per class;
* :data:`OUTPUT_CACHE_FIELD`, :func:`output_cache`, :func:`output_kwargs` — the same for ``ModelOutput`` fields;
* :func:`either_cache` — for mmspec's own wrappers, whose forwards accept both names (HF ``generate`` and the
  decoding loop pass whichever their version uses).
"""

from __future__ import annotations

import inspect
from dataclasses import fields

from transformers.generation.utils import GenerationMixin
from transformers.modeling_outputs import CausalLMOutputWithPast

LEGACY_CACHE_ARG = "past_key_values"
NEW_CACHE_ARG = "cache"


def _params(fn) -> dict:
    try:
        return dict(inspect.signature(fn).parameters)  # follows functools.wraps (deprecate_kwarg) to the real one
    except (TypeError, ValueError):
        return {}


def _detect_forward_name() -> str:
    # every stock model's inputs come from here, and it took the new name in the same release as the forwards
    return NEW_CACHE_ARG if NEW_CACHE_ARG in _params(GenerationMixin.prepare_inputs_for_generation) \
        else LEGACY_CACHE_ARG


def _detect_output_field() -> str:
    names = {f.name for f in fields(CausalLMOutputWithPast)}
    return NEW_CACHE_ARG if NEW_CACHE_ARG in names else LEGACY_CACHE_ARG


CACHE_ARG: str = _detect_forward_name()
OUTPUT_CACHE_FIELD: str = _detect_output_field()

_BY_CLASS: dict[type, str] = {}


def cache_arg(module) -> str:
    """The keyword under which ``module``'s forward takes the KV cache (looked up once per class)."""
    cls = type(module)
    name = _BY_CLASS.get(cls)
    if name is None:
        params = _params(getattr(cls, "forward", None) or module)
        if CACHE_ARG in params:
            name = CACHE_ARG
        elif LEGACY_CACHE_ARG in params:
            name = LEGACY_CACHE_ARG
        elif NEW_CACHE_ARG in params:
            name = NEW_CACHE_ARG
        else:
            name = CACHE_ARG  # only **kwargs: pass it on under the installed version's name
        _BY_CLASS[cls] = name
    return name


def cache_kwargs(module, cache) -> dict:
    """``{name: cache}`` to splat into ``module(...)``."""
    return {cache_arg(module): cache}


def output_cache(output):
    """The cache a ``ModelOutput`` returned, without touching a deprecated property."""
    return getattr(output, OUTPUT_CACHE_FIELD, None)


def output_kwargs(cache) -> dict:
    """``{field: cache}`` to build a ``ModelOutput`` (``CausalLMOutputWithPast(logits=..., **output_kwargs(c))``)."""
    return {OUTPUT_CACHE_FIELD: cache}


_KEEPS_LAST: dict[type, bool] = {}


def last_logits_kwargs(model) -> dict:
    """``{"logits_to_keep": 1}`` where ``model``'s forward takes it (stock HF causal LMs and VLMs do), else ``{}``:
    a prefill needs the last position's logits only, and the LM head over a long prompt (a VLM's hundreds of
    visual positions) is a few percent of a small model's whole call."""
    cls = type(model)
    keeps = _KEEPS_LAST.get(cls)
    if keeps is None:
        keeps = _KEEPS_LAST[cls] = "logits_to_keep" in _params(getattr(cls, "forward", None) or model)
    return {"logits_to_keep": 1} if keeps else {}


def either_cache(cache=None, past_key_values=None):
    """For forwards that accept both names: the one given (both given is an error, as in transformers)."""
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise ValueError("both `cache` and `past_key_values` were given; pass the KV cache once")
    return cache if cache is not None else past_key_values


__all__ = ["CACHE_ARG", "OUTPUT_CACHE_FIELD", "cache_arg", "cache_kwargs", "either_cache", "last_logits_kwargs",
           "output_cache", "output_kwargs"]
