"""LM-head logits at chosen positions only, for training losses that read a few positions of each row.

A small drafter's LM head (vocabulary 4096 x hidden 192) costs about as much as its decoder layers, and the
softmax over the vocabulary more; a loss that reads only the masked slots of a diffusion batch, or only the real
(unpadded) tokens of ragged rows, need not pay for the rest. For the stock families whose causal-LM class is the
base model followed by a linear head (``verifiers.tree_forward.DIRECT_CLASSES``) the head is applied to the
selected hidden states only; any other model (remote-code diffusion LMs, say) runs whole and its logits are
indexed, with the same result.
"""

from __future__ import annotations

import torch

from ..verifiers.tree_forward import DIRECT_CLASSES


def logits_at(model, where: torch.BoolTensor, **forward_kwargs) -> torch.Tensor:
    """``model(**forward_kwargs).logits[where]`` ([N, V], rows in ``where``'s row-major order), computing the LM
    head on those N positions only where the model's class allows."""
    head = model.get_output_embeddings() if type(model).__name__ in DIRECT_CLASSES else None
    if head is None or getattr(head, "bias", None) is not None:
        return model(**forward_kwargs).logits[where]
    hidden = model.model(**forward_kwargs).last_hidden_state
    return head(hidden[where])


def predictors_of(targets: torch.BoolTensor) -> torch.BoolTensor:
    """The positions whose output predicts the ``targets`` positions when position i predicts token i + 1 (causal
    LMs, and diffusion LMs in the Dream convention): ``targets`` shifted left by one. Position 0 is never
    predicted, so ``targets[:, 0]`` must be False."""
    if targets[:, 0].any():
        raise ValueError("position 0 has no predictor when position i predicts token i + 1")
    out = torch.zeros_like(targets)
    out[:, :-1] = targets[:, 1:]
    return out


__all__ = ["logits_at", "predictors_of"]
