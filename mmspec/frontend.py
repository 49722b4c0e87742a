"""The vocabulary every front-end shares (``mmspec.pipeline``'s routes, ``VLMGenerator``, ``ImageGenerator``,
``JanusImageGenerator``): one output shape per kind of result, one way to seed a call, one way to switch EOS
off. README's "One vocabulary" table is the user's view of this module."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from .generator import GenerationStats

DEFAULT_SEED = 0  # a call given neither generator nor seed draws from this seed: reruns repeat


@dataclass
class TextOutput:
    """What the text and VLM front-ends return."""
    texts: list[str] | None  # the decoded continuations (None: no tokenizer to decode with)
    sequences: torch.LongTensor  # [B, prompt + new] ids, left padding kept, like HF generate
    stats: GenerationStats | None  # tau, accept lengths, times; None for plain decoding
    seconds: float  # wall time of the call's decoding
    config: dict = field(default_factory=dict)  # the method and settings the call applied
    new_tokens: int | None = None  # generated tokens summed over rows, EOS included (plain decoding too)


def generated_count(new: torch.LongTensor, eos: int | list[int] | None) -> int:
    """Tokens a row generated in a plain ``generate`` output's new columns: up to and including its first EOS
    (the padding HF writes after it does not count), or every column when it never stopped."""
    if eos is None or new.shape[1] == 0:
        return int(new.numel())
    hit = torch.isin(new, torch.tensor([eos] if isinstance(eos, int) else list(eos), device=new.device))
    j = torch.arange(new.shape[1], device=new.device)[None, :]
    first = torch.where(hit, j, new.shape[1]).min(1).values
    return int(torch.where(hit.any(1), first + 1, new.shape[1]).sum())


@dataclass
class ImageOutput:
    """What the image and Janus front-ends return."""
    images: torch.Tensor | None  # [B, 3, H, W] in [-1, 1]; None when not decoded
    codes: torch.LongTensor  # [B, codes per picture] codebook indices
    stats: GenerationStats | None  # tau, moved mass, output TV, times; None for plain AR
    seconds: float  # wall time of the call's decoding (output-TV measurement left out)
    config: dict = field(default_factory=dict)  # the method and settings the call applied
    new_tokens: int | None = None  # generated codes summed over pictures

    def __post_init__(self):
        if self.new_tokens is None:
            self.new_tokens = int(self.codes.numel())


def call_generator(generator: torch.Generator | None, seed: int | None, device) -> torch.Generator:
    """The generator a call draws from: ``generator`` as given, else a new one on ``device`` seeded with
    ``seed`` (:data:`DEFAULT_SEED` when neither is given). Giving both is an error."""
    if generator is not None:
        if seed is not None:
            raise ValueError("give generator= or seed=, not both (seed= only builds a generator)")
        return generator
    return torch.Generator(device=device).manual_seed(DEFAULT_SEED if seed is None else int(seed))


@contextmanager
def hf_sampling_rng(generator: torch.Generator, advance: bool = True):
    """Hugging Face ``generate`` samples from torch's global RNG and takes no generator: for the call, seed that
    RNG with a seed drawn from ``generator`` (so consecutive calls with one generator advance it and draw anew,
    as every mmspec method does), and restore the caller's RNG state afterwards. ``advance=False`` seeds it from
    ``generator.initial_seed()`` instead, leaving the generator as it is (every call draws alike: the bench's
    side-by-side timing)."""
    if advance:
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    else:
        seed = generator.initial_seed()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        yield


def eos_token_id(stop_at_eos: bool, tokenizer, model) -> int | list[int] | None:
    """The EOS id(s) a call stops at: the tokenizer's, else the model's generation config; None when
    ``stop_at_eos`` is False or neither has one."""
    if not stop_at_eos:
        return None
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    return eos


def engine_eos(eos: int | list[int] | None) -> int | list[int]:
    """``eos`` as ``SpeculativeGenerator.generate`` takes it: ``[]`` switches EOS off (None would mean the
    model's default)."""
    return [] if eos is None else eos


def refuse_hf_coupling(coupling: str, method: str) -> None:
    """Plain decoding through the model's own ``generate`` samples by multinomial draws: it has no Gumbel
    coupling to apply, so a call asking for one is pointed at ``mmspec-plain``."""
    if coupling != "rejection":
        raise ValueError(f"method {method!r} is the model's own generate, which samples without the Gumbel coupling: "
                         "use method='mmspec-plain' (mmspec's loop without drafts) for plain sampling under it")


__all__ = ["TextOutput", "ImageOutput", "generated_count", "DEFAULT_SEED", "call_generator", "hf_sampling_rng", "eos_token_id",
           "refuse_hf_coupling",
           "engine_eos"]
