"""Tree sizes chosen per step: what a smaller tree would have earned is read off a larger one's greedy step exactly
(checked against verifying the smaller tree itself), DFlash's sizes nest, and the policy that switches sizes keeps
greedy output equal to plain decoding's and picks the size with the highest measured rate."""

import random

import pytest
import torch

from mmspec.drafters.adaptive import FIRST_DRAFTED, AdaptiveDrafter, _AdaptiveRun, _Rate
from mmspec.drafters.budgets import StepCost, emitted_by, target_continuation
from mmspec.eval.batch_sweep import collate
from mmspec.eval.bench import auto_factories
from mmspec.eval.code_suite import code_prompts, diffusion_factories
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import DFLASH_TREE_LOOKUP, build_drafter
from mmspec.tree import DraftTree
from mmspec.verifiers.acceptance import greedy_accept
from mmspec.zoo import load

VOCAB = 5


def _greedy_next(path: tuple) -> int:
    """A stand-in target's greedy token after a token path (deterministic, any token equally likely)."""
    return hash(path) % VOCAB


def _target_logits(tree: DraftTree) -> torch.Tensor:
    """[B, N, V] logits whose argmax at each node is :func:`_greedy_next` of the node's token path."""
    B, N = tree.tokens.shape
    logits = torch.zeros(B, N, VOCAB)
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    for b in range(B):
        paths = []
        for n in range(N):
            paths.append((tokens[b][n],) if n == 0 else paths[parents[b][n]] + (tokens[b][n],))
            logits[b, n, _greedy_next(paths[n])] = 1.0
    return logits


def _random_tree(rng: random.Random, rows: int, nodes: int) -> DraftTree:
    """Random trees whose nodes often hold the stand-in target's token (so paths get accepted), siblings distinct."""
    tokens, parents = [], []
    for _ in range(rows):
        tok, par, paths, kids = [rng.randrange(VOCAB)], [-1], [None], {0: set()}
        paths[0] = (tok[0],)
        while len(tok) < nodes:
            p = rng.randrange(len(tok))
            free = [t for t in range(VOCAB) if t not in kids[p]]
            if not free:
                continue
            want = _greedy_next(paths[p])
            t = want if want in free and rng.random() < 0.7 else rng.choice(free)
            kids[p].add(t)
            kids[len(tok)] = set()
            tok.append(t), par.append(p), paths.append(paths[p] + (t,))
        tokens.append(tok), parents.append(par)
    return DraftTree(torch.tensor(tokens), torch.tensor(parents))


def _first_nodes(tree: DraftTree, n: int) -> DraftTree:
    return DraftTree(tree.tokens[:, :n], tree.parents[:, :n], tree.valid[:, :n])


def test_a_smaller_trees_tokens_are_read_off_the_larger_ones_step():
    """emitted_by on every first-n-nodes subtree of a verified tree equals greedy verification of that subtree."""
    rng = random.Random(0)
    checked = 0
    for _ in range(40):
        tree = _random_tree(rng, rows=3, nodes=12)
        follows = target_continuation(tree, greedy_accept(tree, _target_logits(tree)))
        for n in range(1, 13):
            small = _first_nodes(tree, n)
            own = greedy_accept(small, _target_logits(small))
            assert emitted_by(small, follows) == (own.num_accepted + 1).tolist()
            checked += int((own.num_accepted > 0).sum())
    assert checked > 100  # many of the subtrees did accept drafts


def test_a_step_cost_interpolates_between_plain_and_its_own_width():
    cost = StepCost(draft=0.002, verify=0.010, width=11)
    assert cost.at_width(11, plain=0.005) == pytest.approx(0.012)
    assert cost.at_width(6, plain=0.005) == pytest.approx(0.002 + 0.005 + 0.005 * 5 / 10)
    assert cost.at_width(6, plain=None) == pytest.approx(0.012)  # no plain step measured yet: its own


@pytest.fixture(scope="module")
def code():
    return load("code-target")


@pytest.fixture(scope="module")
def dflash_lookup(code):
    if "dflash-tree" not in diffusion_factories():
        pytest.skip("the zoo has no code-dflash")
    return lambda: build_drafter("dflash", load("code-dflash").model, target=code.model, **DFLASH_TREE_LOOKUP)


def _paths(tree: DraftTree, b: int) -> set:
    tokens, parents, valid = tree.tokens[b].tolist(), tree.parents[b].tolist(), tree.valid[b].tolist()
    paths = {}
    for n in range(len(tokens)):
        if valid[n]:
            paths[n] = (tokens[n],) if n == 0 else paths[parents[n]] + (tokens[n],)
    return set(paths.values())


class CyclingSizes(AdaptiveDrafter):
    """The policy forced to draft every step, cycling through the tree sizes (each drafted step records the sizes
    it proposed)."""

    def _choose(self, run):
        run.arm = run.step % len(run.arms)
        return True

    def propose(self, context, run):
        tree = super().propose(context, run)
        self.proposed.append((run.arm_run, list(run.sized)))
        return tree


