"""Janus image generation through mmspec's loop: the stock ``JanusForConditionalGeneration``, unmodified.

Janus generates images with its own embedding table for codes (``prepare_embeddings_for_image_generation``)
and its own head (``model.generation_head``), next to the text ones. :class:`JanusImageLM` presents that as
an ordinary causal LM over one joint vocabulary — ids below the text vocabulary are prompt tokens, id
``text_vocab + c`` is image code c — by calling the stock class's public modules in order (no modeling code
copied): embeddings, ``model.language_model`` (a Llama body taking our 4-D mask, positions and cache), then
the generation head. Text columns of its logits are −inf, so only codes can be drafted or accepted.

Classifier-free guidance is Janus's own rule: the unconditional row is the prompt with every token except
BOS and ``<begin_of_image>`` replaced by padding (:func:`janus_uncond`), run through :class:`CFGModel`.
``JanusImageGenerator`` then runs plain AR, lossless speculative decoding, LANTERN or LANTERN++ with the
codebook's latent neighbourhoods, and decodes with the stock ``decode_image_tokens``.
"""

from __future__ import annotations

import copy
import time

import torch
from torch import nn
from transformers.modeling_outputs import CausalLMOutputWithPast

from .frontend import ImageOutput, call_generator, hf_sampling_rng
from .generator import SpeculativeGenerator, check_streamer
from .guidance import DEFAULT_CFG_SCALE, CFGModel
from .hf_args import cache_kwargs, either_cache, output_cache, output_kwargs
from .options import check_image_call
from .registry import check_image_method, image_drafter, resolve_bound
from .tree import tree_label
from .verifiers.relaxed import Relaxation


class JanusImageLM(nn.Module):
    """A ``JanusForConditionalGeneration`` seen as a causal LM over ``text vocabulary + VQ codes``."""

    def __init__(self, janus):
        super().__init__()
        if type(janus).__name__ != "JanusForConditionalGeneration":
            raise ValueError(f"JanusImageLM wraps a JanusForConditionalGeneration, got {type(janus).__name__}")
        self.janus = janus.eval()
        self.text_vocab = janus.config.text_config.vocab_size
        self.codebook_size = janus.config.vq_config.num_embeddings
        self.num_image_tokens = janus.config.vision_config.num_image_tokens
        cfg = copy.deepcopy(janus.config.text_config)
        cfg.vocab_size = self.text_vocab + self.codebook_size  # what the engine sees
        self._config = cfg

    @property
    def config(self):
        return self._config

    @property
    def generation_config(self):
        return self.janus.generation_config

    @property
    def device(self):
        return self.janus.device

    @property
    def dtype(self):
        return self.janus.dtype

    def code_ids(self) -> torch.LongTensor:
        return torch.arange(self.text_vocab, self.text_vocab + self.codebook_size)

    def codebook(self) -> torch.Tensor:
        """The VQ codebook [n_codes, d] the latent neighbourhoods are computed from."""
        return self.janus.model.vqmodel.quantize.embedding.weight.detach()

    def embed(self, input_ids: torch.LongTensor) -> torch.Tensor:
        is_code = input_ids >= self.text_vocab
        text = self.janus.get_input_embeddings()(input_ids.masked_fill(is_code, 0))
        if not is_code.any():
            return text
        codes = self.janus.prepare_embeddings_for_image_generation((input_ids - self.text_vocab).clamp(min=0))
        return torch.where(is_code[..., None], codes.to(text.dtype), text)

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, use_cache=True,
                output_hidden_states=False, past_key_values=None, **kwargs):
        # the KV cache comes as `cache` or `past_key_values`, whichever the caller's transformers uses
        cache = either_cache(cache, past_key_values)
        lm = self.janus.model.language_model
        out = lm(inputs_embeds=self.embed(input_ids), attention_mask=attention_mask, position_ids=position_ids,
                 use_cache=use_cache, output_hidden_states=output_hidden_states, **cache_kwargs(lm, cache))
        code_logits = self.janus.model.generation_head(out.last_hidden_state)
        logits = code_logits.new_full((*code_logits.shape[:2], self.text_vocab + self.codebook_size), float("-inf"))
        logits[..., self.text_vocab:] = code_logits
        return CausalLMOutputWithPast(logits=logits, hidden_states=out.hidden_states if output_hidden_states else None,
                                      **output_kwargs(output_cache(out)))


def janus_uncond(bos_id: int, boi_id: int, pad_id: int):
    """Janus's unconditional prompt: keep BOS and ``<begin_of_image>``, pad every other real token."""

    def rule(input_ids: torch.LongTensor, real: torch.BoolTensor) -> torch.LongTensor:
        keep = (input_ids == bos_id) | (input_ids == boi_id) | ~real
        return input_ids.masked_fill(~keep, pad_id)

    return rule


