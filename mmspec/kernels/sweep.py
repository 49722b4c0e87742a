"""The kernels' correctness sweep: each Triton kernel against its torch reference over generated cases.

Shared by the tests (``tests/kernels/test_kernels_interpret.py`` parametrises over the same cases) and by
``mmspec bench --suite kernels``. Without a GPU the Triton side needs the interpreter, which must be on
before triton is first imported, so :func:`run_sweep_interpreted` runs the sweep in a child process
(``python -m mmspec.kernels.sweep``) with ``TRITON_INTERPRET=1``.

Cases cover random trees, chains and single-node trees, ragged batches (per-row left padding and
committed lengths, so shorter rows have stale slots), nodes appended level by level on top of pending
ones, a tree ending exactly at the cache end, a sliding window, GQA ratios 1/2/4, head dims 16/32/64,
and fp32/fp16 (bf16 only on CUDA: the interpreter computes with numpy, which has no bfloat16).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time

import torch

from ..cache import SpecKVCache
from ..tree import ancestor_mask
from .acceptance import greedy_tree_accept_reference, residual_sample_reference
from .dispatch import interpreting, triton_available, triton_module
from .kv_compaction import compact_kv_reference
from .tree_attention import tree_attention_reference

GQA_RATIOS = (1, 2, 4)
HEAD_DIMS = (16, 32, 64)
SHAPES = ("tree", "chain", "single", "cache_end", "levels", "window")
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
ATOL = {"fp32": 2e-5, "fp16": 2e-3, "bf16": 2e-2}
# tree nodes per attention case: 40 nodes x GQA 4 spans several query blocks of the kernel
NODES = {"tree": 40, "chain": 13, "single": 1, "cache_end": 20, "levels": 24, "window": 13}


def _dtypes(device: str) -> tuple[str, ...]:
    return ("fp32", "fp16", "bf16") if torch.device(device).type == "cuda" else ("fp32", "fp16")


# ---------------------------------------------------------------------- cases
def attention_cases(full: bool = False, device: str = "cpu") -> list[dict]:
    """Every GQA ratio x head dim x tree shape; the default set alternates the dtypes over them, the full
    set takes every dtype for each."""
    cases = []
    combos = list(itertools.product(GQA_RATIOS, HEAD_DIMS, SHAPES))
    dtypes = _dtypes(device)
    for i, (ratio, dim, shape) in enumerate(combos):
        for dtype in dtypes if full else (dtypes[i % len(dtypes)],):
            cases.append(dict(kernel="tree_attention", ratio=ratio, head_dim=dim, shape=shape, dtype=dtype))
    for i, c in enumerate(cases):
        c["seed"] = i
        c["id"] = f"attn-gqa{c['ratio']}-d{c['head_dim']}-{c['shape']}-{c['dtype']}"
    return cases


def compaction_cases(full: bool = False, device: str = "cpu") -> list[dict]:
    shapes = ("tree", "chain", "single", "cache_end")
    dtypes = _dtypes(device)
    grid = itertools.product(shapes, (16, 64), dtypes) if full else [
        ("tree", 16, "fp32"), ("chain", 64, "fp16"), ("single", 32, "fp32"), ("cache_end", 64, "fp32")]
    return [dict(kernel="kv_compaction", shape=s, head_dim=d, dtype=t, seed=i,
                 id=f"compact-{s}-d{d}-{t}") for i, (s, d, t) in enumerate(grid)]


def greedy_cases(full: bool = False, device: str = "cpu") -> list[dict]:
    grid = itertools.product(("tree", "chain", "single", "wide"), (50, 5000), ("fp32", "fp16")) if full else [
        ("tree", 50, "fp32"), ("chain", 5000, "fp16"), ("single", 50, "fp32"), ("wide", 5000, "fp32")]
    return [dict(kernel="greedy_accept", shape=s, vocab=v, dtype=t, seed=i, id=f"greedy-{s}-v{v}-{t}")
            for i, (s, v, t) in enumerate(grid)]


def residual_cases(full: bool = False, device: str = "cpu") -> list[dict]:
    grid = itertools.product((7, 100, 5000), ("fp32", "fp64")) if full else [(7, "fp64"), (5000, "fp32")]
    return [dict(kernel="residual_sample", vocab=v, dtype=t, seed=i, id=f"residual-v{v}-{t}")
            for i, (v, t) in enumerate(grid)]


def all_cases(full: bool = False, device: str = "cpu", repeats: int = 1) -> list[dict]:
    """Every kernel's cases; ``repeats > 1`` adds copies with other seeds (other trees, lengths, data)."""
    cases = (attention_cases(full, device) + compaction_cases(full, device) + greedy_cases(full, device)
             + residual_cases(full, device))
    return [dict(c, seed=c["seed"] + 1000 * r, id=c["id"] + (f"-s{r}" if r else ""))
            for r in range(repeats) for c in cases]


