"""The feature drafter network shared by the plain EAGLE-style drafter, MSD and FLASH.

* EAGLE (Li et al., 2024, Sec. 3): the input at token position p is ``fc([e(x_p) ; f_{p-1}])`` (2H -> H),
  the target's frozen token embedding of x_p next to the target's last-layer feature at p-1; one decoder
  layer predicts f_p, and the target's frozen ``lm_head`` turns it into the next-token distribution.
* MSD (decoupling): at image positions the input is the target's projected image embedding itself.
* FLASH (Sec. 3.2, latent-aware compression): each image's run of placeholders is replaced by ``n``
  tokens ``softmax(C Fᵀ / √H) F`` — learned queries C over the target's last-layer features F at that
  image's positions. The queries are nested (any first ``n`` of them are a valid setting), so one
  trained drafter serves several compression ratios. FLASH's semi-autoregressive head (Sec. 3.3): an
  MLP on the layer's output emits ``sar_tokens`` future features per forward (residual to the first).

The decoder layer is a stock one-layer ``LlamaModel`` fed with ``inputs_embeds`` (its own final norm is
the feature head); saved as ``feature_drafter.json`` + ``model.safetensors``, never with the target's
embeddings or head, with a signature of the target it was trained against.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig, LlamaModel

from ..hf_args import cache_kwargs
from ..verifiers.tree_forward import text_config, to_model_mask
from .lean_layer import RotaryTable, lean_stack, lean_supported, rms_norm
from ..vision import image_token_id

METHODS = ("eagle", "msd", "flash")


def target_signature(target) -> dict:
    """Sizes plus statistics of the target's LM head: a drafter trained against one target is refused by
    another (a different model has a different head even at equal sizes)."""
    cfg = text_config(target)
    w = target.get_output_embeddings().weight.detach().double()
    rows = w[: min(512, w.shape[0])]
    return {"vocab_size": int(cfg.vocab_size), "hidden_size": int(cfg.hidden_size),
            "lm_head_mean": float(rows.mean()), "lm_head_rms": float(rows.pow(2).mean().sqrt()),
            "lm_head_row0": float(rows[0].sum()), "lm_head_col0": float(rows[:, 0].sum())}


def signature_mismatch(saved: dict, target) -> str | None:
    """What tells ``target`` from the one the drafter was trained against (None: nothing). A target cast to a
    half-precision dtype rounds its head: the statistics are compared within that dtype's rounding."""
    now = target_signature(target)
    for key in ("vocab_size", "hidden_size"):
        if saved.get(key) != now[key]:
            return f"{key} {saved.get(key)} (drafter) vs {now[key]} (target)"
    dtype = target.get_output_embeddings().weight.dtype
    tol = max(1e-3, 8 * torch.finfo(dtype).eps) if dtype.is_floating_point else 1e-3
    for key in ("lm_head_mean", "lm_head_rms", "lm_head_row0", "lm_head_col0"):
        a, b = saved.get(key), now[key]
        if a is None or abs(a - b) > tol * max(1.0, abs(a), abs(b)):
            return f"the LM head differs ({key}: {a} vs {b})"
    return None


