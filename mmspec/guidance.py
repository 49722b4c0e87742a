"""Classifier-free guidance as a model: one row in, guided logits out (LlamaGen-style visual AR models).

``CFGModel(model, scale, null_token_id, allowed_ids)`` runs every row twice in one batch — the row as given
(conditional) and a copy whose condition token is the null token (unconditional) — and returns
``uncond + scale · (cond − uncond)``, with every id outside ``allowed_ids`` (e.g. class tokens) at −inf. The
KV cache holds the 2B stacked rows; ``SpecKVCache.commit`` keeps the same accepted path in both halves.
So the decoding loop, the tree verifier and any drafter see an ordinary causal LM whose logits are already
guided: accepted tokens are appended to both halves, and the drafter (wrapped the same way) and the
verifier read guided distributions, as LANTERN's CFG setting requires. Asked for hidden states, it returns
the guided last-layer feature (see ``forward``), which is what a feature drafter of a guided target learns.

By default the condition is the first real token of each row (``[class token] + codes``): at the prefill
(empty cache) the unconditional copy gets ``null_token_id`` there. Text-conditioned targets pass their own
rule as ``uncond(input_ids, real_mask) -> input_ids`` (Janus: every prompt token but BOS and
``<begin_of_image>`` becomes padding, see :mod:`mmspec.janus`).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_outputs import CausalLMOutputWithPast

from .cache import SpecKVCache
from .hf_args import cache_kwargs, either_cache, output_kwargs
from .verifiers.tree_forward import direct_logits, text_config

DEFAULT_CFG_SCALE = 3.0  # the guidance scale of every image front-end (LANTERN's setting, the zoo's)


class CFGModel(nn.Module):
    def __init__(self, model, scale: float, null_token_id: int | None, allowed_ids=None, uncond=None,
                 feature_entries=None, feature_branches: int = 1):
        super().__init__()
        # the ``hidden_states`` entries a drafter reads besides the last (a DFlash drafter's layers, entry i + 1 for
        # layer i): each returned guided; None: the last one only, as a feature drafter needs
        self.feature_entries = None if feature_entries is None else tuple(sorted({int(i) for i in feature_entries}))
        # 2: each of those entries as [conditional, unconditional] side by side ([B, T, 2H]) instead of guided, for
        # a drafter that reads both branches (DFlashDraftModel.feature_branches); the last entry stays guided
        if feature_branches not in (1, 2):
            raise ValueError(f"feature_branches must be 1 (guided features) or 2 (both branches'), got "
                             f"{feature_branches}")
        if feature_branches == 2:
            if not self.feature_entries:
                raise ValueError("feature_branches=2 applies to the feature_entries a drafter reads: name them")
            last = text_config(model).num_hidden_layers
            if last in self.feature_entries:
                raise ValueError(f"feature_branches=2 cannot name the last hidden_states entry ({last}): it stays "
                                 "guided, the LM head's input")
        self.feature_branches = int(feature_branches)
        if scale != 1.0 and null_token_id is None and uncond is None:
            raise ValueError("classifier-free guidance (scale != 1) needs a null condition token (null_token_id) "
                             "or an unconditional-prompt rule (uncond)")
        self.uncond = uncond
        self.model = model.eval()
        self.scale = float(scale)
        self.null_token_id = null_token_id
        vocab = text_config(self.model).vocab_size
        device = self.device  # built per call: the mask goes where the model is
        allowed = torch.zeros(vocab, dtype=torch.bool, device=device)
        if allowed_ids is None:
            allowed[:] = True
        else:
            allowed[torch.as_tensor(allowed_ids, dtype=torch.long, device=device)] = True
        self.register_buffer("allowed", allowed, persistent=False)
        self.register_buffer("disallowed", ~allowed, persistent=False)  # what every step masks, built once

    # what the engine reads from a model
    @property
    def config(self):
        return self.model.config

    @property
    def generation_config(self):
        return getattr(self.model, "generation_config", None)

    @property
    def device(self):
        return self.model.device

    @property
    def dtype(self):
        return self.model.dtype

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def get_output_embeddings(self):
        return self.model.get_output_embeddings()

    @property
    def guided(self) -> bool:
        return self.scale != 1.0

    def _uncond_ids(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None, prefill: bool):
        if not prefill:
            return input_ids
        ids = input_ids.clone()
        if attention_mask is not None and attention_mask.dim() == 4:
            # our 4-D masks: a real token sees itself; padding (left) rows are marked by seeing only themselves
            # too, so use the first column that the last query attends to within this block
            T = ids.shape[1]
            block = attention_mask[:, 0, -1, -T:]
            real = block if block.dtype == torch.bool else block == 0
        elif attention_mask is not None:
            real = attention_mask.bool()
        else:
            real = torch.ones_like(ids, dtype=torch.bool)
        if self.uncond is not None:
            return self.uncond(ids, real)
        first = real.long().argmax(1)
        ids[torch.arange(ids.shape[0], device=ids.device), first] = self.null_token_id
        return ids

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None,
                inputs_embeds=None, use_cache=True, output_hidden_states=False, past_key_values=None, **kwargs):
        # the KV cache comes as `cache` or `past_key_values`, whichever the caller's transformers uses
        cache = either_cache(cache, past_key_values)
        if inputs_embeds is not None:
            raise ValueError("CFGModel takes input_ids")
        if not self.guided:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             use_cache=use_cache, output_hidden_states=output_hidden_states,
                             **cache_kwargs(self.model, cache), **kwargs)
            out.logits = out.logits.masked_fill(self.disallowed, float("-inf"))
            return out
        B = input_ids.shape[0]
        lengths = getattr(cache, "lengths", None)  # SpecKVCache: committed tokens per row
        if cache is None:
            prefill = True
        elif lengths is not None:  # the write base of the nodes in flight: no device sync (lengths.max() is one)
            prefill = cache.write_base == 0
        else:
            prefill = cache.get_seq_length() == 0
        uncond = self._uncond_ids(input_ids, attention_mask, prefill)
        both = torch.cat([input_ids, uncond])
        mask = torch.cat([attention_mask, attention_mask]) if attention_mask is not None else None
        pos = torch.cat([position_ids, position_ids]) if position_ids is not None else None
        # (mask None: SpecKVCache's plain step of a lone unpadded row, which sees every slot)
        ours = isinstance(cache, SpecKVCache) and pos is not None
        # stock Llama-family models: their modules called in order (the last hidden state is all a feature
        # drafter reads, so hidden_states is then that one entry)
        entries = self.feature_entries if output_hidden_states else None
        direct = direct_logits(self.model, both, mask, pos, cache, return_hidden="all" if entries else True) \
            if ours else None
        if direct is not None:  # (no model output object in between: building one costs more than the guidance)
            raw, states = direct[0], (direct[1] if entries else (direct[1],)) if output_hidden_states else None
        else:
            out = self.model(input_ids=both, attention_mask=mask, position_ids=pos, use_cache=use_cache,
                             output_hidden_states=output_hidden_states, **cache_kwargs(self.model, cache), **kwargs)
            raw, states = out.logits, out.hidden_states
        logits = raw.float()
        cond, unc = logits[:B], logits[B:]
        guided = unc + self.scale * (cond - unc)
        guided = guided.masked_fill(self.disallowed, float("-inf"))
        hidden = None
        if output_hidden_states and states:
            # the last layer's *guided* feature h_u + s (h_c - h_u): the LM head is linear, so it maps this
            # feature to the guided logits, and a feature drafter trained on it drafts under guidance with
            # one row per image instead of two
            # (with feature_entries, the same for each entry named: every other inner entry is left out, None)
            *inner, last = states
            if entries:
                hidden = tuple(self._feature(h, B) if i in entries else None for i, h in enumerate(inner))
            else:
                hidden = tuple(h[:B] for h in inner)
            hidden = hidden + (self._guide(last, B),)
        return CausalLMOutputWithPast(logits=guided, hidden_states=hidden, **output_kwargs(cache))

    def _feature(self, h: torch.Tensor, rows: int) -> torch.Tensor:
        """A drafter's feature of a stacked [2B, ...] entry: guided, or both branches side by side."""
        if self.feature_branches == 2:
            return torch.cat([h[:rows], h[rows:]], dim=-1)
        return self._guide(h, rows)

    def _guide(self, h: torch.Tensor, rows: int) -> torch.Tensor:
        """h_u + s (h_c − h_u) of a stacked [2B, ...] feature (conditional rows first)."""
        return h[rows:] + self.scale * (h[:rows] - h[rows:])


__all__ = ["CFGModel", "DEFAULT_CFG_SCALE"]
