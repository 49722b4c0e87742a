"""Unverified drafts: read against the target's continuation as plain steps produce it, a draft's bounds close on
exactly what a greedy step verifying it would have emitted; the adaptive policy screens drafting probes with them
(a losing draft costs no drafted step, a winning one opens a probe) and, where drafting is hopeless at a batch
size, runs most calls without the target's features at all; the output stays plain decoding's throughout."""

import random
from types import SimpleNamespace

import pytest
import torch

from mmspec.drafters import adaptive
from mmspec.drafters.adaptive import CHECK_EVERY, MAX_PROBE_EVERY, AdaptiveDrafter
from mmspec.drafters.budgets import emitted_by
from mmspec.drafters.shadow import ShadowDraft
from mmspec.eval.batch_sweep import collate
from mmspec.eval.code_suite import code_prompts, diffusion_factories
from mmspec.generator import SpeculativeGenerator
from mmspec.state import DecodeState
from mmspec.verifiers.logits import SamplingConfig
from mmspec.zoo import load
from tests.drafters.test_tree_sizes import _greedy_next, _random_tree


def _state(rows: list[list[int]], active: list[bool]) -> DecodeState:
    """A token buffer holding ``rows`` (no padding), room for 40 more tokens each."""
    width = max(map(len, rows)) + 40
    tokens = torch.zeros(len(rows), width, dtype=torch.long)
    for b, r in enumerate(rows):
        tokens[b, :len(r)] = torch.tensor(r)
    return DecodeState(tokens, torch.tensor([len(r) for r in rows]), torch.zeros(len(rows), dtype=torch.long),
                       1, torch.tensor(active), SamplingConfig(False))


def test_the_bounds_close_on_what_a_greedy_step_would_have_emitted():
    """Random trees against a stand-in target, the continuation arriving a token a row per plain step: the least
    and the most a row can still emit never cross what verifying the tree emits (``emitted_by`` of the whole
    continuation, itself checked against greedy verification in test_tree_sizes), and meet on it once the
    continuation leaves the tree or passes its deepest node."""
    rng = random.Random(0)
    for _ in range(40):
        tree = _random_tree(rng, 3, rng.randrange(2, 14))
        roots = tree.tokens[:, 0].tolist()
        rows = [[7, r] for r in roots]  # a token before the root, which the draft does not read
        continuation = []
        for r in roots:
            path, cont = (r,), []
            for _ in range(16):
                cont.append(_greedy_next(path))
                path += (cont[-1],)
            continuation.append(cont)
        truth = emitted_by(tree, continuation)
        shadow = ShadowDraft(tree, _state(rows, [True] * 3))
        for step in range(17):
            state = _state([r + c[:step] for r, c in zip(rows, continuation)], [True] * 3)
            low, high, known = shadow.bounds(state)
            assert all(lo <= t <= hi for lo, t, hi in zip(low, truth, high)), (step, low, truth, high)
            if step > shadow.depth:
                assert known and low == truth
        assert known


def test_a_row_that_ended_inside_the_draft_counts_the_tokens_it_had_left():
    tree = _random_tree(random.Random(1), 2, 6)
    state = _state([[7, int(t)] for t in tree.tokens[:, 0]], [True, False])
    shadow = ShadowDraft(tree, state)
    assert shadow.rows == [True, False]
    low, high, known = shadow.bounds(state)
    assert low[1] is None and high[1] is None  # a row not generating at the draft is not read
    node = int(tree.parents[0].tolist().index(0, 1)) if 0 in tree.parents[0].tolist()[1:] else None
    if node is not None:  # row 0 took the tree's first branch, then stopped (its EOS or budget)
        ended = _state([[7, int(tree.tokens[0, 0]), int(tree.tokens[0, node])], [7, 0]], [False, False])
        low, high, known = shadow.bounds(ended)
        assert low[0] == high[0] == 1 and known  # the one token it had left: a drafted step stops there too


