"""The one decoding loop: prefill -> repeat {propose -> verify -> commit -> observe}.

``SpeculativeGenerator(target, drafter).generate(...)`` returns the same sequences as
``target.generate(...)`` under greedy decoding (bit-exact) and the same distribution under sampling,
with left padding, per-row acceptance and EOS handling laid out like HF ``generate``.
"""

from __future__ import annotations

import inspect
import numbers
import threading
import time
import weakref
from dataclasses import dataclass, field

import torch

from .cache import SpecKVCache
from .compat import check_supported
from .drafters.autoregressive import AutoregressiveDrafter
from .drafters.base import Drafter, TargetContext
from .families import bidirectional_blocks, prompt_positions
from .kernels.dispatch import backend_for_device
from .state import DecodeState
from .verifiers.logits import SamplingConfig
from .verifiers.tree_forward import prefill_parents, text_config, tree_forward
from .verifiers.tree_verifier import TreeVerifier
from .vision import capture_image_embeds, check_image_tokens, image_token_id


@dataclass
class GenerationStats:
    new_tokens: int = 0  # generated tokens summed over rows
    target_forwards: int = 0  # target forward calls, prefill included
    row_forwards: int = 0  # (row, forward) pairs while the row was still generating
    accept_lengths: list[list[int]] = field(default_factory=list)  # [row][step]: tokens emitted per step
    draft_time: float = 0.0
    verify_time: float = 0.0  # target forwards, prefill included
    prefill_time: float = 0.0  # the prefill forward alone (its share of verify_time)
    total_time: float = 0.0
    # relaxed acceptance (LANTERN / LANTERN++) only:
    moved_mass: list[float] = field(default_factory=list)  # per step, the largest S_m moved onto one candidate
    # over the rows: TV(p, p̃) for that candidate alone, not a bound on the output when drafts share neighbours
    output_tv: list[float] = field(default_factory=list)  # with measure_output_tv: per step and generating row,
    # the exact TV between the step's first emitted token's distribution and the target's
    output_tv_skipped: int = 0  # (row, step) pairs whose first-token distribution has no closed form here
    output_tv_time: float = 0.0  # seconds spent computing output_tv, not counted in total_time
    kernel_backend: str = "torch"  # "triton" or "torch": which kernels ran (mmspec.kernels.dispatch)

    def output_tv_summary(self) -> dict:
        """Max and mean of the measured output TVs and how many (row, step) pairs they cover (None: not measured)."""
        tv = self.output_tv
        return {"max_output_tv": max(tv) if tv else None, "mean_output_tv": sum(tv) / len(tv) if tv else None,
                "output_tv_measured": len(tv), "output_tv_skipped": self.output_tv_skipped}

    @property
    def mean_accepted_tokens(self) -> float:
        """tau: new tokens per target forward per row (plain decoding = 1.0; bonus token included)."""
        return self.new_tokens / max(self.row_forwards, 1)

    def as_dict(self) -> dict:
        return {
            "new_tokens": self.new_tokens,
            "target_forwards": self.target_forwards,
            "mean_accepted_tokens": self.mean_accepted_tokens,
            "draft_time": self.draft_time,
            "verify_time": self.verify_time,
            "prefill_time": self.prefill_time,
            "total_time": self.total_time,
            "max_moved_mass": max(self.moved_mass) if self.moved_mass else None,
            **self.output_tv_summary(),
            "kernel_backend": self.kernel_backend,
        }


@dataclass
class GenerationOutput:
    sequences: torch.LongTensor  # [B, prompt_len + new], left padding kept, finished rows padded
    stats: GenerationStats


def _as_id_list(ids) -> list[int]:
    if ids is None:
        return []
    if isinstance(ids, torch.Tensor):
        return [int(i) for i in ids.flatten().tolist()]
    if isinstance(ids, int):
        return [ids]
    return [int(i) for i in ids]


# inputs of the target's forward that the decoding loop sets itself: never accepted from the caller
_SET_BY_LOOP = {"self", "input_ids", "attention_mask", "past_key_values", "position_ids", "cache_position",
                "use_cache", "inputs_embeds", "labels", "logits_to_keep", "output_hidden_states", "output_attentions",
                "return_dict", "kwargs"}
