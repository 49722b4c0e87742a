"""The DFlash block-diffusion drafter network: a few Qwen3-style decoder layers conditioned on the target's features.

DFlash (Chen et al., 2026, "DFlash: Block Diffusion for Flash Speculative Decoding", arXiv 2602.06036; reference code
z-lab/dflash), Sec. 3:

* **context features** — the hidden states of K target layers at every verified position are concatenated and fused,
  ``c = RMSNorm(W_fc [h_{l_1}; ...; h_{l_K}])`` (``fc``: K·H → H, no bias; ``hidden_norm``);
* **injection** — every draft layer projects ``c`` with its *own* k / v projections (then its k RMSNorm and the
  rotary embedding at the context token's position) and appends those keys / values in front of the block's own:
  the block attends to the whole verified context at every depth, not only at the input;
* **the block** — ``[last verified token, MASK × (B−1)]`` at positions ``n .. n+B−1``, embedded with the target's
  frozen embeddings, attends non-causally to itself and to the context; one forward gives, through the final norm
  and the target's frozen LM head, B−1 slot distributions (slot j predicts the token at position n+j).

The layers are stock ``Qwen3DecoderLayer`` modules (their parameters, named as the reference checkpoints name them:
``layers.{i}.self_attn.{q,k,v,o}_proj``, ``q_norm``, ``k_norm``, ``mlp``, the two layer norms; plus ``fc``,
``hidden_norm``, ``norm``); their forward is computed here as a few tensor ops (the stock layer has no door for
extra context keys), exactly the function of the reference. No embedding or LM head lives in the drafter: the
target's are used, shared and frozen.

Beyond the paper, for VLM targets (FLASH's latent-aware compression, Sec. 3.2, applied to the block drafter's
context): with ``dflash_config["visual_queries"] = n`` the drafter has n learned queries, and
:meth:`DFlashDraftModel.compress_context` may replace each image's run of fused context features by its first
``k ≤ n`` of them attended over that run, ``softmax(C Fᵀ / √H) F``, so the context holds k entries per picture
instead of one per placeholder. Context entries are then numbered by their index in the compressed context (the
rotary positions of the drafter's own sequence, in training and decoding alike).
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RMSNorm, Qwen3RotaryEmbedding

from .lean_layer import Int8Drafter, _rotate, decoder_layer, rms_norm

DEFAULT_BLOCK_SIZE = 16  # the paper's B
DEFAULT_NUM_FEATURE_LAYERS = 5  # the paper's K on Qwen3


def default_layer_ids(num_target_layers: int, k: int = DEFAULT_NUM_FEATURE_LAYERS) -> list[int]:
    """The paper's spread of K target layers (0-based layer indices) from layer 1 to layer N−3, rounded as the
    reference rounds them; one layer takes the middle one. Short targets get every layer they have (at most k)."""
    if num_target_layers < 1:
        raise ValueError(f"a target needs at least one layer, got {num_target_layers}")
    if k == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    if end <= start:  # too shallow for the paper's rule
        return list(range(max(0, num_target_layers - k), num_target_layers))
    ids = [int(round(start + i * (end - start) / (k - 1))) for i in range(k)]
    return sorted(set(ids))


def emitted(logits: torch.Tensor, never) -> torch.Tensor:
    """``logits`` with the ids a target never emits at −inf (``never``: its ``disallowed`` mask, a guided image
    target's class tokens, :attr:`~mmspec.guidance.CFGModel.disallowed`; None: unchanged), as the drafter drafts."""
    return logits if never is None else logits.masked_fill(never, float("-inf"))


def make_config(target_config, num_layers: int = 2, block_size: int = DEFAULT_BLOCK_SIZE,
                mask_token_id: int | None = None, target_layer_ids: list[int] | None = None,
                intermediate_size: int | None = None, num_attention_heads: int | None = None,
                num_key_value_heads: int | None = None, head_dim: int | None = None,
                visual_queries: int = 0, feature_branches: int = 1, draft_vocab=None) -> Qwen3Config:
    """A drafter config for ``target_config`` (a text config): as wide as the target, its heads by default, and the
    fields the reference layout carries (``block_size``, ``dflash_config``, ``num_target_layers``); with
    ``visual_queries`` > 0, that many learned queries for compressing each picture's context (mmspec's own key);
    with ``feature_branches`` = 2, a drafter of a CFG-guided target that reads each layer's conditional and
    unconditional features side by side instead of their guided combination (mmspec's own key); with
    ``draft_vocab``, the token ids it drafts by default (FR-Spec's draft vocabulary, e.g. every id of the target's
    training answers; mmspec's own key, :class:`~mmspec.drafters.dflash.DFlashDrafter`'s ``draft_vocab``)."""
    if mask_token_id is None:
        raise ValueError("a DFlash drafter needs a mask token id (the tokenizer's mask token, or a spare id)")
    if block_size < 2:
        raise ValueError(f"block_size must be >= 2 (the root and at least one draft slot), got {block_size}")
    n = target_config.num_hidden_layers
    ids = list(target_layer_ids) if target_layer_ids is not None else default_layer_ids(n)
    bad = [i for i in ids if not 0 <= i < n]
    if bad or not ids:
        raise ValueError(f"target_layer_ids must be layer indices in 0..{n - 1}, got {ids}")
    heads = num_attention_heads or target_config.num_attention_heads
    hidden = target_config.hidden_size
    rope = dict(getattr(target_config, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default" or "rope_theta" not in rope:
        # per-layer-type or scaled rope (Gemma3, long-context variants): the drafter's own plain rotary, whose base
        # matters only inside the drafter (its context and block share it)
        rope = {"rope_type": "default", "rope_theta": float(rope.get("rope_theta", 10000.0) or 10000.0)}
    cfg = Qwen3Config(
        vocab_size=target_config.vocab_size, hidden_size=hidden,
        intermediate_size=intermediate_size or target_config.intermediate_size, num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=num_key_value_heads or getattr(target_config, "num_key_value_heads", heads),
        head_dim=head_dim or getattr(target_config, "head_dim", None) or hidden // heads,
        rms_norm_eps=getattr(target_config, "rms_norm_eps", 1e-6),
        max_position_embeddings=getattr(target_config, "max_position_embeddings", 4096),
        rope_parameters={"rope_type": "default", "rope_theta": float(rope["rope_theta"])},
        tie_word_embeddings=False, attention_bias=False)
    cfg.architectures = ["DFlashDraftModel"]
    cfg.block_size = int(block_size)
    cfg.num_target_layers = n
    if visual_queries < 0:
        raise ValueError(f"visual_queries must be >= 0, got {visual_queries}")
    if feature_branches not in (1, 2):
        raise ValueError(f"feature_branches must be 1 (one feature per layer) or 2 (a guided target's conditional "
                         f"and unconditional features), got {feature_branches}")
    cfg.dflash_config = {"mask_token_id": int(mask_token_id), "target_layer_ids": [int(i) for i in ids]}
    if visual_queries:
        cfg.dflash_config["visual_queries"] = int(visual_queries)
    if feature_branches != 1:
        cfg.dflash_config["feature_branches"] = int(feature_branches)
    if draft_vocab is not None:
        cfg.dflash_config["draft_vocab"] = checked_vocab(draft_vocab, target_config.vocab_size)
    return cfg


def checked_vocab(ids, vocab_size: int) -> list[int]:
    """``ids`` as a sorted list of distinct token ids, refused unless non-empty and inside ``0..vocab_size − 1``."""
    ids = torch.as_tensor(list(ids) if not isinstance(ids, torch.Tensor) else ids, dtype=torch.long).flatten()
    if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= vocab_size or ids.unique().numel() != ids.numel():
        raise ValueError(f"draft_vocab must hold distinct token ids in 0..{vocab_size - 1} (got {ids.numel()} ids)")
    return sorted(int(i) for i in ids)


class DFlashDraftModel(nn.Module):
    """The drafter's weights and its three functions: :meth:`fuse` (context features), :meth:`context_kv` (a layer's
    keys / values of the context) and :meth:`block` (the block's forward over given context keys / values)."""

    def __init__(self, config: Qwen3Config):
        super().__init__()
        if not getattr(config, "dflash_config", None) or "mask_token_id" not in config.dflash_config:
            raise ValueError("a DFlash config needs dflash_config = {mask_token_id, target_layer_ids}")
        config._attn_implementation = "sdpa"
        self.config = config
        self.layers = nn.ModuleList([Qwen3DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        k = len(self.target_layer_ids)
        self.fc = nn.Linear(k * self.feature_branches * config.hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        self._rope_table: tuple[torch.Tensor, torch.Tensor] | None = None
        if self.visual_queries:  # created last: a drafter without them initialises its other weights identically
            H = config.hidden_size
            self.queries = nn.Parameter(torch.randn(self.visual_queries, H) / math.sqrt(H))

    # ------------------------------------------------------------------ what the config says
    @property
    def block_size(self) -> int:
        return int(self.config.block_size)

    @property
    def mask_token_id(self) -> int:
        return int(self.config.dflash_config["mask_token_id"])

    @property
    def target_layer_ids(self) -> list[int]:
        return [int(i) for i in self.config.dflash_config["target_layer_ids"]]

    @property
    def visual_queries(self) -> int:
        """Learned queries for compressing a picture's context (0: none; the paper's drafter)."""
        return int(self.config.dflash_config.get("visual_queries", 0))

    @property
    def feature_branches(self) -> int:
        """Features per target layer: 1, or 2 for a guided target's conditional and unconditional ones."""
        return int(self.config.dflash_config.get("feature_branches", 1))

    @property
    def draft_vocab(self) -> list[int] | None:
        """The ids it drafts by default (None: the whole vocabulary)."""
        ids = self.config.dflash_config.get("draft_vocab")
        return None if ids is None else [int(i) for i in ids]

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    @property
    def hidden_entries(self) -> list[int]:
        """The ``hidden_states`` entries of the layers it reads: entry 0 is the embedding output, so layer i's output
        is entry i + 1, as the reference reads it (and speculators' ``aux_hidden_state_layer_ids`` number them)."""
        return [i + 1 for i in self.target_layer_ids]

    def select_features(self, hidden_states) -> torch.Tensor:
        """``[..., K·H]``: the named layers' outputs from a stock model's ``hidden_states`` tuple."""
        return torch.cat([hidden_states[i] for i in self.hidden_entries], dim=-1)

    # ------------------------------------------------------------------ the forward, in pieces
    def rope(self, x: torch.Tensor, positions: torch.LongTensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) [..., head_dim] for ``positions`` (any shape), from a table built once and grown as needed."""
        need = int(positions.max()) + 1 if positions.numel() else 1
        table = self._rope_table
        if table is None or table[0].shape[0] < need or table[0].device != x.device or table[0].dtype != x.dtype:
            n = max(need, 2 * table[0].shape[0] if table is not None else 0, 256)
            with torch.no_grad():
                cos, sin = self.rotary_emb(x.new_zeros(1, 1, 1), position_ids=torch.arange(n, device=x.device)[None])
            table = self._rope_table = (cos[0].to(x.dtype), sin[0].to(x.dtype))
        return table[0][positions], table[1][positions]

    def fuse(self, features: torch.Tensor, int8: "Int8Drafter | None" = None) -> torch.Tensor:
        """Context features ``[..., K·H]`` -> ``hidden_norm(fc(·))`` ``[..., H]`` (``int8``: with its ``fc``)."""
        x = features.to(self.dtype)
        return rms_norm(self.hidden_norm, self.fc(x) if int8 is None else int8.fc(x))

    def check_compress(self, n: int) -> None:
        """Refuse compressing a picture to ``n`` entries unless this drafter has that many visual queries."""
        q = self.visual_queries
        if not q:
            raise ValueError(f"compress_to={n}: this DFlash drafter was built without visual queries, so it cannot "
                             "compress a picture's context")
        if not 1 <= int(n) <= q:
            raise ValueError(f"compress_to={n}: this DFlash drafter has {q} visual queries (compress_to must be in "
                             f"1..{q})")

    def compress_context(self, ctx: torch.Tensor, image: torch.BoolTensor, valid: torch.BoolTensor, n: int,
                         align: str) -> tuple[torch.Tensor, torch.BoolTensor, torch.LongTensor]:
        """Fused context ``ctx`` [B, T, H] with each run of valid image positions (``image`` / ``valid`` [B, T])
        replaced by ``n`` entries attended by the first ``n`` queries. Returns ``(entries [B, S, H], valid [B, S],
        index [B, T])``: ``index[b, t]`` is the entry a valid non-image position t became (−1 elsewhere). Rows are
        left-aligned (``align="left"``, padding first, as prompts are) or right-padded (``"right"``, training rows)."""
        self.check_compress(n)
        if align not in ("left", "right"):
            raise ValueError(f"align must be 'left' or 'right', got {align!r}")
        B, T, H = ctx.shape
        img = image & valid
        text = (valid & ~img).long()
        starts = img & ~torch.cat([img.new_zeros(B, 1), img[:, :-1]], 1)  # each picture's first position
        pictures = starts.long().cumsum(1)  # pictures begun at or before each position
        before = text.cumsum(1) - text + n * (pictures - starts.long())  # entries in front of each position's first
        count = text.sum(1) + n * starts.sum(1)
        S = max(1, int(count.max()))
        off = S - count if align == "left" else torch.zeros_like(count)
        slot = torch.arange(S, device=ctx.device)
        out = ctx.new_zeros(B, S, H)
        index = torch.where(text.bool(), before + off[:, None], -1)
        rows, cols = text.nonzero(as_tuple=True)
        out[rows, index[rows, cols]] = ctx[rows, cols]
        rows, cols = starts.nonzero(as_tuple=True)  # one picture each: its queries attend over its run only
        if rows.numel():
            own = img[rows] & (pictures[rows] == pictures[rows, cols][:, None])  # [K, T]
            scores = (self.queries[:n] @ ctx[rows].transpose(1, 2)) / math.sqrt(H)  # [K, n, T]
            w = torch.softmax(scores.masked_fill(~own[:, None, :], float("-inf")), dim=-1)
            first = before[rows, cols] + off[rows]
            out[rows[:, None], first[:, None] + torch.arange(n, device=ctx.device)] = w @ ctx[rows]
        ok = (slot[None, :] >= off[:, None]) & (slot[None, :] < (off + count)[:, None])
        return out, ok, index

    def context_kv(self, i: int, context: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   int8: "Int8Drafter | None" = None):
        """Layer ``i``'s keys and values ``[B, H_kv, n, D]`` of fused context ``[B, n, H]`` at the rotary ``cos`` /
        ``sin`` ``[B, n, D]`` of the context tokens' positions (``int8``: with its k / v products)."""
        attn = self.layers[i].self_attn
        B, n, _ = context.shape
        D = attn.head_dim
        if int8 is None:
            k, v = F.linear(context, attn.k_proj.weight), F.linear(context, attn.v_proj.weight)
        else:
            k, v = int8.layers[i].kv.split(context)
        k = rms_norm(attn.k_norm, k.reshape(B, n, -1, D)).transpose(1, 2)
        v = v.reshape(B, n, -1, D).transpose(1, 2)
        return _rotate(k, cos[:, None], sin[:, None]), v

    def block(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              keys_values: Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
              mask: torch.Tensor | None, context: torch.Tensor | None = None,
              int8: "Int8Drafter | None" = None) -> torch.Tensor:
        """The block's forward: ``x`` [B, T, H] (embedded block tokens) at rotary ``cos`` / ``sin`` [B, T, D];
        ``keys_values(i, k, v)`` returns layer i's keys / values to attend to given the block's own (the context's
        in front of them: from a cache, or concatenated in training); ``mask`` [B, 1, T, S] bool (True = attend).
        ``context`` [B, n, H]: fused context entries whose keys / values each layer computes in the same products as
        the block's (:meth:`context_kv`'s function; decoding's new entries): ``cos`` / ``sin`` then cover them first
        ([B, n + T, D]) and ``keys_values`` gets their n keys / values in front of the block's.
        ``int8``: the layers' products with its int8 weights (a drafter on a CPU).
        Returns the final-normed hidden states [B, T, H]."""
        h = x
        for i, layer in enumerate(self.layers):
            h = decoder_layer(layer, h, cos, sin, lambda k, v, i=i: keys_values(i, k, v), mask, extra=context,
                              int8=None if int8 is None else int8.layers[i])
        return rms_norm(self.norm, h)


@torch.no_grad()
def with_branch_features(net: DFlashDraftModel, scale: float) -> DFlashDraftModel:
    """``net`` (guided features h_u + s (h_c − h_u) per layer) as a drafter of the same target that reads each
    layer's conditional and unconditional features side by side, drafting exactly what ``net`` drafts: its ``fc``
    W_j of layer j becomes [s W_j, (1 − s) W_j] over [h_c, h_u], since W_j (h_u + s (h_c − h_u)) is that. A warm
    start: training then lets the drafter weigh the two branches as it needs instead of at the guidance scale."""
    if net.feature_branches != 1:
        raise ValueError("the drafter reads both branches already")
    H = net.config.hidden_size
    blocks = net.fc.weight.view(H, len(net.target_layer_ids), 1, H)
    fc = torch.cat([scale * blocks, (1.0 - scale) * blocks], dim=2).reshape(H, -1)
    return _with_fc(net, fc, feature_branches=2)


@torch.no_grad()
def with_target_layers(net: DFlashDraftModel, layer_ids: list[int]) -> DFlashDraftModel:
    """``net`` as a drafter that reads the target layers ``layer_ids`` (every layer ``net`` reads among them, in any
    order), drafting exactly what ``net`` drafts: each of its layers keeps its block of ``fc`` columns, and the
    columns of the layers it did not read start at zero. A warm start for trying what more (e.g. deeper) features
    give a trained drafter: training then learns what to read from them."""
    ids = [int(i) for i in layer_ids]
    missing = [i for i in net.target_layer_ids if i not in ids]
    if missing or len(set(ids)) != len(ids):
        raise ValueError(f"target layers {ids} must be distinct and include every layer the drafter reads "
                         f"({net.target_layer_ids}; missing {missing})")
    H = net.config.hidden_size
    old = net.fc.weight.view(H, len(net.target_layer_ids), net.feature_branches * H)
    fc = old.new_zeros(H, len(ids), old.shape[-1])
    fc[:, [ids.index(layer) for layer in net.target_layer_ids]] = old
    return _with_fc(net, fc.reshape(H, -1), target_layer_ids=ids)


def _with_fc(net: DFlashDraftModel, fc: torch.Tensor, **dflash_config) -> DFlashDraftModel:
    """A copy of ``net`` whose ``dflash_config`` has ``dflash_config`` set and whose ``fc`` weight is ``fc`` (what
    :func:`with_branch_features` and :func:`with_target_layers` change), on its device, dtype and mode."""
    config = copy.deepcopy(net.config)
    config.dflash_config = {**config.dflash_config, **dflash_config}
    out = DFlashDraftModel(config).to(device=net.device, dtype=net.dtype)
    state = net.state_dict()
    state["fc.weight"] = fc
    out.load_state_dict(state)
    return out.train(net.training)


def check_block(net: DFlashDraftModel, block: int | None) -> int:
    """The block length to run: ``block`` (2 up to the drafter's block size), or the whole block when None."""
    if block is None:
        return net.block_size
    if not 2 <= int(block) <= net.block_size:
        raise ValueError(f"block must be in 2..{net.block_size} (a root and at least one slot, at most the drafter's "
                         f"block of {net.block_size}), got {block}")
    return int(block)


def teacher_forced_logits(net: DFlashDraftModel, embed: nn.Module, lm_head: nn.Module, tokens: torch.LongTensor,
                          features: torch.Tensor, anchors: torch.LongTensor, image: torch.BoolTensor | None = None,
                          compress_to: int | None = None, block: int | None = None) -> torch.Tensor:
    """Slot logits [N, m, B−1, V] of m blocks per row in one forward, the way training sees them (DFlash's many
    anchors per sequence under one block mask): block ``a`` = ``[tokens[a], MASK × (B−1)]`` at positions a..a+B−1
    sees the context at positions < a and its own block, nothing else. ``tokens`` [N, T]; ``features`` [N, T, K·H]
    (the target's, at every position); ``anchors`` [N, m] (any value in 0..T−1; a caller ignores what it does not
    want). The context keys / values are computed once per layer for all T positions and shared by the blocks.
    With ``compress_to``, each picture's run of positions (``image`` [N, T]) is compressed
    (:meth:`DFlashDraftModel.compress_context`) and positions are the compressed context's: anchors must then lie
    outside pictures (a block's root is a token of the answer). ``block``: blocks of that many positions (2 up to the
    drafter's block size) instead of the whole block, as a drafter told to run a shorter block drafts
    (:class:`~mmspec.drafters.dflash.DFlashDrafter`'s ``block``): slot logits [N, m, block−1, V]."""
    N, T = tokens.shape
    m = anchors.shape[1]
    B = check_block(net, block)
    dev = tokens.device
    ctx = net.fuse(features)
    at = anchors  # the anchors' positions in the drafter's own numbering (the context's entry indices)
    if compress_to:
        ctx, _, index = net.compress_context(ctx, image, torch.ones_like(image), compress_to, align="right")
        at = index.gather(1, anchors)
        if bool((at < 0).any()):
            raise ValueError("an anchor lies on a picture's placeholder: blocks start at answer tokens")
    S = ctx.shape[1]
    ctx_pos = torch.arange(S, device=dev).expand(N, S)
    ccos, csin = net.rope(ctx, ctx_pos)
    block_tokens = torch.full((N, m, B), net.mask_token_id, dtype=torch.long, device=dev)
    block_tokens[..., 0] = tokens.gather(1, anchors)
    block_pos = (at[..., None] + torch.arange(B, device=dev)).view(N, m * B)
    x = embed(block_tokens.view(N, m * B)).to(net.dtype)
    bcos, bsin = net.rope(x, block_pos)
    sees_context = ctx_pos[:, None, :] < at.repeat_interleave(B, dim=1)[..., None]  # [N, mB, S]
    blk = torch.arange(m, device=dev).repeat_interleave(B)
    same_block = (blk[:, None] == blk[None, :]).expand(N, m * B, m * B)
    mask = torch.cat([sees_context, same_block], dim=2)[:, None]
    ctx_kv = [net.context_kv(i, ctx, ccos, csin) for i in range(len(net.layers))]

    def keys_values(i, k, v):
        ck, cv = ctx_kv[i]
        return torch.cat([ck, k], dim=2), torch.cat([cv, v], dim=2)

    h = net.block(x, bcos, bsin, keys_values, mask).view(N, m, B, -1)
    return lm_head(h[:, :, 1:])


__all__ = ["check_block", "checked_vocab", "DEFAULT_BLOCK_SIZE", "DEFAULT_NUM_FEATURE_LAYERS", "default_layer_ids", "make_config", "DFlashDraftModel", "emitted",
           "teacher_forced_logits", "with_branch_features"]