@pytest.fixture(scope="module")
def code():
    return load("code-target")


def _dflash_tree():
    """The zoo's DFlash DDTree drafter for the code target (skips where zoo:code-dflash is not built)."""
    extra = diffusion_factories()
    if "dflash-tree" not in extra:
        pytest.skip("zoo:code-dflash is not built")
    return extra["dflash-tree"]()


def _dflash_policy():
    inner = _dflash_tree()
    calls = []
    propose = inner.propose
    inner.propose = lambda context, run: calls.append(context.state.lengths.tolist()) or propose(context, run)
    return AdaptiveDrafter(inner), calls


def _remember(policy, rows: int, drafted_cost: float, probe_every: int = 8, since_shadow: int = 10**6):
    """A memory at ``rows`` rows that says: plain steps in use (2 ms), drafting lost (one token a row per drafted
    step of ``drafted_cost`` seconds), never won; an unverified draft is due at once."""
    policy._memory[rows] = dict(arms=[[(drafted_cost, [1] * rows)] * 8], arm=0, plain=[(0.002, 1.0)] * 8,
                                drafting=False, since_switch=3, probe_every=probe_every, since_shadow=since_shadow,
                                won=False, won_before=(), opening_won=False, plain_calls=0)


def test_a_losing_unverified_draft_costs_no_drafted_step(code, monkeypatch):
    """Drafted steps remembered at a second each: the draft proposed on the first plain step loses (whatever it
    would have emitted), so no tree is verified, the next draft waits as a hopeless probe's does, and the output
    is plain decoding's."""
    clock = iter(range(10**9))  # every reading 1 ms later: a plain step measures 2 ms
    monkeypatch.setattr(adaptive, "time", SimpleNamespace(perf_counter=lambda: next(clock) * 1e-3))
    policy, calls = _dflash_policy()
    batch = collate(code_prompts(code.tokenizer, 3), code.tokenizer.pad_token_id)
    ref = code.model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=24,
                              do_sample=False, pad_token_id=0, eos_token_id=None)
    _remember(policy, 3, drafted_cost=1.0)
    out = SpeculativeGenerator(code.model, policy).generate(
        batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=24, eos_token_id=[])
    assert torch.equal(out.sequences, ref)
    assert all(set(a) == {1} for a in out.stats.accept_lengths)  # every step plain
    prompt = batch["input_ids"].shape[1]
    assert calls == [[prompt + 1] * 3]  # one draft, on the call's first step (the prompt and its first token)
    memory = policy._memory[3]
    assert memory["probe_every"] == MAX_PROBE_EVERY and memory["drafting"] is False  # hopeless: the longest wait
    cost, tokens = memory["arms"][0][-1]  # the draft's sample joined the drafted window, at the drafted steps' cost
    assert len(memory["arms"][0]) == 9 and cost == 1.0 and len(tokens) == 3 and min(tokens) >= 1


def test_a_winning_unverified_draft_opens_a_drafting_probe(code, monkeypatch):
    """Drafted steps remembered at 4 ms for one token (250 tokens/s against plain steps' 500): drafting lost. The
    draft proposed on the first plain step is read as the prompt's greedy continuation comes; the zoo's DFlash
    tree holds two tokens or more of it (500 tokens/s or more at that cost), so a drafting probe follows. The output is plain decoding's."""
    clock = iter(range(10**9))
    monkeypatch.setattr(adaptive, "time", SimpleNamespace(perf_counter=lambda: next(clock) * 1e-3))
    policy, calls = _dflash_policy()
    ids = code_prompts(code.tokenizer, 1)[0]
    ref = code.model.generate(ids, do_sample=False, max_new_tokens=32, min_new_tokens=32, pad_token_id=0)
    _remember(policy, 1, drafted_cost=0.004)
    out = SpeculativeGenerator(code.model, policy).generate(ids, max_new_tokens=32, eos_token_id=[])
    assert torch.equal(out.sequences, ref)
    steps = out.stats.accept_lengths[0]
    # (steps[0]: the prefill's token) the unverified draft's plain step: its token already follows the draft, two
    # tokens at 4 ms tie plain steps' rate, so the probe comes next, and its drafted steps accept drafts
    assert steps[1] == 1 and steps[2] > 1 and len(calls) >= 3


