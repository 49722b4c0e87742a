"""``mmspec bench --suite kernels``: the Triton kernels against their torch references.

With CUDA: the correctness sweep on the GPU (bf16 included), then reference vs Triton timings and the
effective bandwidth of each (the bytes a kernel must move, divided by its time). Without CUDA it says
so, skips the timings (the interpreter's speed means nothing) and runs the correctness sweep in the
Triton interpreter, in a child process.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from ..kernels import sweep
from ..kernels.acceptance import greedy_tree_accept_reference, residual_sample_reference
from ..kernels.dispatch import triton_module
from ..kernels.kv_compaction import compact_kv_reference
from ..kernels.tree_attention import tree_attention_reference
from ..tree import ancestor_mask

# (name, batch, heads, kv heads, head dim, tree nodes, committed prefix): verification-sized shapes
ATTENTION_SHAPES = [
    ("llama-7b-like", 1, 32, 32, 128, 64, 2048),
    ("llama3-8b-like, ragged", 4, 32, 8, 128, 32, 4096),
    ("qwen2-0.5b-like", 8, 14, 2, 64, 16, 1024),
]
COMPACTION_SHAPES = [("8 rows, 8 kv heads, d128, 8 moved", 8, 8, 4096, 128, 8)]  # (name, B, H, S, D, L)
GREEDY_SHAPES = [("4 rows x 64 nodes, V=32000", 4, 64, 32000), ("1 row x 64 nodes, V=128256", 1, 64, 128256)]
RESIDUAL_SHAPES = [("8 rows, V=128256", 8, 128256)]


def _timed(fn, device: str, warmup: int, iters: int) -> float:
    """Mean seconds per call."""
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def _row(kernel: str, shape: str, dtype: torch.dtype, nbytes: int, ref_fn, triton_fn, device: str,
         warmup: int, iters: int) -> dict:
    t_ref = _timed(ref_fn, device, warmup, iters)
    t_tri = _timed(triton_fn, device, warmup, iters)
    return {
        "kernel": kernel, "shape": shape, "dtype": str(dtype).replace("torch.", ""), "bytes": nbytes,
        "reference_ms": 1e3 * t_ref, "triton_ms": 1e3 * t_tri, "speedup": t_ref / t_tri,
        "reference_GBps": nbytes / t_ref / 1e9, "triton_GBps": nbytes / t_tri / 1e9,
    }


def _attention_inputs(batch, heads, kv_heads, dim, nodes, prefix, dtype, device):
    gen = torch.Generator().manual_seed(0)
    lengths = torch.full((batch,), prefix)
    lengths[1::2] = prefix // 2  # ragged: every other row is half as long (stale slots to skip)
    S = prefix + nodes
    q = torch.randn(batch, heads, nodes, dim, generator=gen).to(device, dtype)
    k = torch.randn(batch, kv_heads, S, dim, generator=gen).to(device, dtype)
    v = torch.randn(batch, kv_heads, S, dim, generator=gen).to(device, dtype)
    parents, valid = sweep.random_parents("tree", batch, nodes, gen)
    anc = ancestor_mask(parents) & valid[:, None, :]
    anc |= torch.eye(nodes, dtype=torch.bool)
    prefix_mask = torch.arange(prefix)[None, :] < lengths[:, None]
    mask = torch.cat([prefix_mask[:, None, :].expand(batch, nodes, prefix), anc], dim=2)[:, None].to(device)
    seen = int(lengths.sum()) + batch * nodes  # kv slots each row must read
    nbytes = (seen * kv_heads * dim * 2 + 2 * q.numel()) * q.element_size() + mask.numel()
    return (q, k, v, mask), nbytes


def time_kernels(device: str, dtype: torch.dtype = torch.float16, attention=ATTENTION_SHAPES,
                 compaction=COMPACTION_SHAPES, greedy=GREEDY_SHAPES, residual=RESIDUAL_SHAPES,
                 warmup: int = 3, iters: int = 20) -> list[dict]:
    """Reference vs Triton per kernel and shape (Triton must be runnable on ``device``)."""
    triton_acceptance = triton_module("triton_acceptance")
    triton_kv_compaction = triton_module("triton_kv_compaction")
    triton_tree_attention = triton_module("triton_tree_attention")
    rows = []
    for name, B, H, Hkv, D, T, P in attention:
        args, nbytes = _attention_inputs(B, H, Hkv, D, T, P, dtype, device)
        rows.append(_row("tree_attention", name, dtype, nbytes, lambda args=args: tree_attention_reference(*args),
                         lambda args=args: triton_tree_attention.tree_attention(*args), device, warmup, iters))
    for name, B, H, S, D, L in compaction:
        keys = torch.randn(B, H, S + 1, D, device=device, dtype=dtype)
        values = torch.randn_like(keys)
        src = (S - 2 * L + 2 * torch.arange(L, device=device)).expand(B, L).contiguous()
        dst = (S - 3 * L + torch.arange(L, device=device)).expand(B, L).contiguous()
        nbytes = 2 * 2 * B * H * L * D * keys.element_size()  # read + write, keys and values

        def compact_reference(keys=keys, values=values, src=src, dst=dst):
            compact_kv_reference(keys, values, src, dst)

        def compact_triton(keys=keys, values=values, src=src, dst=dst):
            triton_kv_compaction.compact_(keys, src, dst)
            triton_kv_compaction.compact_(values, src, dst)

        rows.append(_row("kv_compaction", name, dtype, nbytes, compact_reference, compact_triton, device, warmup,
                         iters))
    for name, B, N, V in greedy:
        gen = torch.Generator().manual_seed(1)
        parents, valid = sweep.random_parents("tree", B, N, gen)
        logits = torch.randn(B, N, V, generator=gen).to(device, torch.float32)
        tokens = logits.argmax(-1).gather(1, parents.clamp(min=0).to(device))
        depth = int((ancestor_mask(parents).sum(-1) - 1).max())
        args = (logits, tokens, parents.to(device), valid.to(device), depth)
        rows.append(_row("greedy_accept", name, torch.float32, logits.numel() * 4,
                         lambda args=args: greedy_tree_accept_reference(*args),
                         lambda args=args: triton_acceptance.greedy_tree_accept(*args), device, warmup, iters))
    for name, R, V in residual:
        p = torch.softmax(torch.randn(R, V, device=device), -1)
        q = torch.softmax(torch.randn(R, V, device=device), -1)
        u = torch.rand(R, device=device)
        rows.append(_row("residual_sample", name, torch.float32, 2 * p.numel() * 4,
                         lambda p=p, q=q, u=u: residual_sample_reference(p, q, u),
                         lambda p=p, q=q, u=u: triton_acceptance.residual_sample(p, q, u), device, warmup, iters))
    return rows


def run_kernel_suite(out_dir: str | Path | None = None, full: bool = True) -> dict:
    """The suite's report (also written as ``kernels_bench.json`` / ``.md`` under ``out_dir``)."""
    import triton  # optional (Linux only in pyproject): the suite reports its version where it runs

    cuda = torch.cuda.is_available()
    report: dict = {"suite": "kernels", "cuda": cuda, "triton": triton.__version__, "torch": torch.__version__}
    if cuda:
        report["device"] = torch.cuda.get_device_name()
        report["sweep"] = sweep.run_sweep(full=full, device="cuda")
        report["timings"] = time_kernels("cuda", torch.float16) + time_kernels(
            "cuda", torch.bfloat16, compaction=(), greedy=(), residual=())
    else:
        report["device"] = "cpu"
        report["note"] = ("no CUDA device: reference vs Triton timings skipped; the correctness sweep ran in the "
                          "Triton interpreter (TRITON_INTERPRET=1, no bf16)")
        report["sweep"] = sweep.run_sweep_interpreted(full=full)
        report["timings"] = []
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "kernels_bench.json").write_text(json.dumps(report, indent=2))
        (out / "kernels_bench.md").write_text(to_markdown(report))
    return report


