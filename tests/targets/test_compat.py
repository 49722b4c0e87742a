"""Models the loop cannot drive exactly are refused when the generator is built, with a ValueError that names
the reason, never with a traceback from inside transformers (or a silently different output)."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, Gemma2Config, Gemma2ForCausalLM

from mmspec import SpeculativeGenerator
from mmspec.compat import check_supported, unsupported_reason
from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter

SMALL = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, n_embd=32, n_layer=2,
             n_head=4, d_model=32, n_layers=2, n_heads=4, intermediate_size=64)


def tiny(model_type, **overrides):
    """A tiny model of a family from its transformers config (on the meta device: refusals never run it)."""
    cfg = AutoConfig.for_model(model_type)
    for key, value in {**SMALL, **overrides}.items():
        if hasattr(cfg, key):
            setattr(cfg, key, value)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg)


@pytest.mark.parametrize("model_type,reason", [
    ("mamba", "state-space / recurrent layers"),
    ("mamba2", "state-space / recurrent layers"),
    ("jamba", "state-space / recurrent layers"),
    ("bamba", "state-space / recurrent layers"),
    ("falcon_h1", "state-space / recurrent layers"),
    ("rwkv", "state-space / recurrent layers"),
    ("bloom", "ALiBi"),
    ("mpt", "ALiBi"),
    ("llama4_text", "chunked_attention"),
])
def test_unsupported_families_are_refused_up_front(model_type, reason):
    model = tiny(model_type)
    with pytest.raises(ValueError, match=f"{type(model).__name__} cannot be used as the speculative-decoding "
                                         f"target: .*{reason}"):
        SpeculativeGenerator(model, PromptLookupDrafter(num_tokens=3))


def test_falcon_alibi_flag_decides():
    """Falcon is refused with alibi=True and accepted with its rotary default."""
    assert "ALiBi" in unsupported_reason(tiny("falcon", alibi=True))
    assert unsupported_reason(tiny("falcon")) is None


def test_an_unsupported_drafter_model_is_refused_too(tiny_pair):
    target, _ = tiny_pair
    with pytest.raises(ValueError, match="MambaForCausalLM cannot be used as the speculative-decoding drafter"):
        SpeculativeGenerator(target, AutoregressiveDrafter(tiny("mamba"), num_tokens=3))


def test_soft_capped_attention_needs_eager():
    """Gemma2's attention soft-capping runs under eager attention; under mmspec's tree attention (SDPA inside) it
    is refused with the fix named, before transformers' SDPA would raise mid-forward."""
    model = Gemma2ForCausalLM(Gemma2Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, head_dim=8)).eval()
    check_supported(model)  # eager by default
    model.set_attn_implementation("mmspec_tree")
    with pytest.raises(ValueError, match="attn_implementation='eager'"):
        SpeculativeGenerator(model, PromptLookupDrafter(num_tokens=3))


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "mistral", "gemma2", "gemma3_text", "qwen3", "gpt2",
                                        "gpt_neox", "opt"])
def test_supported_families_pass(model_type):
    assert unsupported_reason(tiny(model_type)) is None
