"""Kernels with a torch reference on every device (Triton versions arrive with the kernels issue)."""

from .kv_compaction import compact_kv_

__all__ = ["compact_kv_"]
