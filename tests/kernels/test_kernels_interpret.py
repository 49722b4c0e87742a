"""The Triton kernels against their torch references: in the interpreter on CPU, natively on CUDA.

The interpreter must be on before triton is first imported, so this file needs ``TRITON_INTERPRET=1`` in
the environment of the Python process (``tests/kernels/test_kernels.py`` runs it that way in a child process in
the default test run; by hand: ``TRITON_INTERPRET=1 python -m pytest tests/kernels/test_kernels_interpret.py``).
Without it and without CUDA the whole file is skipped.
"""

import pytest
import torch

from mmspec.kernels.dispatch import interpreting

DEVICE = "cuda" if torch.cuda.is_available() and not interpreting() else "cpu"
if DEVICE == "cpu" and not interpreting():
    pytest.skip("Triton needs CUDA or TRITON_INTERPRET=1 set before Python starts (tests/kernels/test_kernels.py runs "
                "this file in the interpreter)", allow_module_level=True)
pytest.importorskip("triton")

from mmspec import DEFAULT_TREE, SpeculativeGenerator
from mmspec.drafters import AutoregressiveDrafter
from mmspec.kernels import sweep, use_tree_attention
from tests.tiny_models import text_pair

NO_BF16 = "bf16 is GPU-only: the Triton interpreter computes with numpy, which has no bfloat16"


@pytest.mark.parametrize("case", sweep.all_cases(device=DEVICE), ids=lambda c: c["id"])
def test_kernel_matches_reference(case):
    result = sweep.check_case(case, DEVICE)
    assert result["ok"], result


@pytest.mark.slow
@pytest.mark.parametrize("case", sweep.all_cases(full=True, device=DEVICE, repeats=4), ids=lambda c: c["id"])
def test_kernel_matches_reference_full_sweep(case):
    """Every dtype for every attention case, more compaction / acceptance shapes, four seeds each."""
    result = sweep.check_case(case, DEVICE)
    assert result["ok"], result


@pytest.mark.parametrize("kernel", ["tree_attention", "kv_compaction"])
def test_bf16(kernel):
    if DEVICE != "cuda":
        pytest.skip(NO_BF16)
    cases = [c for c in sweep.all_cases(full=True, device=DEVICE) if c["kernel"] == kernel and c["dtype"] == "bf16"]
    assert cases
    for case in cases:
        assert sweep.check_case(case, DEVICE)["ok"], case["id"]


def test_engine_greedy_exact_with_triton_kernels(monkeypatch, ragged_batch, greedy_reference):
    """The whole loop with every Triton kernel (tree attention in the target and drafter, compaction in
    their caches, fused greedy acceptance) returns the target's own greedy tokens."""
    ids, mask = (t.to(DEVICE) for t in ragged_batch(3, 9, seed=5, pads=(0, 3, 6)))
    target, weak = (m.to(DEVICE) for m in text_pair("qwen2"))  # a fresh pair: the kernels are switched on in place
    ref = greedy_reference(target, ids, 10, eos_token_id=2, attention_mask=mask)
    use_tree_attention(target)
    use_tree_attention(weak)
    monkeypatch.setenv("MMSPEC_KERNELS", "triton")
    for drafter in (AutoregressiveDrafter(weak, num_tokens=3), AutoregressiveDrafter(target, tree=DEFAULT_TREE)):
        out = SpeculativeGenerator(target, drafter).generate(ids, attention_mask=mask, max_new_tokens=10,
                                                             eos_token_id=2, pad_token_id=0)
        assert out.stats.kernel_backend == "triton"
        assert torch.equal(out.sequences, ref)


def test_bench_timings_run():
    """The bench's timing path (figures are meaningless in the interpreter; this checks it runs)."""
    from mmspec.eval.kernel_suite import time_kernels

    rows = time_kernels(DEVICE, torch.float32, attention=[("tiny", 2, 4, 2, 16, 5, 40)],
                        compaction=[("tiny", 2, 2, 40, 16, 3)], greedy=[("tiny", 2, 6, 50)],
                        residual=[("tiny", 2, 50)], warmup=0, iters=1)
    assert [r["kernel"] for r in rows] == ["tree_attention", "kv_compaction", "greedy_accept", "residual_sample"]
    assert all(r["reference_ms"] > 0 and r["triton_ms"] > 0 and r["bytes"] > 0 for r in rows)
