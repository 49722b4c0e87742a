"""Greedy speculative decoding must equal target.generate(do_sample=False) token for token."""

import pytest
import torch

from mmspec import DEFAULT_TREE, SpeculativeGenerator, TreeTemplate
from mmspec.drafters import AutoregressiveDrafter, PromptLookupDrafter
from mmspec.tiny import tiny_model
from mmspec.verifiers.tree_verifier import TreeVerifier

ARCHS = ["llama", "qwen2", "mistral"]
each_arch = pytest.mark.parametrize("tiny_pair", ARCHS, indirect=True)


def drafters(target, weak):
    # the target itself as drafter accepts (nearly) everything: long paths, mid-draft budget ends;
    # the weak drafter accepts almost nothing: bonus-token paths.
    return {
        "chain-self": AutoregressiveDrafter(target, num_tokens=4),
        "chain-weak": AutoregressiveDrafter(weak, num_tokens=3),
        "chain-weak-fixed-length": AutoregressiveDrafter(weak, num_tokens=3, adaptive=False),
        # chains cut where the drafter's confidence drops (rows of a batch stop together, at varying lengths)
        "chain-self-confidence": AutoregressiveDrafter(target, num_tokens=6, confidence=0.3),
        "chain-weak-confidence": AutoregressiveDrafter(weak, num_tokens=6, confidence=0.05),
        "static-tree-self": AutoregressiveDrafter(target, tree=DEFAULT_TREE),
        "static-tree-weak": AutoregressiveDrafter(weak, tree=TreeTemplate.full((2, 2, 1))),
        "dynamic-tree-self": AutoregressiveDrafter(target, num_tokens=4, tree="dynamic", top_k=3, num_nodes=12),
        "dynamic-tree-weak": AutoregressiveDrafter(weak, num_tokens=3, tree="dynamic", top_k=2, num_nodes=6),
        "prompt-lookup": PromptLookupDrafter(num_tokens=5, max_ngram=2),
    }


@pytest.mark.parametrize("batch", [1, 3])
@each_arch
def test_exact_without_eos(tiny_pair, ragged_batch, greedy_reference, batch):
    target, weak = tiny_pair
    arch = target.config.model_type
    ids, mask = ragged_batch(batch, 11, seed=batch)
    max_new = 23  # not a multiple of any draft length: the budget ends mid-draft
    ref = greedy_reference(target, ids, max_new, attention_mask=mask)
    for name, drafter in drafters(target, weak).items():
        out = SpeculativeGenerator(target, drafter).generate(ids, attention_mask=mask, max_new_tokens=max_new,
                                                             eos_token_id=[], pad_token_id=0)
        assert out.sequences.shape == ref.shape, (arch, name)
        assert torch.equal(out.sequences, ref), (arch, name)
        assert out.stats.new_tokens == batch * max_new


@each_arch
def test_eos_inside_draft(tiny_pair, ragged_batch, greedy_reference):
    """Pick EOS = a token the target emits mid-way, so it lands inside accepted drafts; rows stop
    at different steps and are padded like HF does."""
    target, weak = tiny_pair
    arch = target.config.model_type
    ids, mask = ragged_batch(3, 9, seed=11)
    free = greedy_reference(target, ids, 20, attention_mask=mask)
    eos = int(free[0, 9 + 6])  # row 0 produces it at its 7th new token
    ref = greedy_reference(target, ids, 20, eos_token_id=eos, attention_mask=mask)
    assert ref.shape[1] < free.shape[1] or (ref == 0).any()
    for name, drafter in drafters(target, weak).items():
        out = SpeculativeGenerator(target, drafter).generate(ids, attention_mask=mask, max_new_tokens=20,
                                                             eos_token_id=eos, pad_token_id=0)
        assert torch.equal(out.sequences, ref), (arch, name)


