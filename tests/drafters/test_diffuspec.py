"""DiffuSpec: candidate sets, causal path search, adaptive draft length, lattice trees."""

import math

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters import DiffusionLM
from mmspec.state import DecodeState, DraftContext
from mmspec.verifiers.logits import SamplingConfig
from mmspec.drafters.diffuspec import (ADLConfig, CausalPathSearch, CPSConfig, DiffuSpecDrafter, DiffuSpecRun,
                                       candidate_sets, prefix_tree)


def lattice(rows):
    """[k, V] log-probs from per-slot probability lists."""
    return torch.tensor(rows, dtype=torch.float).log()


def test_candidate_sets_smallest_top_m_with_mass():
    logp = lattice([[0.5, 0.25, 0.15, 0.1], [0.9, 0.05, 0.03, 0.02], [0.25, 0.25, 0.25, 0.25]])
    toks, lq, m = candidate_sets(logp, mass=0.8, cap=3)
    assert m.tolist() == [3, 1, 3]  # 0.5+0.25 < 0.8 -> 3; 0.9 alone; uniform capped at 3
    assert toks[0, :3].tolist() == [0, 1, 2] and toks[1, 0] == 0
    torch.testing.assert_close(lq[0, 0], torch.tensor(math.log(0.5)))


class TableCausal:
    """A toy causal proxy: log p(next | last token) from a table; uniform elsewhere."""

    order = 2

    def __init__(self, table, vocab):
        self.table, self.vocab = table, vocab

    def score_batch(self, contexts, candidates):
        out = torch.full(candidates.shape, math.log(1 / self.vocab))
        for i, ctx in enumerate(contexts):
            for j, c in enumerate(candidates[i].tolist()):
                if ctx and (ctx[-1], c) in self.table:
                    out[i, j] = math.log(self.table[(ctx[-1], c)])
        return out


def test_cps_prefers_causally_consistent_paths():
    # slot-wise argmax would give 1 1 (a repetition); the causal proxy says 1 -> 2 is far more likely
    logp = lattice([[0.05, 0.55, 0.4, 0.0 + 1e-9], [0.05, 0.5, 0.45, 1e-9]])
    plain = CausalPathSearch(None, CPSConfig(lam=1.0)).search(logp, [0])
    assert plain[0][0] == [1, 1]
    causal = TableCausal({(1, 2): 0.9, (1, 1): 0.01, (2, 1): 0.01, (2, 2): 0.01}, vocab=4)
    best = CausalPathSearch(causal, CPSConfig(lam=0.5)).search(logp, [0])
    assert best[0][0] == [1, 2]
    assert len(best) <= 3


def test_cps_stops_paths_at_eos():
    logp = lattice([[0.1, 0.8, 0.1], [0.2, 0.1, 0.7], [0.6, 0.2, 0.2]])
    beams = CausalPathSearch(None, CPSConfig(lam=1.0, mass=0.95), eos_token_id=2).search(logp, [])
    for path, _ in beams:
        assert 2 not in path[:-1]  # nothing after an EOS
    assert [1, 2] in [p for p, _ in beams]


def test_prefix_tree_merges_shared_prefixes():
    tokens, parents = prefix_tree([[5, 6, 7], [5, 6, 8], [5, 9]])
    assert tokens == [5, 6, 9, 7, 8]
    assert parents == [-1, 0, 0, 1, 1]


def test_adl_rule(tiny_pair):
    _, dm = tiny_pair
    d = DiffuSpecDrafter(DiffusionLM(dm, 2), num_tokens=6, cps=False, adl=True,
                         adl_config=ADLConfig(k_min=2, k_max=12, delta=4, rho=0.5))
    run = DiffuSpecRun(cache=None, k=d.k0)

    class R:
        def __init__(self, n):
            self.num_accepted = torch.tensor([n])

    class S:
        active = torch.tensor([True])

    class C:
        state = S()

    run.gen_len = torch.tensor([6])
    d.observe(C(), run, None, R(6))  # everything accepted: EMA_acc >= EMA_gen -> grow by delta
    assert run.k == 10
    run.gen_len = torch.tensor([3])  # EOS at 4: L_gen = 3
    d.observe(C(), run, None, R(1))  # EMA_gen = 4.5, EMA_acc = 3.5 -> k = round(4.5)
    assert run.k == 4
    with pytest.raises(ValueError):
        ADLConfig(k_min=5, k_max=4)
    with pytest.raises(ValueError, match="lattice"):
        DiffuSpecDrafter(DiffusionLM(dm, 2), cps=False, lattice=True)