def _featured_calls(policy, code, calls: int, steps: int) -> list[bool]:
    """Run ``calls`` greedy calls of ``steps`` tokens on one prompt, each checked against HF greedy; returns whether
    each call handed the drafter the target's features."""
    ids = code_prompts(code.tokenizer, 1)[0]
    ref = code.model.generate(ids, do_sample=False, max_new_tokens=steps, min_new_tokens=steps, pad_token_id=0)
    seen = []
    begin = policy.begin
    policy.begin = lambda context: seen.append(context.hidden is not None) or begin(context)
    gen = SpeculativeGenerator(code.model, policy)
    for _ in range(calls):
        out = gen.generate(ids, max_new_tokens=steps, eos_token_id=[])
        assert torch.equal(out.sequences, ref)
    return seen


def test_a_call_with_no_unverified_draft_due_reads_no_features(code):
    """Plain steps in use at one row, drafting lost, the next unverified draft due 18 steps on (interval 32, 14
    steps since the last): a call of 12 tokens (11 steps) reads no features and drafts nothing, its steps still
    count towards the interval; the next call, in which the draft comes due, reads them and drafts it on its ninth
    step."""
    policy, calls = _dflash_policy()
    _remember(policy, 1, drafted_cost=1.0, probe_every=32, since_shadow=14)
    assert _featured_calls(policy, code, 2, 12) == [False, True]
    assert policy._memory[1]["since_shadow"] < 12  # the second call's draft reset the count
    assert len(calls) == 1 and calls[0][0] == code_prompts(code.tokenizer, 1)[0].shape[1] + 1 + 8


def test_where_drafting_is_hopeless_most_calls_with_a_draft_due_read_no_features(code):
    """A batch size whose memory says drafting is hopeless (plain steps in use, probes at the longest interval,
    drafting never won), an unverified draft long due: the loop asks the target for no hidden states and the
    drafter does nothing in three calls of four; the fourth reads the features and looks again. Every call's
    output is plain decoding's."""
    policy, calls = _dflash_policy()
    _remember(policy, 1, drafted_cost=1.0, probe_every=MAX_PROBE_EVERY)
    assert _featured_calls(policy, code, CHECK_EVERY, 12) == [False] * (CHECK_EVERY - 1) + [True]
    assert len(calls) == 1  # the fourth call's unverified draft, which loses again
    assert policy.reads_features(2) is True  # another batch size: nothing known, features read


def test_a_sampling_call_that_drafts_every_step_reads_features_even_where_drafting_is_hopeless(code):
    """``when_sampling=False``: a sampling call drafts every step, as the inner drafter alone would, so it reads the
    target's features whatever the batch size's memory says (without them it could not draft)."""
    policy = AdaptiveDrafter(_dflash_tree(), when_sampling=False)
    _remember(policy, 1, drafted_cost=1.0, probe_every=MAX_PROBE_EVERY, since_shadow=0)
    ids = code_prompts(code.tokenizer, 1)[0]
    gen = SpeculativeGenerator(code.model, policy)
    for _ in range(CHECK_EVERY):
        out = gen.generate(ids, max_new_tokens=12, eos_token_id=[], do_sample=True,
                           generator=torch.Generator().manual_seed(0))
        assert max(out.stats.accept_lengths[0][1:]) > 1 or len(out.stats.accept_lengths[0]) < 12
    assert policy.reads_features(1, do_sample=True) and not policy.reads_features(1, do_sample=False)