@pytest.mark.parametrize("name", ["chain-self", "static-tree-self", "dynamic-tree-self"])
def test_verifies_only_emittable_nodes(tiny_pair, greedy_reference, monkeypatch, name):
    """The target verifies no node that could not be emitted — below a drafted EOS, or deeper than the drafts a
    row's remaining budget allows — and the output is unchanged (the drafter draws its nodes as before)."""
    target, weak = tiny_pair
    ids = torch.randint(3, 90, (1, 9), generator=torch.Generator().manual_seed(11))
    free = greedy_reference(target, ids, 20)
    proposed, verified = [], []
    drafter = drafters(target, weak)[name]
    propose = drafter.propose
    drafter.propose = lambda context, run: proposed.append(propose(context, run)) or proposed[-1]
    verify = TreeVerifier.verify

    def spy(self, model, cache, tree, *args, **kwargs):
        verified.append(tree)
        return verify(self, model, cache, tree, *args, **kwargs)

    monkeypatch.setattr(TreeVerifier, "verify", spy)
    nodes = {"proposed": 0, "verified": 0}
    for eos, budget in ((int(free[0, 9 + 7]), 20), ([], 18)):  # an EOS inside a draft; a budget ending mid-draft
        proposed.clear(), verified.clear()
        ref = greedy_reference(target, ids, budget, eos_token_id=eos)
        out = SpeculativeGenerator(target, drafter).generate(ids, max_new_tokens=budget, eos_token_id=eos)
        assert torch.equal(out.sequences, ref), (name, eos)
        done = 1  # the prefill's token
        for tree, emitted in zip(verified, out.stats.accept_lengths[0][1:]):
            assert tree.max_depth <= budget - done - 1
            if eos != []:
                drafted_eos = (tree.tokens == eos) & tree.valid
                drafted_eos[:, 0] = False
                below = (tree.ancestor_mask & drafted_eos[:, None, :]).sum(-1) > drafted_eos.long()
                assert not bool((below & tree.valid).any())
            done += emitted
        nodes["proposed"] += sum(int(t.valid.sum()) for t in proposed)
        nodes["verified"] += sum(int(t.valid.sum()) for t in verified)
    # the drafter's own trees ran past the answer's end or the budget: their unreachable nodes were left out
    assert nodes["verified"] < nodes["proposed"], name


@each_arch
def test_self_drafting_accepts_everything(tiny_pair, ragged_batch):
    target, _ = tiny_pair
    ids, mask = ragged_batch(1, 8, seed=5)
    out = SpeculativeGenerator(target, AutoregressiveDrafter(target, num_tokens=4)).generate(
        ids, attention_mask=mask, max_new_tokens=21, eos_token_id=[])
    # prefill gives 1 token, then every step accepts 4 drafts + 1 bonus (the last step is cut to the budget)
    assert out.stats.accept_lengths[0] == [1, 5, 5, 5, 5]
    assert out.stats.target_forwards == 5
    assert out.stats.mean_accepted_tokens == pytest.approx(21 / 5)


def test_float64_batch_of_repeats(greedy_reference):
    """Prompt lookup on repetitive text accepts long runs; float64 target rules out near-tie flips."""
    target = tiny_model("llama", seed=3, vocab_size=64, dtype=torch.float64)
    ids = torch.tensor([[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]])
    ref = greedy_reference(target, ids, 30)
    out = SpeculativeGenerator(target, PromptLookupDrafter(num_tokens=6)).generate(
        ids, max_new_tokens=30, eos_token_id=[])
    assert torch.equal(out.sequences, ref)


def test_mistral_sliding_window(ragged_batch, greedy_reference):
    """A window shorter than the sequence: the cache manager's mask applies it by position."""
    target = tiny_model("mistral", seed=0, vocab_size=96, sliding_window=6)
    weak = tiny_model("mistral", seed=1, vocab_size=96, num_layers=1, sliding_window=6)
    ids, mask = ragged_batch(3, 11, seed=2)
    ref = greedy_reference(target, ids, 23, attention_mask=mask)
    for name, drafter in drafters(target, weak).items():
        out = SpeculativeGenerator(target, drafter).generate(ids, attention_mask=mask, max_new_tokens=23,
                                                             eos_token_id=[], pad_token_id=0)
        assert torch.equal(out.sequences, ref), name


def test_confidence_cuts_chains_where_the_drafter_is_unsure(tiny_pair, greedy_reference):
    target, weak = tiny_pair
    ids = torch.randint(3, 30, (1, 9), generator=torch.Generator().manual_seed(2))
    ref = greedy_reference(target, ids, 20)
    lengths = {}
    for conf in (None, 1e-9, 0.999999):
        drafter = AutoregressiveDrafter(weak, num_tokens=5, confidence=conf, adaptive=False)
        proposed = []
        propose = drafter.propose
        drafter.propose = lambda context, run: proposed.append(propose(context, run)) or proposed[-1]
        out = SpeculativeGenerator(target, drafter).generate(ids, max_new_tokens=20, eos_token_id=[])
        assert torch.equal(out.sequences, ref), conf
        lengths[conf] = {t.tokens.shape[1] - 1 for t in proposed}  # drafts per step (the root excluded)
    assert lengths[None] == lengths[1e-9] == {5}  # every draft is confident enough: full chains
    assert lengths[0.999999] == {1}  # no draft is: one token per step, no wasted drafter forwards
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="confidence"):
            AutoregressiveDrafter(weak, confidence=bad)
    with pytest.raises(ValueError, match="confidence"):
        AutoregressiveDrafter(weak, tree="dynamic", confidence=0.4)