def fill_boi_token_id(janus, processor=None) -> None:
    """Make sure ``generation_config.generation_kwargs['boi_token_id']`` (what the stock image generate and
    :class:`JanusImageGenerator` read) is set: a checkpoint whose generation config was saved as derived from the
    model config loses ``generation_kwargs`` on loading. Taken, when missing, from ``generation_config.boi_token_id``
    (as transformers' conversion script writes it) or the processor's ``<begin_of_image>`` token."""
    gc = janus.generation_config
    kwargs = dict(getattr(gc, "generation_kwargs", None) or {})
    if kwargs.get("boi_token_id") is not None:
        return
    boi = getattr(gc, "boi_token_id", None)
    tok = getattr(processor, "tokenizer", processor)
    if boi is None and getattr(tok, "boi_token", None) is not None:
        boi = tok.convert_tokens_to_ids(tok.boi_token)
    if boi is not None:
        gc.generation_kwargs = {**kwargs, "boi_token_id": int(boi)}


def _special_ids(janus) -> tuple[int, int, int]:
    gc = janus.generation_config
    boi = (getattr(gc, "generation_kwargs", None) or {}).get("boi_token_id")
    ids = (gc.bos_token_id, boi, gc.pad_token_id)
    if any(i is None for i in ids):
        raise ValueError("Janus image generation needs generation_config.bos_token_id, pad_token_id and "
                         "generation_kwargs['boi_token_id'] (the <begin_of_image> token)")
    return ids


def _as_ids(value, name: str) -> torch.LongTensor:
    """Token ids as a 2-D long tensor: a tensor, an array or a list (of lists) of ints; 1-D is one prompt."""
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"{name} must be token ids (a [batch, length] tensor or a list of lists of ints), "
                             f"got a {type(value).__name__} ({err})") from None
    if value.dtype == torch.bool and name == "attention_mask":
        value = value.long()
    if value.dtype == torch.bool or value.is_floating_point() or value.is_complex():
        raise ValueError(f"{name} must hold integers, got {value.dtype}")
    return (value[None] if value.dim() == 1 else value).long()


def janus_prompt_ids(processor, prompts, boi_id: int, chat_template: bool = True):
    """Text prompts as Janus text-to-image inputs: ``(input_ids, attention_mask)``, left-padded, each row ending
    with ``<begin_of_image>`` (``boi_id``).

    As in Hugging Face's Janus example: each prompt becomes one user turn of the processor's chat template (when
    it has one and ``chat_template``), then ``processor(text=..., generation_mode="image")`` appends the
    ``<begin_of_image>`` token. A bare tokenizer is tokenized as it is, with ``boi_id`` appended."""
    if processor is None:
        raise ValueError("text prompts need the Janus processor (or tokenizer) saved with the checkpoint; "
                         "give prompt ids (input_ids ending with <begin_of_image>) otherwise")
    texts = [prompts] if isinstance(prompts, str) else list(prompts)
    if not texts or not all(isinstance(t, str) and t.strip() for t in texts):
        raise ValueError("give one or more non-empty text prompts")
    tok = getattr(processor, "tokenizer", processor)
    if chat_template and (getattr(processor, "chat_template", None) or getattr(tok, "chat_template", None)):
        texts = [processor.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": t}]}],
                                               add_generation_prompt=True, tokenize=False) for t in texts]
    if getattr(processor, "image_start_token", None) is not None:  # a JanusProcessor: it appends <begin_of_image>
        enc = processor(text=texts, generation_mode="image", padding=True, return_tensors="pt")
        ids, mask = enc["input_ids"], enc["attention_mask"]
    else:
        enc = tok(texts, padding=True, padding_side="left", return_tensors="pt")
        ids, mask = enc["input_ids"], enc["attention_mask"]
        ids = torch.cat([ids, ids.new_full((ids.shape[0], 1), boi_id)], 1)
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], 1)
    return ids, mask


