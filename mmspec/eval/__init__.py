"""Evaluation: side-by-side benchmarks with tau, speedup and exactness."""

from .bench import ALL_METHODS, compare, run_bench, to_markdown, write_report

__all__ = ["ALL_METHODS", "compare", "run_bench", "to_markdown", "write_report"]
