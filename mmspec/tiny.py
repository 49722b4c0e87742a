"""Tiny random configurations of stock HF architectures, for tests, the smoke demo and the bench."""

from __future__ import annotations

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

ARCHITECTURES = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "mistral": (MistralConfig, MistralForCausalLM),
}


def tiny_config(arch: str = "llama", vocab_size: int = 128, hidden_size: int = 64, num_layers: int = 2,
                num_heads: int = 4, num_kv_heads: int = 2, max_positions: int = 512, **overrides):
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; choose from {sorted(ARCHITECTURES)}")
    config_cls, _ = ARCHITECTURES[arch]
    kwargs = dict(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_positions, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        tie_word_embeddings=False,
    )
    if arch == "mistral":
        kwargs["sliding_window"] = None
    kwargs.update(overrides)
    return config_cls(**kwargs)


def tiny_model(arch: str = "llama", seed: int = 0, dtype: torch.dtype = torch.float32, **config_kwargs):
    """A randomly initialised stock model (eval mode, SDPA attention)."""
    _, model_cls = ARCHITECTURES[arch]
    torch.manual_seed(seed)
    model = model_cls(tiny_config(arch, **config_kwargs)).to(dtype)
    model.config._attn_implementation = model.config._attn_implementation or "sdpa"
    return model.eval()