def test_dflash_sizes_nest_and_switching_sizes_keeps_greedy_output(code, dflash_lookup):
    inner = dflash_lookup()
    sizes = inner.tree_budgets
    assert sizes[0] == (16, 12) and [n for n, _ in sizes] == [16, 8, 4, 2]
    batch = collate(code_prompts(code.tokenizer, 3), code.tokenizer.pad_token_id)
    ref = code.model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=40,
                              do_sample=False, pad_token_id=0, eos_token_id=None)
    policy = CyclingSizes(inner, tree_sizes=True)
    policy.proposed = []
    out = SpeculativeGenerator(code.model, policy).generate(
        batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=40, eos_token_id=[])
    assert torch.equal(out.sequences, ref)
    assert {arm for arm, _ in policy.proposed} == {0, 1, 2, 3}  # every size was verified
    for arm, trees in policy.proposed:
        assert len(trees) == len(sizes) - arm
        for larger, smaller in zip(trees, trees[1:]):
            for b in range(larger.batch_size):
                assert _paths(smaller, b) <= _paths(larger, b)  # a smaller size lies inside every larger one
    # the drafter alone (its own size, the largest) is exact too
    alone = SpeculativeGenerator(code.model, dflash_lookup()).generate(
        batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=40, eos_token_id=[])
    assert torch.equal(alone.sequences, ref)


def _sized_run(*sizes, plain: float = 0.010) -> _AdaptiveRun:
    """A run whose sizes' windows hold ``samples`` (cost, tokens) each, and eight plain steps of ``plain`` seconds."""
    run = _AdaptiveRun(None, arms=[_Rate(32) for _ in sizes])
    for arm, samples in zip(run.arms, sizes):
        for sample in samples:
            arm.add(*sample)
    for _ in range(8):
        run.plain.add(plain, 1.0)
    return run


def test_the_policy_drafts_at_the_size_with_the_highest_rate():
    policy = AdaptiveDrafter(build_drafter("prompt-lookup", None))
    largest = StepCost(draft=0.005, verify=0.035, width=21)  # a step at the largest size: 40 ms
    at = lambda width, tokens: [((largest, width, True), [tokens])] * FIRST_DRAFTED  # noqa: E731
    # 4 tokens in 40 ms (100/s) at the largest size; the next, 6 nodes wide, 3 tokens at an estimated
    # 5 + 10 + 25 * 5 / 20 = 21.25 ms (141/s); the smallest 1 token in 16.25 ms (62/s)
    run = _sized_run(at(21, 4), at(6, 3), at(2, 1))
    assert policy._choose(run) is True and run.arm == 1
    assert run.arms[1].seconds == pytest.approx(0.02125)
    # where a size ran, its own steps' cost counts: 45 ms for 3 tokens (67/s) loses to the largest size
    slow = ((StepCost(draft=0.005, verify=0.040, width=6), 6, False), [3])
    run = _sized_run(at(21, 4), at(6, 3) + [slow], at(2, 1))
    assert policy._choose(run) is True and run.arm == 0
    # sizes are compared on steps at the largest size only: the smaller size's own steps (which cannot tell what
    # the larger tree would have accepted) add no tokens to the comparison
    cheap = ((StepCost(draft=0.005, verify=0.005, width=6), 6, False), [6])
    run = _sized_run(at(21, 4), at(6, 1) + [cheap] * 8)
    assert policy._choose(run) is True and run.arm == 0  # 1 token in 10 ms (100/s) does not beat 100/s by 5%
    # a size within 5% of the one in use does not replace it: 1 token in 10.4 ms (96/s) against 100/s
    near = ((StepCost(draft=0.005, verify=0.0054, width=6), 6, False), [1])
    for arm in (0, 1):
        run = _sized_run(at(21, 4), at(6, 1) + [near], plain=0.020)
        run.arm = arm
        assert policy._choose(run) is True and run.arm == arm
    # before a plain step is measured the largest size drafts
    run = _AdaptiveRun(None, arms=[_Rate(32), _Rate(32)])
    for sample in at(21, 4):
        run.arms[0].add(*sample)
        run.arms[1].add((largest, 2, True), [3])
    assert policy._choose(run) is False and run.arm == 0  # (the plain step that measures plain steps comes first)


def test_sizes_are_chosen_only_when_asked_and_in_greedy_calls(code, dflash_lookup):
    inner = dflash_lookup()
    asked = []
    original = inner.propose_sized
    inner.propose_sized = lambda context, run, which, *rest: asked.append(list(which)) or original(context, run, which,
                                                                                               *rest)
    ids = code_prompts(code.tokenizer, 1)[0]
    SpeculativeGenerator(code.model, AdaptiveDrafter(inner)).generate(ids, max_new_tokens=16, eos_token_id=[])
    assert asked and all(which == [0] for which in asked)  # the default: the drafter's own tree only
    asked.clear()
    SpeculativeGenerator(code.model, AdaptiveDrafter(inner, tree_sizes=True)).generate(
        ids, max_new_tokens=16, eos_token_id=[])
    assert [0, 1, 2, 3] in asked  # the largest size's steps build every size
    asked.clear()
    SpeculativeGenerator(code.model, AdaptiveDrafter(inner, tree_sizes=True)).generate(
        ids, max_new_tokens=16, do_sample=True, eos_token_id=[], generator=torch.Generator().manual_seed(0))
    assert asked == []  # sampling: one size, the sampled DDTree
    with pytest.raises(ValueError, match="tree_sizes"):
        AdaptiveDrafter(inner, tree_sizes=1)


def test_bench_names_a_method_that_chooses_its_tree_size_too():
    made = auto_factories(["prompt-lookup-auto", "prompt-lookup-auto-sizes"], {}, None, None)
    assert made["prompt-lookup-auto"]().tree_sizes is False
    assert made["prompt-lookup-auto-sizes"]().tree_sizes is True