@dataclass
class FeatureDrafterConfig:
    hidden_size: int
    vocab_size: int
    method: str = "eagle"
    num_attention_heads: int = 4
    num_key_value_heads: int | None = None
    intermediate_size: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    image_token_id: int | None = None
    compress_tokens: int = 0  # FLASH: learned queries per image (0 = no compression)
    sar_tokens: int = 1  # FLASH: features emitted per forward
    target: dict = field(default_factory=dict)  # target_signature() of the target it was trained against
    guidance_scale: float | None = None  # image targets: the CFG scale whose guided features it learned

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"unknown feature-drafter method {self.method!r}; choose from {METHODS}")
        if self.sar_tokens < 1:
            raise ValueError(f"sar_tokens must be >= 1, got {self.sar_tokens}")
        if self.method == "flash" and self.compress_tokens < 1:
            raise ValueError("FLASH needs compress_tokens >= 1 (learned queries per image)")

    @property
    def decoupled(self) -> bool:
        return self.method == "msd"

    @classmethod
    def for_target(cls, target, method: str = "msd", **overrides) -> "FeatureDrafterConfig":
        cfg = text_config(target)
        rope = getattr(cfg, "rope_parameters", None) or {}
        kw = dict(hidden_size=cfg.hidden_size, vocab_size=cfg.vocab_size, method=method,
                  num_attention_heads=cfg.num_attention_heads,
                  num_key_value_heads=getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
                  intermediate_size=getattr(cfg, "intermediate_size", 4 * cfg.hidden_size),
                  rms_norm_eps=getattr(cfg, "rms_norm_eps", 1e-6), rope_theta=float(rope.get("rope_theta", 1e4)),
                  max_position_embeddings=getattr(cfg, "max_position_embeddings", 4096),
                  image_token_id=image_token_id(target), target=target_signature(target))
        if method == "flash":
            kw.update(compress_tokens=8, sar_tokens=4)
        kw.update(overrides)
        return cls(**kw)


