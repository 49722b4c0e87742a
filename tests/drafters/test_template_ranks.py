"""Static templates under sampling: the drafter draws sibling ranks without replacement (Gumbel top-k) and the
verifier removes the siblings it tried, so a template is lossless only if its sibling ranks have no gap."""

import pytest
import torch
from scipy.stats import chisquare
from transformers import LlamaConfig, LlamaForCausalLM

from mmspec.drafters import AutoregressiveDrafter, AutoregressiveRun
from mmspec.tree import TreeTemplate
from mmspec.verifiers import SamplingConfig, sampling_accept

V = 6
Q = torch.tensor([0.5, 0.3, 0.1, 0.05, 0.03, 0.02])  # the drafter's distribution at the root
P = torch.tensor([0.1, 0.5, 0.1, 0.1, 0.1, 0.1])  # the target's


def first_tokens(template: TreeTemplate, rows: int, seed: int) -> torch.LongTensor:
    """The first emitted token of ``rows`` independent steps: the real drafter's static-tree expansion from the
    root logits log Q, then the sampling verifier against P at every node."""
    cfg = LlamaConfig(vocab_size=V, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2)
    drafter = AutoregressiveDrafter(LlamaForCausalLM(cfg), tree=template)
    gen = torch.Generator().manual_seed(seed)
    run = AutoregressiveRun(cache=None, draft_length=1)  # depth 1: the drafter model is never run
    tree = drafter._tree(run, torch.zeros(rows, dtype=torch.long), Q.log().expand(rows, V),
                         SamplingConfig(do_sample=True), gen)
    result = sampling_accept(tree, P.expand(rows, tree.num_nodes, V).contiguous(), gen)
    return result.emitted_tokens(tree)[0][:, 0]


@pytest.mark.parametrize("paths, must_build", [(((0,), (1,)), True), (((0,), (1,), (2,)), True),
                                               (((0,), (2,)), False), (((1,),), False)])
def test_sampled_static_tree_first_token_follows_the_target(paths, must_build):
    """χ² of the first emitted token against P over 20k draws. A template with a rank gap must either be refused
    or still sample P (before the fix, (0,), (2,) was accepted and gave TV ≈ 0.11 here)."""
    try:
        template = TreeTemplate(paths)
    except ValueError as e:
        assert not must_build, f"a gap-free template was refused: {e}"
        assert "gap" in str(e)
        return
    rows = 20_000
    counts = torch.bincount(first_tokens(template, rows, seed=1), minlength=V).double()
    stat = chisquare(counts.numpy(), (P.double() * rows).numpy())
    assert stat.pvalue > 1e-3, f"first-token distribution {counts / rows} is not the target's {P} ({stat})"


def test_gap_templates_are_refused_by_name():
    with pytest.raises(ValueError, match=r"node \(0,\) have ranks \[1\], missing \[0\]"):
        TreeTemplate(((0,), (0, 1)))
    with pytest.raises(ValueError, match="ints >= 0"):
        TreeTemplate(((-1,),))
    for shipped in (TreeTemplate.full((3, 2, 1, 1, 1)), TreeTemplate.full((2, 2, 1, 1)), TreeTemplate.chain(5)):
        assert TreeTemplate(shipped.rank_paths) == shipped
