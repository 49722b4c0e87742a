"""Masked diffusion LMs as drafters: one forward over ``prefix + k [MASK] slots`` gives every slot's
next-token distribution (a token lattice), which DEER and DiffuSpec turn into drafts.

Two conventions exist among real checkpoints (docs/design.md, "DiffuSpec"):

* ``"llada"`` — the logits at a mask position predict that position (LLaDA, MDLM);
* ``"dream"`` — position i predicts position i+1, like an AR model (Dream, DiffuCoder, open-dCoder, and
  the zoo's ``code-dlm``, which starts from the AR target's weights).

How much context the drafter re-reads each step is the cost knob (``context``):

* ``"full"`` — re-encode the whole prefix plus the slots every step (exact for a bidirectional model,
  cost grows with the prefix);
* ``"window"`` — re-encode only the last ``window`` tokens plus the slots;
* ``"cache"`` — keep the prefix's K/V in a :class:`~mmspec.cache.SpecKVCache`; each step feeds only the
  newly accepted tokens (attending causally to the cached prefix and to each other) and the slots
  (attending to everything). An approximation for a bidirectional model — the prefix never sees what
  came after it — which costs one short forward per step; the target verifies anyway.

Stock architectures (``LlamaForCausalLM`` & co.) run bidirectionally through an explicit 4-D attention
mask (``attention="mask"``). Remote-code checkpoints (LLaDA, Dream) are bidirectional by themselves and
take plain ``input_ids`` (``attention="native"``, rows encoded one by one, ``context`` "full"/"window").
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

from ..cache import SpecKVCache
from ..model_dirs import require_config
from ..state import DecodeState
from ..verifiers.tree_forward import model_dtype, prefill_cache, to_model_mask
from .lean_layer import drafter_logits
from .remote_code import explain_remote_failure, modeling_files, require_trust

CONVENTIONS = ("llada", "dream")
CONTEXTS = ("cache", "window", "full")


def model_vocab_size(model) -> int:
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(cfg.vocab_size)


def check_vocabularies(drafter_vocab: int, target_vocab: int, drafter_tokenizer=None, target_tokenizer=None) -> int:
    """Ids must mean the same tokens in both models. Returns how many leading ids the drafter may propose.

    A drafter vocabulary that is a superset (e.g. Dream's over Qwen's) has its extra ids masked out; a
    smaller one, or tokenizers that disagree on a shared id, is an error."""
    if drafter_vocab < target_vocab:
        raise ValueError(f"drafter vocabulary ({drafter_vocab} ids) is smaller than the target's ({target_vocab}): "
                         "a diffusion drafter must share the target's token ids")
    if drafter_tokenizer is not None and target_tokenizer is not None:
        dv, tv = drafter_tokenizer.get_vocab(), target_tokenizer.get_vocab()
        inv_d = {i: t for t, i in dv.items()}
        bad = [(i, t, inv_d.get(i)) for t, i in tv.items() if i < target_vocab and inv_d.get(i) != t]
        if bad:
            i, t, d = bad[0]
            raise ValueError(f"drafter and target tokenizers disagree on {len(bad)} ids (e.g. id {i}: target {t!r}, "
                             f"drafter {d!r}); a diffusion drafter must share the target's token ids")
    return target_vocab


class DiffusionLM:
    """A masked diffusion LM behind one call: ``slot_logprobs(state, k)`` -> ``[B, k, V]`` log-probs."""

    def __init__(self, model, mask_token_id: int, convention: str = "dream", context: str = "cache",
                 window: int = 96, attention: str = "mask", target_vocab_size: int | None = None,
                 max_positions: int | None = None):
        if convention not in CONVENTIONS:
            raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
        if context not in CONTEXTS:
            raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
        if attention not in ("mask", "native"):
            raise ValueError(f"attention must be 'mask' or 'native', got {attention!r}")
        if attention == "native" and context == "cache":
            raise ValueError("context='cache' needs attention='mask' (a stock architecture with our KV cache)")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.model = model
        self.mask_token_id = int(mask_token_id)
        self.convention, self.context, self.window, self.attention = convention, context, int(window), attention
        full_vocab = model_vocab_size(model)
        if not 0 <= self.mask_token_id < full_vocab:
            raise ValueError(f"mask_token_id {mask_token_id} is outside the drafter's vocabulary ({full_vocab})")
        self.vocab_size = full_vocab if target_vocab_size is None else check_vocabularies(full_vocab,
                                                                                          target_vocab_size)
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.max_positions = max_positions or getattr(cfg, "max_position_embeddings", None)

    @classmethod
    def from_pretrained(cls, path, convention: str | None = None, mask_token_id: int | None = None,
                        trust_remote_code: bool = False, dtype=None, **kwargs) -> "DiffusionLM":
        """A user checkpoint: LLaDA- or Dream-style models ship their modeling code, which runs only with
        ``trust_remote_code=True`` (as in transformers); stock architectures load without it. The convention
        comes from the config's ``model_type`` unless given; the mask id from the config or tokenizer unless
        given."""
        require_trust(path, trust_remote_code)
        with explain_remote_failure(path):
            config = AutoConfig.from_pretrained(require_config(path, "diffusion LM"), trust_remote_code=trust_remote_code)
        saved = {}
        for record in ("mmspec.json", "zoo.json"):  # `mmspec train deer` and the zoo record their own settings
            if (Path(path) / record).exists():
                saved = json.loads((Path(path) / record).read_text())
                break
        convention = convention or saved.get("convention")
        mask_token_id = mask_token_id if mask_token_id is not None else saved.get("mask_token_id")
        mtype = str(getattr(config, "model_type", "")).lower()
        if convention is None:
            if "dream" in mtype or "diffucoder" in mtype:
                convention = "dream"
            elif "llada" in mtype:
                convention = "llada"
            else:
                raise ValueError(f"cannot tell the logits convention of model_type {mtype!r}: pass convention="
                                 "'llada' (logits predict the masked position) or 'dream' (position i predicts i+1)")
        if mask_token_id is None:
            mask_token_id = getattr(config, "mask_token_id", None)
            if mask_token_id is None:
                try:
                    mask_token_id = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code).mask_token_id
                except (OSError, ValueError):  # no (loadable) tokenizer next to the weights
                    mask_token_id = None
            if mask_token_id is None:
                raise ValueError(f"no mask token id in {path}'s config or tokenizer: pass mask_token_id=")
        if "AutoModel" in (getattr(config, "auto_map", None) or {}):
            # remote-code dLLMs (LLaDA, Dream) register their LM class as AutoModel and attend bidirectionally
            with explain_remote_failure(path):
                model = AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code, dtype=dtype).eval()
            model._mmspec_remote = (str(path), modeling_files(path))  # for errors in its forward
            kwargs.setdefault("attention", "native")
            kwargs.setdefault("context", "window")
        else:  # a stock architecture trained as a diffusion LM (like the zoo's): bidirectional through our mask
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
        return cls(model, mask_token_id, convention=convention, **kwargs)

    # ------------------------------------------------------------------ per call
    def begin(self, state: DecodeState, max_length: int, max_slots: int) -> SpecKVCache | None:
        """One call's cache of the prefix (``context="cache"``; None otherwise), to pass to every
        :meth:`slot_logprobs` of that call."""
        if self.context != "cache":
            return None
        return prefill_cache(self.model, state, max_length + max_slots + 2)

    @torch.no_grad()
    def slot_logprobs(self, state: DecodeState, k: int, cache: SpecKVCache | None = None) -> torch.Tensor:
        """Log-probabilities ``[B, k, V]`` (float32) of the k tokens after each row's last token."""
        if k < 1:
            raise ValueError(f"need at least one mask slot, got k={k}")
        if self.context == "cache":
            if cache is None:
                raise ValueError("context='cache' reads the call's cache: pass the one begin() returned")
            logits = self._cached(state, k, cache)
        elif self.attention == "native":
            logits = self._native(state, k)
        else:
            logits = self._reencode(state, k)
        logits = logits[..., : self.vocab_size].float()
        return torch.log_softmax(logits, dim=-1)

    # ------------------------------------------------------------------ context modes
    def _pick(self, logits: torch.Tensor, last_clean: torch.Tensor, first_slot: int, k: int) -> torch.Tensor:
        """Slot logits from a [B, T, V] output: the slots themselves (LLaDA) or the node before each slot
        (Dream: the last clean token for slot 0, slot i-1 for slot i)."""
        B = logits.shape[0]
        rows = torch.arange(B, device=logits.device)[:, None]
        if self.convention == "llada":
            idx = first_slot + torch.arange(k, device=logits.device).expand(B, k)
        else:
            idx = torch.cat([last_clean[:, None], first_slot + torch.arange(k - 1, device=logits.device).expand(
                B, k - 1)], dim=1)
        return logits[rows, idx]

    def _cached(self, state: DecodeState, k: int, cache: SpecKVCache) -> torch.Tensor:
        dev = self.model.device
        B = state.batch_size
        unseen = state.unseen(cache.lengths)  # the tokens the drafter has not read (at least the root)
        need, clean_valid = unseen.counts, unseen.valid
        m = clean_valid.shape[1]
        T = m + k
        chunk = torch.where(clean_valid, unseen.tokens, self.mask_token_id)
        ids = torch.cat([chunk, torch.full((B, k), self.mask_token_id, dtype=torch.long, device=dev)], dim=1)
        valid = torch.cat([clean_valid, torch.ones(B, k, dtype=torch.bool, device=dev)], dim=1)
        # who sees whom: clean tokens causally among themselves; slots see every clean token and every slot
        col = torch.arange(T, device=dev)
        vis = (col[None, :, None] >= col[None, None, :]).expand(B, T, T).clone()
        vis[:, m:, :] = True
        vis &= valid[:, None, :]
        depth = torch.where(col[None, :] < m, col[None, :], need[:, None] + (col[None, :] - m))
        parents = (col - 1).expand(B, T).contiguous()
        # earliest position read; a finished row may have nothing unseen (need 0): its index -1 reads a position it
        # ignores, and must not pull `first` below 0 (the head would then run at the last position only)
        first = int((need - 1).clamp(min=0).min()) if self.convention == "dream" else m
        logits = drafter_logits(self.model, cache, ids, parents, valid, vis, depth, first)  # head: positions read
        cache.commit_first(need)  # the clean tokens (pending first); the slots are dropped
        return self._pick(logits, need - 1 - first, m - first, k)

    def _window(self, k: int) -> int:
        """The re-encoded context length: ``window``, cut so that context + k slots fit the model's positions."""
        if self.max_positions is None:
            return self.window
        return max(1, min(self.window, self.max_positions - k))

    def _contexts(self, state: DecodeState, k: int) -> list[torch.Tensor]:
        limit = None if self.context == "full" else self._window(k)
        rows = []
        for b in range(state.batch_size):
            row = state.row(b)
            rows.append(row if limit is None else row[-limit:])
        return rows

    def _check_length(self, n: int) -> None:
        if self.max_positions is not None and n > self.max_positions:
            raise ValueError(f"diffusion drafter input of {n} tokens exceeds its max_position_embeddings "
                             f"({self.max_positions}); use context='window' (or fewer draft slots)")

    def _reencode(self, state: DecodeState, k: int) -> torch.Tensor:
        """Left-padded batch of ``context + slots``, bidirectional within each row's real tokens: one gather
        of each row's last ``n`` buffer slots, the slots before its context masked out."""
        dev = self.model.device
        lengths, starts = state.lengths.to(dev), state.starts.to(dev)
        first = starts if self.context == "full" else torch.maximum(starts, lengths - self._window(k))
        n = int((lengths - first).max())
        T = n + k
        self._check_length(T)
        B = lengths.shape[0]
        col = torch.arange(T, device=dev)
        src = lengths[:, None] - n + col[None, :n]  # buffer slot of each context column
        pad = first - (lengths - n)  # left padding of each row
        real = col[None, :] >= pad[:, None]
        ids = torch.full((B, T), self.mask_token_id, dtype=torch.long, device=dev)
        ids[:, :n] = torch.where(real[:, :n], state.tokens.to(dev).gather(1, src.clamp(min=0)), self.mask_token_id)
        mask = (real[:, None, :] & real[:, :, None]) | torch.eye(T, dtype=torch.bool, device=dev)[None]
        positions = (col[None, :] - pad[:, None]).clamp(min=0)
        mask = to_model_mask(mask[:, None], self.model, model_dtype(self.model))
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False,
                         logits_to_keep=k + 1)
        return self._pick(out.logits, torch.full((B,), 0, device=dev), 1, k)

    def _native(self, state: DecodeState, k: int) -> torch.Tensor:
        """Remote-code dLLMs: one row at a time, no padding, the model's own (bidirectional) attention."""
        dev = self.model.device
        outs = []
        for r in self._contexts(state, k):
            self._check_length(r.numel() + k)
            ids = torch.cat([r.to(dev), torch.full((k,), self.mask_token_id, dtype=torch.long, device=dev)])[None]
            remote = getattr(self.model, "_mmspec_remote", None)
            with explain_remote_failure(*remote) if remote else contextlib.nullcontext():
                logits = self.model(input_ids=ids).logits
            n = r.numel()
            outs.append(self._pick(logits, torch.full((1,), n - 1, device=dev), n, k))
        return torch.cat(outs, dim=0)


__all__ = ["DiffusionLM", "check_vocabularies", "model_vocab_size", "CONVENTIONS", "CONTEXTS"]