# ---------------------------------------------------------------------- random trees and caches
def random_parents(shape: str, batch: int, nodes: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(parents, valid)`` [batch, nodes]: topologically ordered trees, rows using ragged node counts."""
    if shape == "single":
        nodes = 1
    n = torch.arange(nodes)
    if shape in ("chain",):
        parents = (n - 1).expand(batch, nodes).clone()
    elif shape == "wide":  # every draft hangs off the root
        parents = torch.zeros(batch, nodes, dtype=torch.long)
    else:
        parents = (torch.rand(batch, nodes, generator=gen) * n.clamp(min=1)).long()
    parents[:, 0] = -1
    counts = torch.randint(1, nodes + 1, (batch,), generator=gen)
    counts[0] = nodes  # one full row
    valid = n[None, :] < counts[:, None]
    return parents, valid


def _ragged_cache(batch: int, nodes: int, shape: str, gen: torch.Generator, device: str):
    """A cache with per-row padding and committed lengths, plus ``(positions, mask)`` for ``nodes`` new
    pending nodes (appended in two levels for the "levels" shape)."""
    lengths = torch.randint(5, 200 if shape == "tree" else 90, (batch,), generator=gen)
    starts = (torch.rand(batch, generator=gen) * lengths * 0.5).long()
    base = int(lengths.max())
    tree_shape = "tree" if shape in ("cache_end", "levels", "window") else shape
    parents, valid = random_parents(tree_shape, batch, nodes, gen)
    nodes = parents.shape[1]
    # "cache_end": the pending block ends exactly at the last slot of the cache
    max_len = base + nodes + (0 if shape == "cache_end" else 7)
    # "window": a sliding-window model's mask (each node sees only the last 24 positions)
    cache = SpecKVCache(1, batch, max_len, device=device, sliding_window=24 if shape == "window" else None)
    cache.lengths, cache.starts = lengths.to(device), starts.to(device)
    if shape == "levels" and nodes > 2:
        first = nodes // 2
        cache.prepare_append(parents[:, :first].to(device), valid[:, :first].to(device))
        _, mask = cache.prepare_append(parents[:, first:].to(device), valid[:, first:].to(device))
    else:
        _, mask = cache.prepare_append(parents.to(device), valid.to(device))
    if mask is None:  # one unpadded row's decode step sees every slot: the kernels still get that mask spelled out
        mask = torch.ones(batch, 1, nodes, base + nodes, dtype=torch.bool, device=device)
    return cache, mask


# ---------------------------------------------------------------------- checks
def _attention_inputs(case: dict, device: str):
    gen = torch.Generator().manual_seed(case["seed"])
    dtype = DTYPES[case["dtype"]]
    batch = 1 if case["shape"] == "single" else 3
    kv_heads = 2 if case["ratio"] < 4 else 1
    heads, dim = kv_heads * case["ratio"], case["head_dim"]
    cache, mask = _ragged_cache(batch, NODES[case["shape"]], case["shape"], gen, device)
    T, S = mask.shape[-2:]
    # K/V live in a preallocated buffer (as in SpecKVCache) and are read through a slice of it; slots no
    # query of a row may see hold large values, so a masking error cannot hide
    size = cache.max_len + 1
    k_buf = torch.randn(batch, kv_heads, size, dim, generator=gen)
    v_buf = torch.randn(batch, kv_heads, size, dim, generator=gen)
    unseen = ~mask[:, 0].any(1).cpu()  # [B, S]
    loud = torch.where(unseen, 50.0, 1.0)[:, None, :, None]
    k_buf[:, :, :S] *= loud
    v_buf[:, :, :S] *= loud
    q = torch.randn(batch, T, heads, dim, generator=gen).transpose(1, 2)  # HF's [B, H, T, D] view
    k = k_buf.to(device, dtype)[:, :, :S]
    v = v_buf.to(device, dtype)[:, :, :S]
    return q.to(device, dtype), k, v, mask


def check_attention(case: dict, triton_fn, device: str) -> dict:
    q, k, v, mask = _attention_inputs(case, device)
    ref = tree_attention_reference(q.float(), k.float(), v.float(), mask)
    out = triton_fn(q, k, v, mask)
    err = float((out.float() - ref).abs().max())
    ok = out.shape == ref.shape and err <= ATOL[case["dtype"]] * max(1.0, float(ref.abs().max()))
    return dict(ok=bool(ok), max_abs_err=err, nodes=int(q.shape[2]), keys=int(k.shape[2]))


def _compaction_inputs(case: dict, device: str):
    """src/dst exactly as ``SpecKVCache.commit`` builds them, for a random accepted path per row."""
    gen = torch.Generator().manual_seed(case["seed"])
    batch, heads, dim = 3, 2, case["head_dim"]
    lengths = torch.randint(5, 90, (batch,), generator=gen)
    base = int(lengths.max())
    parents, valid = random_parents("tree" if case["shape"] == "cache_end" else case["shape"], batch, 9, gen)
    nodes = parents.shape[1]
    max_len = base + nodes + (0 if case["shape"] == "cache_end" else 7)
    # a path per row: from a random valid node up to the root, root first
    leaf = (torch.rand(batch, generator=gen) * valid.sum(1)).long()
    anc = ancestor_mask(parents)[torch.arange(batch), leaf]  # [B, N]
    width = int(anc.sum(1).max())
    order = torch.sort(torch.where(anc, torch.arange(nodes), nodes), dim=1).values[:, :width]
    j = torch.arange(width)[None, :]
    real = j < anc.sum(1)[:, None]
    scratch = max_len
    src = torch.where(real, base + order, scratch)
    dst = torch.where(real, lengths[:, None] + j, scratch)
    dtype = DTYPES[case["dtype"]]
    keys = torch.randn(batch, heads, max_len + 1, dim, generator=gen).to(device, dtype)
    values = torch.randn(batch, heads, max_len + 1, dim, generator=gen).to(device, dtype)
    return keys, values, src.to(device), dst.to(device)


def check_compaction(case: dict, triton_fn, device: str) -> dict:
    keys, values, src, dst = _compaction_inputs(case, device)
    ref_k, ref_v = keys.clone(), values.clone()
    compact_kv_reference(ref_k, ref_v, src, dst)
    triton_fn(keys, src, dst)
    triton_fn(values, src, dst)
    ok = torch.equal(keys, ref_k) and torch.equal(values, ref_v)
    return dict(ok=bool(ok), moved=int(src.shape[1]), overlapping=bool((src != dst).any()))


def _greedy_inputs(case: dict, device: str):
    gen = torch.Generator().manual_seed(case["seed"])
    batch, nodes, vocab = (1 if case["shape"] == "single" else 4), 24, case["vocab"]
    parents, valid = random_parents(case["shape"], batch, nodes, gen)
    nodes = parents.shape[1]
    logits = torch.randn(batch, nodes, vocab, generator=gen).to(DTYPES[case["dtype"]])
    argmax = logits.argmax(-1)
    # most drafts agree with the target at their parent, so paths get long
    tokens = argmax.gather(1, parents.clamp(min=0))
    wrong = torch.rand(batch, nodes, generator=gen) < 0.25
    tokens = torch.where(wrong, torch.randint(0, vocab, (batch, nodes), generator=gen), tokens)
    anc_depth = _depth(parents)
    max_depth = int((anc_depth * valid).max())
    return [t.to(device) for t in (logits, tokens, parents, valid)] + [max_depth]


def _depth(parents: torch.Tensor) -> torch.Tensor:
    return ancestor_mask(parents).sum(-1) - 1


def check_greedy(case: dict, triton_fn, device: str) -> dict:
    inputs = _greedy_inputs(case, device)
    ref = greedy_tree_accept_reference(*inputs)
    out = triton_fn(*inputs)
    ok = all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(out, ref))
    return dict(ok=bool(ok), mean_path_length=float(ref[1].float().mean()))


def _residual_inputs(case: dict, device: str):
    gen = torch.Generator().manual_seed(case["seed"])
    rows, vocab = 6, case["vocab"]
    dtype = torch.float64 if case["dtype"] == "fp64" else torch.float32
    p = torch.softmax(3 * torch.randn(rows, vocab, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(3 * torch.randn(rows, vocab, generator=gen, dtype=torch.float64), -1)
    q[1] = p[1]  # no residual mass: falls back to p
    q[2] = 0.0
    q[2, int(p[2].argmax())] = 1.0  # a deterministic draft
    p[3, : vocab // 2] = 0.0  # sparse target
    p[3] /= p[3].sum()
    u = torch.rand(rows, generator=gen, dtype=torch.float64)
    u[4] = 0.0
    u[5] = 1.0 - 1e-12
    return p.to(device, dtype), q.to(device, dtype), u.to(device)


def _same_draw(p, q, u, a, b) -> torch.Tensor:
    """Tokens agree, or differ only because ``u * mass`` sits on a CDF step within rounding."""
    w = (p.double() - q.double()).clamp_min(0)
    w = torch.where(w.sum(-1, keepdim=True) <= 0, p.double().clamp_min(0), w)
    cdf = w.cumsum(-1) / w.sum(-1, keepdim=True)
    rows = torch.arange(p.shape[0], device=p.device)
    lo = torch.minimum(a, b)
    near = (cdf[rows, lo] - u.double()).abs() < 1e-5
    return (a == b) | near


def check_residual(case: dict, triton_fn, device: str) -> dict:
    p, q, u = _residual_inputs(case, device)
    ref_res = torch.empty_like(p)
    ref = residual_sample_reference(p, q, u, ref_res)
    out_res = torch.empty_like(p)
    out = triton_fn(p, q, u, out_res)
    same = _same_draw(p, q, u, out, ref)
    tol = 1e-12 if p.dtype == torch.float64 else 1e-6
    ok = bool(same.all()) and torch.allclose(out_res, ref_res, atol=tol, rtol=1e-5)
    return dict(ok=ok, identical_draws=int((out == ref).sum()), rows=int(p.shape[0]))


def check_case(case: dict, device: str) -> dict:
    """Run one case's Triton kernel (loaded here, so only callers that can run Triton pay for it)."""
    triton_acceptance = triton_module("triton_acceptance")
    triton_kv_compaction = triton_module("triton_kv_compaction")
    triton_tree_attention = triton_module("triton_tree_attention")
    kernel = case["kernel"]
    if kernel == "tree_attention":
        return check_attention(case, triton_tree_attention.tree_attention, device)
    if kernel == "kv_compaction":
        return check_compaction(case, triton_kv_compaction.compact_, device)
    if kernel == "greedy_accept":
        return check_greedy(case, triton_acceptance.greedy_tree_accept, device)
    if kernel == "residual_sample":
        return check_residual(case, triton_acceptance.residual_sample, device)
    raise ValueError(f"unknown kernel {kernel!r}")


# ---------------------------------------------------------------------- the sweep
def run_sweep(full: bool = False, device: str = "cpu", repeats: int = 1) -> dict:
    """Every case on ``device`` (CPU needs ``TRITON_INTERPRET=1`` set before Python started)."""
    t0 = time.perf_counter()
    results = []
    for case in all_cases(full, device, repeats):
        try:
            res = check_case(case, device)
        except Exception as exc:  # a crashing case is a failed case, reported with its error
            res = dict(ok=False, error=f"{type(exc).__name__}: {exc}")
        results.append({"id": case["id"], "kernel": case["kernel"], **res})
    by_kernel: dict[str, dict] = {}
    for r in results:
        k = by_kernel.setdefault(r["kernel"], {"cases": 0, "passed": 0})
        k["cases"] += 1
        k["passed"] += int(r["ok"])
    return {
        "device": device, "interpreted": interpreting(), "full": full, "repeats": repeats,
        "cases": len(results), "passed": sum(r["ok"] for r in results), "by_kernel": by_kernel,
        "failures": [r for r in results if not r["ok"]], "results": results,
        "seconds": time.perf_counter() - t0,
    }


def run_sweep_interpreted(full: bool = False, repeats: int = 1, timeout: float = 1800) -> dict:
    """:func:`run_sweep` on CPU in a child process with ``TRITON_INTERPRET=1``."""
    if not triton_available():
        raise RuntimeError("the triton package is not installed: no interpreter to run the sweep in")
    env = dict(os.environ, TRITON_INTERPRET="1", MMSPEC_KERNELS="triton")
    cmd = [sys.executable, "-m", "mmspec.kernels.sweep", "--device", "cpu", "--repeats", str(repeats)]
    cmd += ["--full"] if full else []
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    try:
        return json.loads(proc.stdout)  # failed cases are in the report (exit status 1)
    except json.JSONDecodeError:
        raise RuntimeError(f"kernel sweep crashed (exit {proc.returncode}):\n{proc.stderr[-4000:]}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Triton kernels against their torch references")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--full", action="store_true", help="the whole product of cases, not a cycle through it")
    parser.add_argument("--repeats", type=int, default=1, help="copies of every case with other seeds")
    args = parser.parse_args(argv)
    report = run_sweep(args.full, args.device, args.repeats)
    print(json.dumps(report))
    return 0 if report["passed"] == report["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