class FeatureDraftModel(nn.Module):
    def __init__(self, config: FeatureDrafterConfig):
        super().__init__()
        self.config = config
        H = config.hidden_size
        self.fc = nn.Linear(2 * H, H)
        body = LlamaConfig(vocab_size=1, hidden_size=H, intermediate_size=config.intermediate_size or 4 * H,
                           num_hidden_layers=1, num_attention_heads=config.num_attention_heads,
                           num_key_value_heads=config.num_key_value_heads or config.num_attention_heads,
                           rms_norm_eps=config.rms_norm_eps, rope_theta=config.rope_theta,
                           max_position_embeddings=config.max_position_embeddings, tie_word_embeddings=False,
                           bos_token_id=None, eos_token_id=None, pad_token_id=None)
        body._attn_implementation = "sdpa"
        self.body = LlamaModel(body)
        # append() through mmspec.drafters.lean_layer where the body's config allows (lean = False: the stock
        # modules, e.g. to compare them)
        self.lean = lean_supported(body)
        self._rope_table = RotaryTable(self.body.rotary_emb)
        if config.compress_tokens:
            self.queries = nn.Parameter(torch.randn(config.compress_tokens, H) / math.sqrt(H))
        if config.sar_tokens > 1:
            inner = config.intermediate_size or 4 * H
            self.sar = nn.Sequential(nn.Linear(H, inner), nn.SiLU(), nn.Linear(inner, (config.sar_tokens - 1) * H))
            nn.init.zeros_(self.sar[2].weight)
            nn.init.zeros_(self.sar[2].bias)

    # ------------------------------------------------------------------ pieces
    def fuse(self, token_embeds: torch.Tensor, features: torch.Tensor, int8=None) -> torch.Tensor:
        """``fc([embeds; features])`` (``int8``: an :class:`~mmspec.drafters.lean_layer.Int8Drafter`, with its ``fc``)."""
        x = torch.cat([token_embeds, features], dim=-1)
        return self.fc(x) if int8 is None else int8.fc(x)

    def compress(self, features: torch.Tensor, n: int | None = None) -> torch.Tensor:
        """One image's features [m, H] -> [n, H] with the first ``n`` learned queries."""
        n = n or self.config.compress_tokens
        if not 1 <= n <= self.config.compress_tokens:
            raise ValueError(f"compression to {n} tokens: this drafter has {self.config.compress_tokens} queries")
        q = self.queries[:n]
        w = torch.softmax(q @ features.T / math.sqrt(features.shape[-1]), dim=-1)
        return w @ features

    def append(self, cache, x: torch.Tensor, parents: torch.LongTensor, valid: torch.BoolTensor,
               int8=None) -> torch.Tensor:
        """Run the decoder layer over new entries ``x`` [B, T, H] appended to ``cache`` as pending nodes
        (``parents``/``valid`` as in ``SpecKVCache.prepare_append``); returns the features [B, T, H]. ``int8``: an
        :class:`~mmspec.drafters.lean_layer.Int8Drafter` whose layers' products it runs with (a lean drafter only).
        The same stock modules as ``self.body(...)``, called directly: the drafter runs several times per
        step, and the model-level wrappers (output capture, mask construction) cost more than the layer."""
        positions, mask = cache.prepare_append(parents, valid)
        mask = to_model_mask(mask, self.body, x.dtype)  # None for a decode step: SDPA's faster unmasked path
        if self.lean:
            # the same function in a few tensor ops (mmspec.drafters.lean_layer): the drafter runs five or six
            # times per step, and the stock modules' plumbing costs more than its math on a CPU
            return rms_norm(self.body.norm, lean_stack(self.body.layers, x, self._rope_table, positions, cache, mask,
                                                       None if int8 is None else int8.layers))
        if int8 is not None:
            raise ValueError("int8 weights run through the lean layer: this drafter's layers keep their stock modules")
        rope = self.body.rotary_emb(x, position_ids=positions)
        h = x
        for layer in self.body.layers:
            h = layer(h, attention_mask=mask, position_ids=positions, position_embeddings=rope,
                      **cache_kwargs(layer, cache))
        return self.body.norm(h)

    def heads(self, h: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [..., sar_tokens, H]: slot j predicts the feature j positions further on."""
        first = h[..., None, :]
        if self.config.sar_tokens == 1:
            return first
        extra = self.sar(h).view(*h.shape[:-1], self.config.sar_tokens - 1, h.shape[-1])
        return torch.cat([first, first + extra], dim=-2)

    # ------------------------------------------------------------------ save / load
    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "feature_drafter.json").write_text(json.dumps(asdict(self.config), indent=2))
        save_file({k: v.detach().contiguous() for k, v in self.state_dict().items()}, str(path / "model.safetensors"))

    @classmethod
    def from_pretrained(cls, path: str | Path, target=None) -> "FeatureDraftModel":
        path = Path(path)
        if not (path / "feature_drafter.json").exists():
            raise ValueError(f"{path} holds no feature drafter (feature_drafter.json missing)")
        config = FeatureDrafterConfig(**json.loads((path / "feature_drafter.json").read_text()))
        if target is not None:
            problem = signature_mismatch(config.target, target)
            if problem:
                raise ValueError(f"the drafter in {path} was trained against another target: {problem}")
        model = cls(config)
        model.load_state_dict(load_file(str(path / "model.safetensors")))
        return model.eval()


def scatter_image_embeds(image_mask: torch.BoolTensor, image_embeds: torch.Tensor | None) -> torch.Tensor | None:
    """[n, H] embeddings in row-major placeholder order -> [B, T, H] (zeros off the image positions)."""
    if image_embeds is None or image_mask is None:
        return None
    n = int(image_mask.sum())
    if image_embeds.shape[0] != n:
        raise ValueError(f"{image_embeds.shape[0]} image embeddings for {n} image positions")
    out = image_embeds.new_zeros(*image_mask.shape, image_embeds.shape[-1])
    out[image_mask] = image_embeds
    return out


def drafter_sequence(net: FeatureDraftModel, embed: nn.Module, tokens: torch.LongTensor, valid: torch.BoolTensor,
                     features: torch.Tensor, image_mask: torch.BoolTensor | None = None,
                     image_embeds: torch.Tensor | None = None, compress_to: int | None = None,
                     align: str = "left") -> tuple[torch.Tensor, torch.BoolTensor, torch.LongTensor]:
    """The drafter's inputs for a batch of token rows.

    Entry p-1 pairs token x_p with feature f_{p-1} (p = 1..T-1; valid when both are real tokens).
    Returns ``(inputs [B, S, H], valid [B, S], token_pos [B, S])``; ``token_pos`` is the token position an
    entry stands for (-1 for compressed image tokens and padding). Rows are left-aligned for inference
    (``align="left"``: padding first, like the prompts) or right-padded for training.
    """
    B, T = tokens.shape
    dt = net.fc.weight.dtype
    x = net.fuse(embed(tokens[:, 1:]).to(dt), features[:, :-1].to(dt))
    ok = valid[:, 1:] & valid[:, :-1]
    pos = torch.arange(1, T, device=tokens.device).expand(B, T - 1)
    img = image_mask[:, 1:] if image_mask is not None else None
    cfg = net.config
    if img is not None and img.any() and cfg.decoupled:
        if image_embeds is None:
            raise ValueError("MSD needs the target's projected image embeddings at the image positions")
        x = torch.where(img[..., None], image_embeds[:, 1:].to(dt), x)
    if img is None or not img.any() or not cfg.compress_tokens:
        return x, ok, torch.where(ok, pos, -1)
    # FLASH: each contiguous run of image positions becomes ``compress_to`` tokens. The masks are read to the
    # host once (not element by element: on a GPU each read is a sync) and text runs are sliced whole.
    ok_l, img_l, valid_l, imask_l = ok.tolist(), img.tolist(), valid.tolist(), image_mask.tolist()
    rows = []
    n = T - 1
    for b in range(B):
        items, where, p = [], [], 0
        okb, imgb = ok_l[b], img_l[b]
        while p < n:
            if not okb[p]:
                p += 1
                continue
            if imgb[p]:
                e = p
                while e < n and imgb[e] and okb[e]:
                    e += 1
                first = p if p == 0 or not okb[p - 1] else p + 1  # an image opening the row: its first
                # placeholder has no entry of its own, but its feature belongs to the image
                if first == p and not (valid_l[b][p] and imask_l[b][p]):
                    first = p + 1
                comp = net.compress(features[b, first: e + 1].to(dt), compress_to)  # f at the image positions
                items.append(comp)
                where.extend([-1] * comp.shape[0])
            else:
                e = p
                while e < n and okb[e] and not imgb[e]:
                    e += 1
                items.append(x[b, p: e])
                where.extend(range(p + 1, e + 1))
            p = e
        rows.append((torch.cat(items) if items else x.new_zeros(0, x.shape[-1]), where))
    S = max(1, max(len(w) for _, w in rows))
    out = x.new_zeros(B, S, x.shape[-1])
    valid_s = torch.zeros(B, S, dtype=torch.bool, device=x.device)
    token_pos = torch.full((B, S), -1, dtype=torch.long, device=x.device)
    for b, (emb, where) in enumerate(rows):
        m = len(where)
        sl = slice(S - m, S) if align == "left" else slice(0, m)
        out[b, sl] = emb
        valid_s[b, sl] = True
        token_pos[b, sl] = torch.tensor(where, dtype=torch.long, device=x.device)
    return out, valid_s, token_pos


def sequence_length(net: FeatureDraftModel, valid: torch.BoolTensor, image_mask: torch.BoolTensor | None = None,
                    compress_to: int | None = None) -> int:
    """The width S of :func:`drafter_sequence`'s inputs for these rows, without computing them: one entry per
    (token, previous feature) pair, each run of image positions counted as its compressed tokens under FLASH."""
    T = valid.shape[1]
    img = image_mask[:, 1:] if image_mask is not None else None
    if img is None or not img.any() or not net.config.compress_tokens:
        return T - 1
    ok = valid[:, 1:] & valid[:, :-1]
    in_image = ok & img
    run_starts = in_image & ~torch.cat([torch.zeros_like(in_image[:, :1]), in_image[:, :-1]], dim=1)
    per_image = compress_to or net.config.compress_tokens
    entries = (ok & ~in_image).sum(1) + per_image * run_starts.sum(1)
    return max(1, int(entries.max()))


__all__ = ["FeatureDrafterConfig", "FeatureDraftModel", "METHODS", "target_signature", "signature_mismatch",
           "drafter_sequence", "scatter_image_embeds", "sequence_length"]
