"""Training objectives for masked diffusion LMs run on stock HF causal-LM classes.

* :func:`mdlm_loss` — the masked-diffusion ELBO (Sahoo et al. 2024, MDLM eq. 10; Nie et al. 2025,
  LLaDA eq. 3): draw t ~ U(0, 1), mask every token with probability t, and weight the masked-token
  cross-entropy by 1/t. Attention is fully bidirectional.
* :func:`block_loss` — the drafting regime: a clean prefix followed by a block of masks (what the
  drafter sees at inference), with per-slot weights; DEER's two stages are weightings of it.

Both handle the two logits conventions (``"dream"``: position i predicts i+1; ``"llada"``: a masked
position predicts itself).

Devices: the tensors given (tokens, lengths, weights) must be on the model's device; every tensor made here
is made on that device too, except the random draws of :func:`mdlm_loss`, which come from the CPU (or the
generator's device) so a seeded run draws the same masks on every device.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .logits import logits_at, predictors_of
from .loop import model_device


def attention_mask(valid: torch.BoolTensor, n_clean: torch.LongTensor | None, pattern: str) -> torch.BoolTensor:
    """[B, 1, T, T] visibility. ``"bidirectional"``: every valid token sees every valid token.
    ``"cache"``: clean tokens (the first ``n_clean[b]``) see earlier clean tokens only, the mask block
    sees everything — exactly what :class:`~mmspec.drafters.DiffusionLM` computes with ``context="cache"``."""
    B, T = valid.shape
    vis = valid[:, None, :] & valid[:, :, None]
    if pattern == "cache":
        col = torch.arange(T, device=valid.device)
        causal = col[None, :, None] >= col[None, None, :]
        clean_q = col[None, :] < n_clean[:, None]  # [B, T] query rows that are clean
        vis = vis & (causal | ~clean_q[:, :, None])
    elif pattern != "bidirectional":
        raise ValueError(f"unknown attention pattern {pattern!r}")
    vis = vis | torch.eye(T, dtype=torch.bool, device=valid.device)[None]  # no empty rows (padding)
    return vis[:, None]


def slot_logits(model, ids: torch.Tensor, mask4d: torch.Tensor, convention: str) -> torch.Tensor:
    """Logits aligned with the tokens they predict: out[:, i] predicts token i."""
    T = ids.shape[1]
    logits = model(input_ids=ids, attention_mask=mask4d, position_ids=torch.arange(T, device=ids.device)[None],
                   use_cache=False).logits
    if convention == "dream":
        logits = torch.cat([logits[:, :1] * 0, logits[:, :-1]], dim=1)  # position 0 is never predicted
    return logits


def mdlm_loss(model, tokens: torch.Tensor, mask_id: int, convention: str = "dream",
              generator: torch.Generator | None = None, eps: float = 1e-3) -> torch.Tensor:
    """MDLM/LLaDA objective on a batch of clean windows [B, T] (no padding). The LM head runs on the masked
    slots only (:func:`~mmspec.training.logits.logits_at`)."""
    B, T = tokens.shape
    # drawn where the generator lives (the CPU for the zoo's), then moved: the same masks on every device
    draw_on = generator.device if generator is not None else torch.device("cpu")
    t = torch.rand(B, 1, generator=generator, device=draw_on).clamp(min=eps)
    masked = torch.rand(B, T, generator=generator, device=draw_on) < t
    if convention == "dream":
        masked[:, 0] = False  # nothing predicts the first token under the shifted convention
    t, masked = t.to(tokens.device), masked.to(tokens.device)
    ids = torch.where(masked, mask_id, tokens)
    valid = torch.ones(B, T, dtype=torch.bool, device=tokens.device)
    ce = _slot_ce(model, ids, attention_mask(valid, None, "bidirectional"), convention, masked, tokens)
    return ((ce * masked).sum(1) / t.squeeze(1) / T).mean()


def _slot_ce(model, ids: torch.Tensor, mask4d: torch.Tensor, convention: str, slots: torch.BoolTensor,
             tokens: torch.Tensor, teacher_logp: torch.Tensor | None = None) -> torch.Tensor:
    """[B, T]: at each ``slots`` position the cross-entropy of its token (or KL(teacher || model) with
    ``teacher_logp``), 0 elsewhere; the LM head and softmax run on those positions only."""
    B, T = ids.shape
    source = predictors_of(slots) if convention == "dream" else slots
    logits = logits_at(model, source, input_ids=ids, attention_mask=mask4d,
                       position_ids=torch.arange(T, device=ids.device)[None], use_cache=False).float()
    if teacher_logp is None:
        picked = F.cross_entropy(logits, tokens[slots], reduction="none")
    else:
        teacher = teacher_logp[slots]
        picked = (teacher.exp() * (teacher - torch.log_softmax(logits, -1))).sum(-1)
    ce = torch.zeros(B, T, dtype=picked.dtype, device=ids.device)
    ce[slots] = picked
    return ce


def _block_inputs(tokens, lengths, n_clean, mask_id: int, pattern: str, pad_id: int):
    """Mask the block ``[n_clean, lengths)`` of each row (right padding after): (block, input ids, 4-D mask)."""
    T = tokens.shape[1]
    col = torch.arange(T, device=tokens.device)[None, :]
    valid = col < lengths[:, None]
    block = valid & (col >= n_clean[:, None])
    ids = torch.where(block, mask_id, torch.where(valid, tokens, pad_id))
    return block, ids, attention_mask(valid, n_clean, pattern)


def block_loss(model, tokens: torch.Tensor, lengths: torch.LongTensor, n_clean: torch.LongTensor,
               weights: torch.Tensor, mask_id: int, convention: str = "dream", pattern: str = "cache",
               pad_id: int = 0, row_weights: torch.Tensor | None = None, clean_weight: float = 0.0,
               teacher_logp: torch.Tensor | None = None) -> torch.Tensor:
    """Clean prefix ``tokens[b, :n_clean[b]]`` then masks up to ``lengths[b]`` (right padding after).

    ``weights`` [B, T] weighs each masked slot's cross-entropy within its row (Σ w·CE / Σ w);
    ``row_weights`` [B] weighs the rows against each other (default: equally). ``clean_weight`` > 0 adds
    the next-token loss on the clean prefix (Dream convention: a clean position predicting the next clean
    token), which keeps the causal path that predicts slot 1 from drifting while the slots are learned.
    ``teacher_logp`` [B, T, V] (aligned like the slots: entry i is the teacher's distribution of token i)
    replaces the cross-entropy on the tokens by KL(teacher || drafter): soft distillation."""
    T = tokens.shape[1]
    block, ids, mask4d = _block_inputs(tokens, lengths, n_clean, mask_id, pattern, pad_id)
    col = torch.arange(T, device=tokens.device)[None, :]
    clean = (col >= 1) & (col < n_clean[:, None])  # clean tokens predicted from the clean token before
    use_clean = clean_weight > 0 and convention == "dream"
    read = block | clean if use_clean else block.clone()
    if convention == "dream":
        read[:, 0] = False  # nothing predicts position 0 (its slot, if masked, adds no gradient either way)
    ce = _slot_ce(model, ids, mask4d, convention, read, tokens, teacher_logp)
    w = weights * block
    per_row = (ce * w).sum(1) / w.sum(1).clamp(min=1e-8)
    loss = per_row.mean() if row_weights is None else (per_row * row_weights).sum() / row_weights.sum()
    if use_clean:
        loss = loss + clean_weight * (ce * clean).sum() / clean.sum().clamp(min=1)
    return loss


@torch.no_grad()
def block_agreement(model, tokens: torch.Tensor, lengths: torch.LongTensor, n_clean: torch.LongTensor,
                    mask_id: int, convention: str = "dream", pattern: str = "cache", pad_id: int = 0) -> dict:
    """Greedy drafting quality on (prefix, continuation) pairs: per row, how many leading slots' argmax
    equal the continuation (= tokens a greedy verifier would accept from a chain of that block), and
    the per-slot hit rate."""
    B, T = tokens.shape
    block, ids, mask4d = _block_inputs(tokens, lengths, n_clean, mask_id, pattern, pad_id)
    logits = slot_logits(model, ids, mask4d, convention)
    hit = (logits.argmax(-1) == tokens) & block
    k = int((lengths - n_clean).max())
    slots = torch.arange(k, device=tokens.device)[None, :]
    idx = (n_clean[:, None] + slots).clamp(max=T - 1)
    slot_hit = hit.gather(1, idx) & (slots < (lengths - n_clean)[:, None])
    run = slot_hit.long().cumprod(1).sum(1)
    return {"accepted": float(run.float().mean()), "slot_hit": slot_hit.float().mean(0).tolist()}


@torch.no_grad()
def teacher_slot_logp(teacher, tokens: torch.Tensor, lengths: torch.LongTensor) -> torch.Tensor:
    """The AR teacher's next-token log-probs on the clean sequences, aligned so entry i is its distribution
    of token i (given tokens < i); entry 0 is uniform (never used). Runs on the teacher's device; the result is
    on ``tokens``' device (the student's)."""
    device = model_device(teacher)
    ids, lengths = tokens.to(device), lengths.to(device)
    valid = (torch.arange(ids.shape[1], device=device)[None, :] < lengths[:, None]).long()
    logp = torch.log_softmax(teacher(input_ids=ids, attention_mask=valid).logits.float(), -1)
    return torch.cat([torch.full_like(logp[:, :1], -math.log(logp.shape[-1])), logp[:, :-1]], dim=1).to(tokens.device)


__all__ = ["attention_mask", "slot_logits", "mdlm_loss", "block_loss", "block_agreement", "teacher_slot_logp"]
