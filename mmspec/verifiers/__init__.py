"""Tree verification: one target pass over a DraftTree plus an acceptance rule."""

from .acceptance import AcceptResult, greedy_accept, sampling_accept
from .logits import SamplingConfig
from .tree_forward import tree_forward
from .tree_verifier import TreeVerifier, Verification

__all__ = ["AcceptResult", "greedy_accept", "sampling_accept", "SamplingConfig", "tree_forward",
           "TreeVerifier", "Verification"]