class JanusImageGenerator:
    """Text-to-image with a Janus target and a (smaller) Janus drafter sharing its codebook. ``method`` is the
    default; ``generate(method=...)`` switches it per call."""

    def __init__(self, target, drafter=None, method: str = "lantern++"):
        check_image_method(method)
        self.method = method
        self.target = JanusImageLM(target)
        self.draft_lm = JanusImageLM(drafter) if drafter is not None else None
        if self.draft_lm is not None:
            t, d = self.target, self.draft_lm
            if (t.text_vocab, t.codebook_size) != (d.text_vocab, d.codebook_size):
                raise ValueError(f"drafter vocabulary ({d.text_vocab} text + {d.codebook_size} codes) differs from "
                                 f"the target's ({t.text_vocab} + {t.codebook_size})")
        self.bos, self.boi, self.pad = _special_ids(target)

    def _guided(self, lm: JanusImageLM, cfg_scale: float) -> CFGModel:
        return CFGModel(lm, cfg_scale, None, lm.code_ids(), uncond=janus_uncond(self.bos, self.boi, self.pad))

    def _check_prompts(self, input_ids, attention_mask):
        """``(input_ids, attention_mask)`` as ``[batch, length]`` tensors on the target's device: a 1-D tensor or a
        list of ids is one prompt, a list of lists several; ids must be integers."""
        input_ids, attention_mask = _as_ids(input_ids, "input_ids"), \
            (None if attention_mask is None else _as_ids(attention_mask, "attention_mask"))
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise ValueError("input_ids must be [batch, prompt length] with a non-empty prompt")
        if attention_mask is not None and attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, input_ids "
                             f"{tuple(input_ids.shape)}")
        last = input_ids[:, -1]
        if attention_mask is not None and not bool(attention_mask[:, -1].all()):
            raise ValueError("pad prompts on the left (the last column must be real tokens)")
        if not bool((last == self.boi).all()):
            raise ValueError(f"every prompt must end with <begin_of_image> (id {self.boi})")
        dev = self.target.device
        return input_ids.to(dev), None if attention_mask is None else attention_mask.to(dev)

    @torch.no_grad()
    def generate(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None,
                 method: str | None = None, cfg_scale: float = DEFAULT_CFG_SCALE, do_sample: bool = False,
                 temperature: float = 1.0, lantern_k: int | None = None, delta: float | None = None,
                 lam: float | None = None, tree=None, num_tokens: int | None = None,
                 generator: torch.Generator | None = None, seed: int | None = None, decode: bool = True,
                 measure_output_tv: bool = False, streamer=None) -> ImageOutput:
        """``tree``: as the image generator's (``"chain"``, ``"static"``, ``"dynamic"``, a TreeTemplate or its
        label); None is LANTERN++'s static tree for ``lantern++`` and a chain of ``num_tokens`` (default 4)
        otherwise. Drafting settings given to ``ar`` are refused; under greedy (``do_sample=False``) the temperature
        is ignored, as HF does, and recorded as None. ``streamer`` (the drafting methods; one prompt per call): HF's
        streamer protocol, fed the prompt and then each step's committed image tokens (code + the text vocabulary
        size); the stock generate behind ``ar`` streams nothing in image mode, so it is refused there."""
        method = method or self.method
        check_image_method(method)
        check_image_call(dict(cfg_scale=cfg_scale, do_sample=do_sample, temperature=temperature, tree=tree,
                              num_tokens=num_tokens, seed=seed, decode=decode,
                              measure_output_tv=measure_output_tv or None), method,
                         where="JanusImageGenerator.generate")
        if do_sample and temperature <= 0:
            raise ValueError(f"temperature must be > 0 when sampling (do_sample=True), got {temperature}")
        temperature = temperature if do_sample else None  # greedy: not applied
        num_tokens = 4 if num_tokens is None else num_tokens
        input_ids, attention_mask = self._check_prompts(input_ids, attention_mask)
        check_streamer(streamer, input_ids)
        if streamer is not None and method == "ar":
            raise ValueError("method 'ar' runs the stock Janus generate, which takes no streamer in image mode; "
                             "stream with a drafting method (spec, lantern, lantern++)")
        rng = call_generator(generator, seed, self.target.device)
        t0 = time.perf_counter()
        stats, bound = None, {}
        if method == "ar":  # the stock generate: the baseline, and the reference the tests compare with
            if cfg_scale <= 1 or (attention_mask is not None and not bool(attention_mask.all())):
                raise ValueError("method 'ar' runs the stock Janus generate, which needs cfg_scale > 1 and "
                                 "unpadded prompts")
            with hf_sampling_rng(rng):
                codes = self.target.janus.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                                   generation_mode="image", do_sample=do_sample,
                                                   **({"temperature": temperature} if do_sample else {}),
                                                   guidance_scale=cfg_scale)
        else:
            if self.draft_lm is None:
                raise ValueError(f"method {method!r} needs a drafter Janus model")
            bound = resolve_bound(method, delta, lam, lantern_k)
            relax = Relaxation.from_codebook(self.target.codebook(), self.target.config.vocab_size,
                                             code_offset=self.target.text_vocab, **bound) if bound else None
            if tree is None:
                tree = "static" if method == "lantern++" else "chain"
            drafter = image_drafter(self._guided(self.draft_lm, cfg_scale), tree=tree, num_tokens=num_tokens)
            engine = SpeculativeGenerator(self._guided(self.target, cfg_scale), drafter, relaxation=relax,
                                          measure_output_tv=measure_output_tv)
            out = engine.generate(input_ids, attention_mask=attention_mask, max_new_tokens=self.target.num_image_tokens,
                                  do_sample=do_sample, temperature=temperature, eos_token_id=[], generator=rng,
                                  streamer=streamer)
            codes, stats = out.sequences[:, input_ids.shape[1]:] - self.target.text_vocab, out.stats
        seconds = time.perf_counter() - t0 - (stats.output_tv_time if stats is not None else 0.0)
        # the stock decode is channels-last [B, H, W, 3]; ImageOutput's pictures are [B, 3, H, W] in [-1, 1]
        images = self.target.janus.decode_image_tokens(codes).permute(0, 3, 1, 2) if decode else None
        config = dict(method=method, cfg_scale=cfg_scale, do_sample=do_sample, temperature=temperature, seed=seed)
        if method != "ar":
            config.update(tree=str(tree_label(tree)), **bound)
        return ImageOutput(images, codes, stats, seconds, config)


__all__ = ["JanusImageLM", "JanusImageGenerator", "fill_boi_token_id", "janus_prompt_ids", "janus_uncond"]
