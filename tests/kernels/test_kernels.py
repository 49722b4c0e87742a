"""Kernels: torch references, dispatch, the ``mmspec_tree`` attention in stock models, and the Triton
kernels in the interpreter (``tests/kernels/test_kernels_interpret.py``, run here in a child process because the
interpreter must be on before triton is first imported)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mmspec import DEFAULT_TREE, DraftTree, SpeculativeGenerator, TreeTemplate
from mmspec.cache import SpecKVCache
from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter
from mmspec.generator import GenerationStats
from mmspec.kernels import (
    ATTENTION_NAME,
    backend_for,
    backend_for_device,
    compact_kv_,
    greedy_tree_accept_reference,
    mmspec_tree_attention,
    prefer_tree_attention,
    residual_sample_reference,
    sweep,
    tree_attention,
    tree_attention_reference,
    use_tree_attention,
)
from mmspec.tiny import tiny_model
from mmspec.verifiers.acceptance import greedy_accept
from mmspec.verifiers.tree_forward import prefill_parents, to_model_mask, tree_forward
from tests.tiny_models import sharpen, text_pair

ROOT = Path(__file__).resolve().parents[2]
HAS_TRITON = importlib.util.find_spec("triton") is not None


# ---------------------------------------------------------------------- the Triton kernels, interpreted
def _run_interpreted(marker: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("MMSPEC_KERNELS", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", marker,
           str(ROOT / "tests" / "kernels" / "test_kernels_interpret.py")]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_triton_kernels_in_interpreter():
    proc = _run_interpreted("not slow")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_triton_kernels_in_interpreter_more_seeds():
    proc = _run_interpreted("slow")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]


# ---------------------------------------------------------------------- dispatch
def test_dispatch_cpu_defaults_to_reference(monkeypatch):
    monkeypatch.delenv("MMSPEC_KERNELS", raising=False)
    assert backend_for_device("cpu") == "torch"
    assert backend_for(torch.zeros(1)) == "torch"
    monkeypatch.setenv("MMSPEC_KERNELS", "torch")
    assert backend_for_device("cuda") == "torch"


def test_dispatch_env_var_errors(monkeypatch):
    monkeypatch.setenv("MMSPEC_KERNELS", "fast")
    with pytest.raises(ValueError, match="MMSPEC_KERNELS"):
        backend_for_device("cpu")
    monkeypatch.setenv("MMSPEC_KERNELS", "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        backend_for_device("cpu")


def test_stats_report_backend(tiny_pair):
    target, _ = tiny_pair
    out = SpeculativeGenerator(target, PromptLookupDrafter(num_tokens=3)).generate(
        torch.randint(3, 96, (1, 8)), max_new_tokens=4)
    assert out.stats.kernel_backend == "torch"
    assert out.stats.as_dict()["kernel_backend"] == "torch"
    assert GenerationStats().as_dict()["kernel_backend"] == "torch"


# ---------------------------------------------------------------------- references
def _naive_attention(q, k, v, mask, scale):
    """Per (row, head, query) softmax over the visible keys, written out."""
    B, H, T, _ = q.shape
    group = H // k.shape[1]
    out = torch.zeros(B, H, T, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                seen = mask[b, 0, t]
                if not seen.any():
                    continue
                scores = (k[b, h // group][seen].double() @ q[b, h, t].double()) * scale
                out[b, h, t] = torch.softmax(scores, 0) @ v[b, h // group][seen].double()
    return out


@pytest.mark.parametrize("shape", ["tree", "levels", "single", "window"])
@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_tree_attention_reference_is_masked_softmax(shape, ratio):
    case = dict(kernel="tree_attention", ratio=ratio, head_dim=16, shape=shape, dtype="fp32", seed=ratio)
    q, k, v, mask = sweep._attention_inputs(case, "cpu")
    mask[0, 0, 0] = False  # a query that sees nothing gets zeros
    expected = _naive_attention(q, k, v, mask, 0.25)
    assert torch.allclose(tree_attention_reference(q, k, v, mask, 0.25).double(), expected, atol=1e-5)
    assert torch.allclose(tree_attention(q, k, v, mask, 0.25).double(), expected, atol=1e-5)


def test_compaction_gathers_before_scattering():
    keys = torch.arange(2 * 1 * 10 * 2, dtype=torch.float32).view(2, 1, 10, 2)
    values = -keys.clone()
    # row 0 moves slots 5, 7, 8 to 4, 5, 6: slot 5 is read and written; row 1 pads with the scratch slot 9
    src = torch.tensor([[5, 7, 8], [3, 9, 9]])
    dst = torch.tensor([[4, 5, 6], [2, 9, 9]])
    before_k = keys.clone()
    compact_kv_(keys, values, src, dst)
    assert torch.equal(keys[0, 0, 4:7], before_k[0, 0, [5, 7, 8]])
    assert torch.equal(keys[1, 0, 2], before_k[1, 0, 3])
    assert torch.equal(values, -keys)


def test_compaction_of_rows_moving_alike_is_the_rowwise_one():
    """Rows that all move the same slots (a lone row's classifier-free-guidance copies) take one indexed copy:
    the same buffer as the row-wise gather and scatter, a read slot written too and padding on the scratch slot."""
    gen = torch.Generator().manual_seed(3)
    keys = torch.randn(2, 3, 12, 4, generator=gen)
    src = torch.tensor([[5, 6, 9, 11, 11]]).repeat(2, 1)
    dst = torch.tensor([[5, 6, 7, 11, 11]]).repeat(2, 1)
    expected = keys.clone()
    for b in range(2):
        moved = expected[b, :, src[b]].clone()
        expected[b, :, dst[b]] = moved
    values = -keys
    compact_kv_(keys, values, src, dst)
    assert torch.equal(keys, expected)
    assert torch.equal(values, -expected)


def _random_tree(seed: int, chain: bool):
    gen = torch.Generator().manual_seed(seed)
    B, N, V = 4, 12, 30
    parents, valid = sweep.random_parents("chain" if chain else "tree", B, N, gen)
    logits = torch.randn(B, N, V, generator=gen)
    tokens = logits.argmax(-1).gather(1, parents.clamp(min=0))
    wrong = torch.rand(B, N, generator=gen) < 0.3
    tokens = torch.where(wrong, torch.randint(0, V, (B, N), generator=gen), tokens)
    return DraftTree(tokens, parents, valid), logits


@pytest.mark.parametrize("chain", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_greedy_reference_matches_verifier(seed, chain):
    tree, logits = _random_tree(seed, chain)
    expected = greedy_accept(tree, logits)
    paths, lengths, bonus = greedy_tree_accept_reference(logits, tree.tokens, tree.parents, tree.valid,
                                                         tree.max_depth)
    assert torch.equal(lengths, expected.path_lengths)
    assert torch.equal(bonus, expected.bonus)
    for b in range(tree.batch_size):
        n = int(lengths[b])
        assert torch.equal(paths[b, :n], expected.paths[b, :n])
        assert (paths[b, n:] == 0).all()


def test_residual_reference_draws_the_residual_distribution():
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(1, 6, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(1, 6, generator=gen, dtype=torch.float64), -1)
    n = 20000
    u = (torch.arange(n, dtype=torch.float64) + 0.5) / n  # a uniform grid: frequencies are exact up to 1/n
    residual = torch.empty(n, 6, dtype=torch.float64)
    tokens = residual_sample_reference(p.expand(n, 6), q.expand(n, 6), u, residual)
    target = (p - q).clamp_min(0)
    target = target / target.sum()
    assert torch.allclose(residual[0], target[0])
    freq = torch.bincount(tokens, minlength=6).double() / n
    assert (freq - target[0]).abs().max() <= 1.5 / n
    same = residual_sample_reference(p, p, torch.tensor([0.5], dtype=torch.float64))  # no residual mass: draw from p
    assert int(same) == int((p.cumsum(-1) > 0.5).long().argmax())


# ---------------------------------------------------------------------- the attention in stock models
def test_attention_function_falls_back_for_masks_it_does_not_handle(tiny_pair):
    target, _ = tiny_pair
    module = target.model.layers[0].self_attn
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4 if i == 0 else 2, 5, 16, generator=gen) for i in range(3))
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    for mask in (None, torch.zeros(2, 1, 5, 5)):
        ours, _ = mmspec_tree_attention(module, q, k, v, mask, scaling=0.25)
        stock, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25)
        assert torch.equal(ours, stock)


@pytest.mark.parametrize("tiny_pair", ["llama", "qwen2", "mistral"], indirect=True)
def test_engine_greedy_exact_with_tree_attention(tiny_pair, ragged_batch, greedy_reference):
    """Reference: the stock model with SDPA; mmspec: the same target and drafter switched to "mmspec_tree"."""
    target, _ = tiny_pair
    arch = target.config.model_type
    ids, mask = ragged_batch(3, 11, seed=3, pads=(0, 4, 7))
    ref = greedy_reference(target, ids, 17, eos_token_id=2, attention_mask=mask)
    target_t, weak_t = (use_tree_attention(m) for m in text_pair(arch))  # a fresh pair: the switch is in place
    assert target_t.config._attn_implementation == ATTENTION_NAME
    # stock generate through the registered function (2-D padding mask -> SDPA's bool mask) is unchanged
    assert torch.equal(greedy_reference(target_t, ids, 17, eos_token_id=2, attention_mask=mask), ref)
    drafters = {
        "chain-weak": AutoregressiveDrafter(weak_t, num_tokens=3),
        "static-tree-self": AutoregressiveDrafter(target_t, tree=DEFAULT_TREE),
        "static-tree-weak": AutoregressiveDrafter(weak_t, tree=TreeTemplate.full((2, 2, 1))),
        "dynamic-tree-self": AutoregressiveDrafter(target_t, num_tokens=4, tree="dynamic", top_k=3, num_nodes=12),
    }
    for name, drafter in drafters.items():
        out = SpeculativeGenerator(target_t, drafter).generate(ids, attention_mask=mask, max_new_tokens=17,
                                                               eos_token_id=2, pad_token_id=0)
        assert torch.equal(out.sequences, ref), (arch, name)


def test_bench_kernels_cli_on_cpu(tmp_path, monkeypatch):
    """``mmspec bench --suite kernels`` without CUDA: says so and reports the interpreter sweep (the sweep
    itself is replaced by a canned report here; the real one runs in the interpreter test above)."""
    from mmspec.cli import main
    from mmspec.eval import kernel_suite

    if torch.cuda.is_available():
        pytest.skip("checks the CPU branch")
    pytest.importorskip("triton")
    canned = {"device": "cpu", "interpreted": True, "full": True, "repeats": 1, "cases": 2, "passed": 2,
              "by_kernel": {"tree_attention": {"cases": 2, "passed": 2}}, "failures": [], "results": [],
              "seconds": 0.1}
    monkeypatch.setattr(kernel_suite.sweep, "run_sweep_interpreted", lambda full=True: canned)
    assert main(["bench", "--suite", "kernels", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "kernels_bench.json").read_text())
    assert report["timings"] == [] and "no CUDA" in report["note"]
    assert report["sweep"]["passed"] == 2
    md = (tmp_path / "kernels_bench.md").read_text()
    assert "2/2" in md and "Triton interpreter" in md


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_prefer_tree_attention_verifies_a_tree_bit_for_bit_as_sdpa(arch):
    """A model with grouped K/V heads that mmspec loads is moved to "mmspec_tree" (on a CPU: no per-head copy of the
    context's K/V in every masked layer), and a ragged batch's tree verification — logits and every hidden state —
    is bit for bit what SDPA computes, with the mask made additive once (``to_model_mask``) or given as a bool mask
    to the stock forward; a model without grouped heads keeps SDPA."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 96, (2, 9), generator=gen)
    valid = torch.arange(9)[None, :] >= torch.tensor([[0], [3]])  # the second row left-padded
    tree = DraftTree(torch.randint(3, 96, (2, 6), generator=gen), torch.tensor([[-1, 0, 0, 1, 1, 2]] * 2),
                     torch.ones(2, 6, dtype=torch.bool))

    def verify(model, direct):
        cache = SpecKVCache.for_model(model, 2, 32)
        tree_forward(model, cache, ids, prefill_parents(valid.long()), valid)
        cache.commit_first(torch.full((2,), 9))
        cache.starts = (~valid).sum(1)
        if direct == "bool":  # the stock forward given the cache's bool mask as it is
            positions, mask = cache.prepare_append(tree.parents, tree.valid, tree.ancestor_mask)
            return model(input_ids=tree.tokens, attention_mask=mask, position_ids=positions, cache=cache,
                         use_cache=True, output_hidden_states=True)
        return tree_forward(model, cache, tree.tokens, tree.parents, tree.valid, ancestors=tree.ancestor_mask,
                            output_hidden_states=True, direct=direct)

    model = sharpen(tiny_model(arch, vocab_size=96, num_kv_heads=2), seed=4)
    outs = [verify(model, direct) for direct in ("bool", False, True)]
    assert to_model_mask(torch.tensor([[[[True, False]]]]), model).dtype == torch.float32  # additive once
    assert prefer_tree_attention(model).config._attn_implementation == ATTENTION_NAME
    outs += [verify(model, direct) for direct in (False, True)]
    for out in outs[1:]:
        assert torch.equal(out.logits, outs[0].logits)
        assert all(torch.equal(a, b) for a, b in zip(out.hidden_states, outs[0].hidden_states))
    plain = sharpen(tiny_model(arch, vocab_size=96, num_kv_heads=4), seed=4)
    assert prefer_tree_attention(plain).config._attn_implementation == "sdpa"