GENERATE_ARGS = ("input_ids", "attention_mask", "max_new_tokens", "do_sample", "temperature", "top_k", "top_p",
                 "eos_token_id", "generator", "pad_token_id")

# A drafter holds per-call state (its own cache, the tree it proposed): calls that share one are serialised.
_drafter_locks: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


def _lock_for(drafter) -> threading.Lock | None:
    with _locks_guard:
        try:
            return _drafter_locks.setdefault(drafter, threading.Lock())
        except TypeError:  # not weak-referenceable: one lock per generator instead
            return None


class SpeculativeGenerator:
    """Speculative decoding with any drafter on a stock HF causal LM target.

    Threads: ``generate`` may be called from several threads; calls that share a drafter (the same
    generator, or generators built on one drafter object) run one after another under a lock, since the
    drafter and the verifier keep per-call state. For parallel decoding give each thread its own generator
    with its own drafter."""

    def __init__(self, target_model, drafter: Drafter, max_cache_len: int | None = None, relaxation=None,
                 measure_output_tv: bool = False):
        """``relaxation``: None (lossless) or a :class:`~mmspec.verifiers.relaxed.Relaxation` (LANTERN /
        LANTERN++: lossy by design; the mass moved per candidate is reported in ``stats.moved_mass``).
        ``measure_output_tv`` (relaxed only): also compute the exact distortion of each step's first emitted token
        (``stats.output_tv``; costs O(V·k) per row and step, O(V²·k) for two sampled siblings; its time is kept
        out of ``total_time``).
        Models the loop cannot drive exactly (recurrent layers, ALiBi, ...) are refused here (``mmspec.compat``)."""
        check_supported(target_model, "target")
        if type(drafter) is AutoregressiveDrafter:  # a causal LM run through the same machinery (not feature heads)
            check_supported(drafter.model, "drafter")
        self.target = target_model.eval()
        self.drafter = drafter
        self.max_cache_len = max_cache_len
        self.relaxation = relaxation
        self.measure_output_tv = bool(measure_output_tv)
        self._prefill_accepted: set[str] | None = None
        self._lock = _lock_for(drafter) or threading.Lock()
        self.vocab_size = text_config(target_model).vocab_size
        if drafter.vocab_size is not None and drafter.vocab_size != self.vocab_size:
            raise ValueError(
                f"drafter vocabulary ({drafter.vocab_size} tokens) does not match the target's "
                f"({self.vocab_size} tokens): the drafter must share the target's tokenizer"
            )

    # ------------------------------------------------------------------ validation
    def _check_inputs(self, input_ids, attention_mask, max_new_tokens):
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
            raise ValueError("input_ids must be a LongTensor of shape [batch, prompt_len]")
        if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
            raise ValueError("empty prompt: input_ids has no tokens")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral):
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        if max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be > 0, got {max_new_tokens}")
        if (input_ids < 0).any() or (input_ids >= self.vocab_size).any():
            raise ValueError(f"input_ids contain ids outside the target vocabulary [0, {self.vocab_size})")
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

    @property
    def image_token_id(self) -> int | None:
        return image_token_id(self.target)

    def _prefill_names(self) -> set[str]:
        """Named inputs of the target's forward a caller may pass for the prefill (``pixel_values``, ...)."""
        if self._prefill_accepted is None:  # the forward's signature does not change: read it once
            params = inspect.signature(self.target.forward).parameters.values()
            self._prefill_accepted = {p.name for p in params
                                      if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - _SET_BY_LOOP
        return self._prefill_accepted

    def _check_prefill_inputs(self, prefill_inputs: dict) -> None:
        accepted = self._prefill_names()
        unknown = sorted(k for k in prefill_inputs if k not in accepted)
        if unknown:
            raise ValueError(f"generate got unknown keyword argument(s) {unknown}: it takes {list(GENERATE_ARGS)}"
                             f" and the target's prefill inputs {sorted(accepted) or '(none)'}")
        for k, v in prefill_inputs.items():
            if k.endswith("pixel_values") and v is not None and not isinstance(v, torch.Tensor):
                raise ValueError(f"{k} must be a torch.Tensor (the processor's output with return_tensors='pt'), "
                                 f"got {type(v).__name__}")

    def _check_images(self, input_ids: torch.LongTensor, prefill_inputs: dict) -> None:
        check_image_tokens(self.target, input_ids, prefill_inputs)

    def _cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        need = prompt_len + max_new_tokens + self.drafter.max_nodes + 1
        max_pos = getattr(text_config(self.target), "max_position_embeddings", None)
        if max_pos is not None and prompt_len + max_new_tokens > max_pos:
            raise ValueError(
                f"request longer than the model supports: prompt {prompt_len} + max_new_tokens "
                f"{max_new_tokens} > max_position_embeddings {max_pos}"
            )
        if self.max_cache_len is not None:
            if need > self.max_cache_len:
                raise ValueError(
                    f"request longer than the cache: prompt {prompt_len} + max_new_tokens {max_new_tokens} "
                    f"+ draft tree {self.drafter.max_nodes} needs {need} slots, max_cache_len is {self.max_cache_len}"
                )
            return self.max_cache_len
        return need

    # ------------------------------------------------------------------ the loop
    @torch.no_grad()
    def generate(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None,
                 max_new_tokens: int = 64, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, eos_token_id=None,
                 generator: torch.Generator | None = None, pad_token_id: int | None = None,
                 **prefill_inputs) -> GenerationOutput:
        """Speculative generation; same arguments and output layout as HF ``generate``.

        ``prefill_inputs`` (e.g. ``pixel_values`` for LLaVA-class targets) go to the prefill forward
        only; the prompt's image placeholder tokens stay in ``input_ids`` as HF lays them out. Any other
        keyword is an error. Concurrent calls sharing this generator's drafter wait for each other.
        """
        if not isinstance(input_ids, torch.Tensor):
            raise ValueError(f"input_ids must be a LongTensor of shape [batch, prompt_len], got {type(input_ids).__name__}")
        self._check_prefill_inputs(prefill_inputs)
        with self._lock:
            return self._generate(input_ids, attention_mask, max_new_tokens, do_sample, temperature, top_k, top_p,
                                  eos_token_id, generator, pad_token_id, prefill_inputs)

    def _generate(self, input_ids, attention_mask, max_new_tokens, do_sample, temperature, top_k, top_p, eos_token_id,
                  generator, pad_token_id, prefill_inputs) -> GenerationOutput:
        t_start = time.perf_counter()
        dev = self.target.device
        input_ids = input_ids.to(dev)
        mask = self._check_inputs(input_ids, attention_mask.to(dev) if attention_mask is not None else None,
                                  max_new_tokens)
        self._check_images(input_ids, prefill_inputs)
        sampling = SamplingConfig(do_sample, temperature, top_k, top_p)
        gen_cfg = getattr(self.target, "generation_config", None)
        eos = _as_id_list(eos_token_id if eos_token_id is not None else getattr(gen_cfg, "eos_token_id", None))
        if pad_token_id is None:
            pad_token_id = getattr(gen_cfg, "pad_token_id", None)
        if pad_token_id is None:
            pad_token_id = eos[0] if eos else 0
        eos_t = torch.tensor(eos, dtype=torch.long, device=dev)

        B, P = input_ids.shape
        cache_len = self._cache_len(P, max_new_tokens)
        cache = SpecKVCache.for_model(self.target, B, cache_len)
        stats = GenerationStats(accept_lengths=[[] for _ in range(B)], kernel_backend=backend_for_device(dev))
        verifier = TreeVerifier(sampling, self.relaxation, self.measure_output_tv)

        # prefill: the whole prompt, then the first token (which becomes the first tree root)
        t0 = time.perf_counter()
        feature_drafter = self.drafter.needs_target_hidden
        if feature_drafter and prefill_inputs.get("pixel_values_videos") is not None:
            raise ValueError("feature drafters read image embeddings only: videos (pixel_values_videos) are not "
                             "supported with them; use a text drafter or prompt lookup")
        # what the model would derive itself from the processor's outputs: M-RoPE positions, prefix blocks
        positions, cache.position_shift = prompt_positions(self.target, input_ids, mask, prefill_inputs)
        blocks = bidirectional_blocks(self.target, prefill_inputs, mask.bool())
        with capture_image_embeds(self.target, enabled=feature_drafter) as images:
            out = tree_forward(self.target, cache, input_ids, prefill_parents(mask), mask.bool(),
                               output_hidden_states=feature_drafter, position_ids=positions,
                               prefix_blocks=blocks, **prefill_inputs)
        cache.commit(torch.arange(P, device=dev).expand(B, P), torch.full((B,), P, device=dev))
        cache.starts = (P - mask.sum(1)).to(dev)
        first = sampling.pick(out.logits[:, -1].float(), generator)
        stats.prefill_time = time.perf_counter() - t0
        stats.verify_time += stats.prefill_time
        stats.target_forwards += 1
        stats.row_forwards += B

        capacity = P + max_new_tokens + self.drafter.max_nodes + 2
        tokens = torch.full((B, capacity), pad_token_id, dtype=torch.long, device=dev)
        tokens[:, :P] = input_ids
        tokens[:, P] = first
        state = DecodeState(tokens, torch.full((B,), P + 1, device=dev), cache.starts.clone(), P,
                            torch.ones(B, dtype=torch.bool, device=dev), sampling, generator)
        generated = torch.ones(B, dtype=torch.long, device=dev)
        if eos:
            state.active &= ~torch.isin(first, eos_t)
        state.active &= generated < max_new_tokens
        for b in range(B):
            stats.accept_lengths[b].append(1)

        if state.active.any():
            t0 = time.perf_counter()
            if feature_drafter:
                image_mask = input_ids == self.image_token_id if self.image_token_id is not None else None
                context = TargetContext(out.hidden_states[-1], input_ids, image_mask, images.embeds)
                self.drafter.begin(state, capacity, context=context)
            else:
                self.drafter.begin(state, capacity)
            stats.draft_time += time.perf_counter() - t0

        while state.active.any():
            t0 = time.perf_counter()
            tree = self.drafter.propose(state)
            t1 = time.perf_counter()
            check = verifier.verify(self.target, cache, tree, generator, output_hidden_states=feature_drafter)
            result = check.result
            t2 = time.perf_counter()
            stats.draft_time += t1 - t0
            stats.verify_time += t2 - t1
            stats.target_forwards += 1
            stats.row_forwards += int(state.active.sum())
            if result.moved_mass is not None:
                stats.moved_mass.append(float(result.moved_mass[state.active].max()))
            if result.output_tv is not None:
                tv = result.output_tv[state.active]
                stats.output_tv += [float(v) for v in tv[~tv.isnan()]]
                stats.output_tv_skipped += int(tv.isnan().sum())

            new, counts = result.emitted_tokens(tree)
            counts = torch.where(state.active, torch.minimum(counts, max_new_tokens - generated), 0)
            if eos:
                j = torch.arange(new.shape[1], device=dev)[None, :]
                hit = torch.isin(new, eos_t) & (j < counts[:, None])
                first_eos = torch.where(hit, j, new.shape[1]).min(1).values
                counts = torch.where(hit.any(1), first_eos + 1, counts)
                finished = hit.any(1)
            else:
                finished = torch.zeros_like(state.active)
            # keep in the target cache only what is emitted (root + accepted drafts, cut at EOS/budget)
            cache.commit(result.paths, torch.minimum(result.path_lengths, counts))
            for b in torch.nonzero(state.active).flatten().tolist():
                stats.accept_lengths[b].append(int(counts[b]))
            state.append(new, counts)
            generated += counts
            state.active &= ~finished & (generated < max_new_tokens)

            t0 = time.perf_counter()
            if state.active.any():
                if feature_drafter:
                    self.drafter.observe(state, tree, result, hidden=check.hidden_states[-1])
                else:
                    self.drafter.observe(state, tree, result)
            stats.draft_time += time.perf_counter() - t0

        stats.new_tokens = int(generated.sum())
        width = P + int(generated.max())
        sequences = state.tokens[:, :width].clone()
        j = torch.arange(width, device=dev)[None, :]
        sequences[j >= state.lengths[:, None]] = pad_token_id
        stats.output_tv_time = verifier.output_tv_time
        stats.verify_time -= stats.output_tv_time
        stats.total_time = time.perf_counter() - t_start - stats.output_tv_time
        return GenerationOutput(sequences, stats)
