"""The verifier's hot paths: each kernel has a torch reference and a Triton version of the same signature.

CUDA tensors run Triton, anything else the reference; ``MMSPEC_KERNELS=auto|triton|torch`` overrides
(see ``dispatch.py`` and ``docs/kernels.md``). Importing this package registers the ``"mmspec_tree"``
attention with transformers.
"""

from .acceptance import (
    greedy_tree_accept,
    greedy_tree_accept_reference,
    residual_sample,
    residual_sample_reference,
)
from .dispatch import ENV_VAR, backend_for, backend_for_device
from .kv_compaction import compact_kv_, compact_kv_reference
from .tree_attention import (
    ATTENTION_NAME,
    mmspec_tree_attention,
    prefer_tree_attention,
    tree_attention,
    tree_attention_reference,
    use_tree_attention,
)

__all__ = [
    "ATTENTION_NAME", "ENV_VAR", "backend_for", "backend_for_device", "compact_kv_", "compact_kv_reference",
    "greedy_tree_accept", "greedy_tree_accept_reference", "mmspec_tree_attention", "prefer_tree_attention",
    "residual_sample", "residual_sample_reference", "tree_attention", "tree_attention_reference", "use_tree_attention",
]
