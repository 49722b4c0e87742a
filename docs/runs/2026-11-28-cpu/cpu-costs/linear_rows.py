"""One matmul of the code target's MLP shape (256 -> 704) at M rows, 1 and 2 threads: MKL's cost per row count.

    python linear_rows.py"""
import time

import torch
import torch.nn.functional as F

W = torch.randn(704, 256)


def tm(f, n=2000):
    for _ in range(50):
        f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6


for th in (1, 2):
    torch.set_num_threads(th)
    row = []
    for M in (1, 2, 4, 8, 16, 32, 48):
        x = torch.randn(1, M, 256)
        row.append(f"M{M}:{tm(lambda: F.linear(x, W)):.1f}")
    print("threads", th, " ".join(row), "(microseconds)")