@pytest.mark.parametrize("cps,adl,lattice,confidence", [(False, False, False, None), (True, True, False, None),
                                                         (True, False, True, None), (False, True, False, 0.3),
                                                         (True, True, True, 0.3)])
def test_diffuspec_is_exact_under_greedy(tiny_pair, greedy_reference, cps, adl, lattice, confidence):
    target, dm = tiny_pair
    causal = TableCausal({}, vocab=96)
    ids = torch.randint(4, 96, (2, 9), generator=torch.Generator().manual_seed(1))
    ref = greedy_reference(target, ids, 16)
    d = DiffuSpecDrafter(DiffusionLM(dm, 2), causal=causal, eos_token_id=1, num_tokens=5, cps=cps, adl=adl,
                         lattice=lattice, confidence=confidence)
    out = SpeculativeGenerator(target, d).generate(ids, max_new_tokens=16, eos_token_id=[])
    assert torch.equal(out.sequences, ref)
    # sampling runs through the lossless verifier with deterministic (point-mass) drafts
    g = torch.Generator().manual_seed(0)
    out = SpeculativeGenerator(target, d).generate(ids, max_new_tokens=8, eos_token_id=[], do_sample=True,
                                                   temperature=0.7, generator=g)
    assert out.sequences.shape == (2, 17)


@pytest.mark.parametrize("cps", [False, True])
def test_confidence_cut_ends_each_rows_draft_and_moves_adl(tiny_pair, cps):
    """With ``confidence`` a row's draft ends after its first slot drafted with probability below it (CPS searches
    those slots only), L_gen is that length, and ADL shrinks k towards it; without EOS in the raw draft, ADL
    alone keeps k where it started."""
    target, dm = tiny_pair
    dlm = DiffusionLM(dm, 2, context="full")
    ids = torch.randint(4, 96, (2, 9), generator=torch.Generator().manual_seed(1))
    tokens = torch.cat([ids, torch.zeros(2, 31, dtype=torch.long)], dim=1)
    state = DecodeState(tokens=tokens, lengths=torch.full((2,), 9), starts=torch.zeros(2, dtype=torch.long),
                        prompt_length=8, active=torch.ones(2, dtype=torch.bool), sampling=SamplingConfig())
    context = DraftContext(state=state, prompt_ids=ids[:, :8], attention_mask=torch.ones(2, 8, dtype=torch.long),
                           max_length=40)
    logp = dlm.slot_logprobs(state, 6)
    p = logp.max(-1).values.exp()
    c = float(p[:, 1:].median())  # some rows trust some slots
    lead = (p >= c).long().cumprod(1).sum(1)
    want = torch.clamp(lead + 1, max=6)
    causal = TableCausal({}, vocab=96) if cps else None
    d = DiffuSpecDrafter(dlm, causal=causal, eos_token_id=None, num_tokens=6, cps=cps, adl=True,
                         adl_config=ADLConfig(k_min=1, k_max=6, delta=0), confidence=c)
    run = d.begin(context)
    tree = d.propose(context, run)
    assert torch.equal(run.gen_len, want)
    drafted = tree.valid.sum(1) - 1  # nodes past the root: one path per row (no lattice)
    assert torch.all(drafted <= want) and (drafted == want).any()

    class Result:
        num_accepted = torch.zeros(2, dtype=torch.long)

    d.observe(context, run, tree, Result())
    assert run.k == round(float(want.float().mean()))
    plain = DiffuSpecDrafter(dlm, causal=causal, eos_token_id=None, num_tokens=6, cps=cps, adl=True,
                             adl_config=ADLConfig(k_min=1, k_max=6, delta=0))
    run = plain.begin(context)
    plain.observe(context, run, plain.propose(context, run), Result())
    assert run.k == 6
    with pytest.raises(ValueError, match="confidence"):
        DiffuSpecDrafter(dlm, confidence=1.5)
