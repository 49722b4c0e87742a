"""Visual AR generation over VQ codes (LlamaGen-style): the token layout a target's config records, plain
AR sampling with classifier-free guidance, and turning codes back into pictures. The image generators and the
pipeline's image route run on these; the zoo's image family builds its models with them.

Token layout (:class:`TokenLayout`, stored in an AR model's ``config.json`` as ``mmspec_image_layout``): code
ids ``code_offset .. code_offset + codebook_size - 1`` (the VQ indices), then one token per class
(``class_offset + c``), then the null class (``null_id``) used for the unconditional rows of CFG. A sequence
is ``[class token] + codes in raster order``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from .cache import SpecKVCache
from .guidance import DEFAULT_CFG_SCALE, CFGModel
from .verifiers.coupling import GumbelNoise, check_coupling, gumbel_pick
from .verifiers.tree_forward import tree_forward

LAYOUT_KEY = "mmspec_image_layout"


@dataclass(frozen=True)
class TokenLayout:
    codebook_size: int
    num_classes: int
    grid: int  # codes per side: an image is grid * grid tokens
    code_offset: int = 0

    @property
    def class_offset(self) -> int:
        return self.code_offset + self.codebook_size

    @property
    def null_id(self) -> int:
        return self.class_offset + self.num_classes

    @property
    def vocab_size(self) -> int:
        return self.null_id + 1

    @property
    def num_codes(self) -> int:
        return self.grid * self.grid

    @property
    def seq_len(self) -> int:
        """Tokens of one training sequence: the class token plus the image's codes."""
        return 1 + self.num_codes

    def class_tokens(self, class_ids) -> torch.Tensor:
        """Class ids -> class token ids; ``-1`` (or ``None`` entries) -> the null (unconditional) token."""
        ids = torch.as_tensor([-1 if c is None else int(c) for c in class_ids] if isinstance(class_ids, (list, tuple))
                              else class_ids, dtype=torch.long)
        if ((ids < -1) | (ids >= self.num_classes)).any():
            raise ValueError(f"class ids must lie in -1..{self.num_classes - 1}")
        return torch.where(ids < 0, torch.full_like(ids, self.null_id), ids + self.class_offset)

    def codes_to_tokens(self, codes: torch.Tensor) -> torch.Tensor:
        return codes + self.code_offset

    def tokens_to_codes(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens - self.code_offset

    def to_dict(self, classes=None) -> dict:
        """What zoo.json and ``config.mmspec_image_layout`` record (``classes``: the class names, when known)."""
        d = asdict(self)
        d.update(class_offset=self.class_offset, null_id=self.null_id, vocab_size=self.vocab_size,
                 seq_len=self.seq_len)
        if classes is not None:
            d["classes"] = list(classes)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TokenLayout":
        return cls(codebook_size=int(d["codebook_size"]), num_classes=int(d["num_classes"]), grid=int(d["grid"]),
                   code_offset=int(d.get("code_offset", 0)))


def layout_of(model) -> TokenLayout:
    """The token layout stored in an AR model's config (``config.mmspec_image_layout``)."""
    d = getattr(model.config, LAYOUT_KEY, None)
    if d is None:
        raise ValueError("model config carries no mmspec_image_layout; pass layout= explicitly")
    return TokenLayout.from_dict(d)


@torch.no_grad()
def decode_codes(vq, codes: torch.Tensor, grid: int | None = None) -> torch.Tensor:
    """Code ids [B, h * w] (or [B, h, w]) -> pictures [B, 3, H, W] in [-1, 1] (clamped)."""
    codes = codes.long().to(vq.device)
    if codes.dim() == 3:
        b, gh, gw = codes.shape
    else:
        b, n = codes.shape
        gh = gw = grid or int(round(n ** 0.5))
        if gh * gw != n:
            raise ValueError(f"{n} codes do not form a square grid; pass grid=")
    dim = vq.quantize.embedding.weight.shape[1]
    quant = vq.quantize.get_codebook_entry(codes.reshape(-1), (b, gh, gw, dim))
    return vq.decode(quant, force_not_quantize=True).sample.clamp(-1, 1)


def codebook(vq) -> torch.Tensor:
    """The VQ codebook E [codebook_size, d] (LANTERN's latent neighbourhoods are L2 distances in it)."""
    return vq.quantize.embedding.weight.detach()


def cfg_logits(cond: torch.Tensor, uncond: torch.Tensor, scale: float) -> torch.Tensor:
    """Classifier-free guidance: uncond + s * (cond - uncond)."""
    return uncond + scale * (cond - uncond)


def restrict_to_codes(logits: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
    """Logits over the code ids only ([..., codebook_size]); index i is code i."""
    return logits[..., layout.code_offset: layout.code_offset + layout.codebook_size]


def sample_from_logits(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                       generator: torch.Generator | None = None) -> torch.Tensor:
    """One draw per row; ``temperature <= 0`` is greedy (argmax)."""
    if temperature <= 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if generator is not None and generator.device != probs.device:
        # a CPU generator driving a model on a GPU: draw on the CPU (the same draws as a CPU run would make
        # from these probabilities), hand the codes back on the model's device
        return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(probs.device)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate_codes(target, class_ids, cfg_scale: float = DEFAULT_CFG_SCALE, temperature: float = 1.0, top_k: int = 0,
                   generator: torch.Generator | None = None, layout: TokenLayout | None = None,
                   streamer=None, coupling: str = "rejection") -> torch.Tensor:
    """Plain AR sampling of code ids [B, grid * grid], one row per class id (-1: unconditional).
    ``coupling="gumbel"``: each code is argmax(logits / T + the position's Gumbel noise), the noise drawn as the
    speculative loop draws it (:class:`~mmspec.verifiers.coupling.GumbelNoise`), so a seed gives the same picture
    as any drafter under the same coupling.

    With ``cfg_scale != 1`` the conditional and unconditional (null-class) rows run together as one batch of
    2B rows with a shared KV cache; each step samples from uncond + s * (cond - uncond) restricted to codes.
    The cache is mmspec's preallocated one (the same writes and views as every speculative method's): a growing
    cache re-copies itself every step, which made sampling 64 pictures of 256 codes on a CPU 2.4x slower."""
    layout = layout or layout_of(target)
    if coupling == "gumbel" and top_k:
        raise ValueError("generate_codes: coupling='gumbel' samples the whole distribution (top_k must be 0)")
    cls_tok = layout.class_tokens(class_ids).to(target.device)
    b = cls_tok.shape[0]
    guided = cfg_scale != 1.0
    ids = (torch.cat([cls_tok, torch.full_like(cls_tok, layout.null_id)]) if guided else cls_tok)[:, None]
    rows = ids.shape[0]
    cache = SpecKVCache.for_model(target, rows, layout.num_codes + 1)
    root = torch.full((rows, 1), -1, dtype=torch.long, device=target.device)  # each step: one token per row
    real = torch.ones(rows, 1, dtype=torch.bool, device=target.device)
    keep = torch.ones(rows, dtype=torch.long, device=target.device)
    out = []
    if streamer is not None:  # HF's streamer protocol, as the speculative methods feed it: prompt, then each token
        streamer.put(cls_tok[:, None].cpu())
    try:
        _sample_codes(target, ids, cache, root, real, keep, layout, b, guided, cfg_scale, temperature, top_k,
                      generator, out, streamer, check_coupling(coupling, temperature > 0) == "gumbel")
    finally:
        if streamer is not None:
            streamer.end()
    return torch.stack(out, dim=1)


def _sample_codes(target, ids, cache, root, real, keep, layout, b, guided, cfg_scale, temperature, top_k, generator,
                  out, streamer, gumbel: bool = False) -> None:
    noise = None
    with torch.no_grad():
        for step in range(layout.num_codes):
            logits = tree_forward(target, cache, ids, root, real, direct=True).logits[:, -1].float()
            cache.commit_first(keep)
            if gumbel and noise is None:  # over the whole vocabulary, as the speculative loop's (the same draws)
                noise = GumbelNoise.for_call(b, logits.shape[-1], generator, logits.device)
            logits = restrict_to_codes(logits, layout)
            if guided:
                logits = cfg_logits(logits[:b], logits[b:], cfg_scale)
            if noise is not None:
                at = torch.full((b, 1), step, dtype=torch.long, device=logits.device)
                code = gumbel_pick(logits / temperature, restrict_to_codes(noise.at(at)[:, 0], layout))
            else:
                code = sample_from_logits(logits, temperature, top_k, generator)
            out.append(code)
            tok = layout.codes_to_tokens(code)
            if streamer is not None:
                streamer.put(tok[:, None].cpu())
            ids = torch.cat([tok, tok])[:, None] if guided else tok[:, None]


def guided_on_codes(model, layout: "TokenLayout", cfg_scale: float, feature_entries=None,
                    feature_branches: int = 1) -> CFGModel:
    """``model`` under classifier-free guidance with ``layout``'s null class, its logits restricted to the image
    codes (``feature_entries``: the guided ``hidden_states`` entries a drafter reads, :class:`CFGModel`)."""
    codes = torch.arange(layout.code_offset, layout.code_offset + layout.codebook_size)
    return CFGModel(model, cfg_scale, layout.null_id, codes, feature_entries=feature_entries,
                    feature_branches=feature_branches)


def guided_for_dflash(model, layout: "TokenLayout", cfg_scale: float, net) -> CFGModel:
    """:func:`guided_on_codes` returning the features DFlash drafter ``net`` reads: its layers' entries, guided or
    (``net.feature_branches`` = 2) both branches side by side."""
    return guided_on_codes(model, layout, cfg_scale, net.hidden_entries, net.feature_branches)


__all__ = ["guided_on_codes", "guided_for_dflash", "LAYOUT_KEY", "TokenLayout", "layout_of", "decode_codes", "codebook", "cfg_logits", "restrict_to_codes",
           "sample_from_logits", "generate_codes"]
