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


# Janus (image generation head): token ids of the tiny configuration
JANUS_BOS, JANUS_EOS, JANUS_PAD, JANUS_BOI, JANUS_IMAGE = 1, 2, 0, 3, 4


def tiny_janus(seed: int = 0, num_layers: int = 2, grid: int = 4, codebook_size: int = 64):
    """A tiny random ``JanusForConditionalGeneration`` (about 0.3M parameters) that generates ``grid²`` codes.

    The sizes that must agree: the VQ projection / code-embedding widths and the vision projection equal the
    LM's hidden size; ``base_channels`` is a multiple of 32 (GroupNorm); the decoder needs
    ``(image_size // patch_size)²`` codes."""
    from transformers import JanusConfig, JanusForConditionalGeneration, JanusVisionConfig, JanusVQVAEConfig

    hidden = 32
    text = LlamaConfig(vocab_size=128, hidden_size=hidden, intermediate_size=64, num_hidden_layers=num_layers,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                       bos_token_id=JANUS_BOS, pad_token_id=JANUS_PAD, eos_token_id=JANUS_EOS)
    vision = JanusVisionConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, image_size=grid * 4,
                               patch_size=4, projection_dim=hidden, depth=2, num_image_tokens=grid * grid)
    vq = JanusVQVAEConfig(embed_dim=8, num_embeddings=codebook_size, latent_channels=32, base_channels=32,
                          channel_multiplier=[1, 1], num_res_blocks=1, projection_dim=hidden, num_hidden_layers=2,
                          image_token_embed_dim=hidden)
    torch.manual_seed(seed)
    cfg = JanusConfig(text_config=text, vision_config=vision, vq_config=vq, image_token_id=JANUS_IMAGE)
    cfg._attn_implementation = "sdpa"
    model = JanusForConditionalGeneration(cfg).eval()
    gc = model.generation_config  # what generate(generation_mode="image") reads
    gc.bos_token_id, gc.pad_token_id, gc.eos_token_id = JANUS_BOS, JANUS_PAD, JANUS_EOS
    gc.generation_kwargs = {"boi_token_id": JANUS_BOI}
    return model