def to_markdown(report: dict) -> str:
    s = report["sweep"]
    where = "Triton interpreter on CPU" if s.get("interpreted") else report["device"]
    lines = [f"# mmspec kernels ({report['device']}, triton {report['triton']})", ""]
    if report.get("note"):
        lines += [report["note"], ""]
    lines += [f"Correctness sweep ({where}): **{s['passed']}/{s['cases']}** cases match the torch references "
              f"({s['seconds']:.1f} s).", "", "| kernel | cases | passed |", "|---|---:|---:|"]
    lines += [f"| {k} | {v['cases']} | {v['passed']} |" for k, v in s["by_kernel"].items()]
    for f in s["failures"]:
        lines.append(f"\nFAILED {f['id']}: {json.dumps({k: v for k, v in f.items() if k not in ('id', 'kernel')})}")
    if report["timings"]:
        lines += ["", "| kernel | shape | dtype | reference ms | Triton ms | speedup | reference GB/s | Triton GB/s |",
                  "|---|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['kernel']} | {r['shape']} | {r['dtype']} | {r['reference_ms']:.3f} | {r['triton_ms']:.3f} "
                  f"| {r['speedup']:.2f}× | {r['reference_GBps']:.1f} | {r['triton_GBps']:.1f} |"
                  for r in report["timings"]]
    return "\n".join(lines) + "\n"
