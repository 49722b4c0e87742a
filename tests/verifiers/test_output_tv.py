"""The relaxed verifier's true distortion (mmspec.verifiers.distortion): the closed-form distribution of a step's
first emitted token against Monte-Carlo runs of the verifier itself, the issue's examples where the output is
further from the target than the per-candidate S_m, and zero for the lossless rule."""

import pytest
import torch

from mmspec.tree import DraftTree
from mmspec.verifiers import sampling_accept
from mmspec.verifiers.distortion import first_token_distribution, output_tv
from mmspec.verifiers.relaxed import Relaxation


def sampled_tree(q: torch.Tensor, rows: int, siblings: int, rule: str, gen) -> DraftTree:
    """``rows`` independent roots with ``siblings`` children drawn from q (Gumbel top-k without replacement, or iid)."""
    V = q.shape[0]
    if rule == "without_replacement":
        u = torch.rand(rows, V, generator=gen, dtype=torch.float64).clamp_(1e-20, 1.0)
        x = (q.log() - torch.log(-torch.log(u))).topk(siblings, dim=-1).indices
    else:
        x = torch.multinomial(q.float(), rows * siblings, replacement=True, generator=gen).view(rows, siblings)
    tokens = torch.cat([torch.zeros(rows, 1, dtype=torch.long), x], 1)
    parents = torch.tensor([[-1] + [0] * siblings]).expand(rows, -1)
    return DraftTree(tokens, parents, q=q.float().expand(rows, siblings + 1, V), sibling_rule=rule)


def deterministic_tree(drafts: list[int], rows: int) -> DraftTree:
    tokens = torch.tensor([[0] + drafts]).expand(rows, -1)
    return DraftTree(tokens, torch.tensor([[-1] + [0] * len(drafts)]).expand(rows, -1))


def empirical_first(tree: DraftTree, p: torch.Tensor, relax, gen) -> torch.Tensor:
    probs = p.expand(tree.batch_size, tree.num_nodes, -1).contiguous()
    result = sampling_accept(tree, probs, gen, relax=relax)
    first = result.emitted_tokens(tree)[0][:, 0]
    return torch.bincount(first, minlength=p.shape[0]).double() / tree.batch_size, result


def closed_form(tree: DraftTree, p: torch.Tensor, relax) -> torch.Tensor:
    """The distribution of row 0 (every row has the same drafting process, so the same distribution)."""
    one = DraftTree(tree.tokens[:1], tree.parents[:1], None, None if tree.q is None else tree.q[:1], tree.sibling_rule)
    return first_token_distribution(one, p.expand(1, one.num_nodes, -1), relax)[0]


def random_case(seed: int, V: int = 7, k: int = 3):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * 1.5, -1)
    q = torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * 1.5, -1)
    table = torch.stack([torch.randperm(V - 1, generator=g)[:k] for _ in range(V)])
    return p, q, table + (table >= torch.arange(V)[:, None]).long()  # never a code's own neighbour


@pytest.mark.parametrize("shape", ["chain", "two_without_replacement", "two_iid", "three_deterministic"])
@pytest.mark.parametrize("seed, rule", [(0, dict(delta=0.15)), (3, dict(lam=2.0)), (4, dict(delta=0.3))])
def test_closed_form_matches_monte_carlo(shape, seed, rule):
    p, q, table = random_case(seed)
    relax = Relaxation(table, **rule)
    gen = torch.Generator().manual_seed(100 + seed)
    rows = 200_000
    if shape == "chain":
        tree = sampled_tree(q, rows, 1, "iid", gen)
    elif shape == "three_deterministic":
        tree = deterministic_tree([2, 5, 1], rows)
    else:
        tree = sampled_tree(q, rows, 2, shape[4:], gen)
    emp, _ = empirical_first(tree, p, relax, gen)
    exact = closed_form(tree, p, relax)
    assert abs(float(exact.sum()) - 1.0) < 1e-6  # q is held in float32
    sd = (exact * (1 - exact) / rows).sqrt()
    assert ((emp - exact).abs() <= 5 * sd + 1e-4).all(), f"closed form {exact} vs Monte Carlo {emp}"


def test_sampled_drafts_sharing_a_neighbour():
    """Five possible drafts share one neighbour of mass 0.09: each moves it onto itself (S_m = 0.09 <= δ = 0.1),
    and the output is 5 × 0.09 = 0.45 from the target."""
    p = torch.tensor([0.1, 0.1, 0.1, 0.1, 0.1, 0.09, 0.41], dtype=torch.float64)
    q = torch.tensor([0.2, 0.2, 0.2, 0.2, 0.2, 0.0, 0.0], dtype=torch.float64)
    relax = Relaxation(torch.tensor([[5], [5], [5], [5], [5], [6], [5]]), delta=0.1)
    gen = torch.Generator().manual_seed(0)
    tree = sampled_tree(q, 100_000, 1, "iid", gen)
    emp, result = empirical_first(tree, p, relax, gen)
    assert float(result.moved_mass.max()) == pytest.approx(0.09)
    tv = 0.5 * float((closed_form(tree, p, relax) - p).abs().sum())
    assert tv == pytest.approx(0.45, abs=1e-6)  # q is held in float32
    assert 0.5 * float((emp - p).abs().sum()) == pytest.approx(0.45, abs=0.01)


def test_two_deterministic_siblings():
    """Point-mass siblings 0 and 1 with neighbours 2 (0.09) and 3 (0.08): TV 0.17 while S_m is at most 0.09."""
    p = torch.tensor([0.01, 0.1, 0.09, 0.08, 0.72], dtype=torch.float64)
    relax = Relaxation(torch.tensor([[2], [3], [0], [1], [2]]), delta=0.1)
    gen = torch.Generator().manual_seed(0)
    tree = deterministic_tree([0, 1], 100_000)
    emp, result = empirical_first(tree, p, relax, gen)
    assert float(result.moved_mass.max()) == pytest.approx(0.09)
    tv = 0.5 * float((closed_form(tree, p, relax) - p).abs().sum())
    assert tv == pytest.approx(0.17, abs=1e-9)
    assert 0.5 * float((emp - p).abs().sum()) == pytest.approx(0.17, abs=0.01)


@pytest.mark.parametrize("rule", [dict(delta=0.0), dict(lam=1.0)])
def test_lossless_rule_has_no_distortion(rule):
    for seed in range(3):
        p, q, table = random_case(seed)
        relax = Relaxation(table, **rule)
        gen = torch.Generator().manual_seed(seed)
        for tree in (sampled_tree(q, 4, 1, "iid", gen), sampled_tree(q, 4, 2, "without_replacement", gen),
                     sampled_tree(q, 4, 2, "iid", gen), deterministic_tree([3, 1, 4], 4)):
            probs = p.expand(4, tree.num_nodes, -1)
            assert output_tv(tree, probs, relax).max() < 1e-6  # q is held in float32
            assert output_tv(tree, probs, None).max() < 1e-6


def test_three_sampled_siblings_have_no_closed_form_here():
    p, q, table = random_case(0)
    tree = sampled_tree(q, 2, 3, "without_replacement", torch.Generator().manual_seed(0))
    assert output_tv(tree, p.expand(2, 4, -1), Relaxation(table, delta=0.1)).isnan().all()
