"""The adaptive policy (drafts only where it pays) never changes the output: greedy equals plain decoding whatever
the steps it drafts, for every kind of inner drafter and ragged batches; and it picks the faster kind of step."""

from types import SimpleNamespace

import pytest
import torch

from mmspec.drafters import PromptLookupDrafter
from mmspec.drafters import adaptive
from mmspec.drafters.adaptive import MAX_PROBE_EVERY, AdaptiveDrafter, _AdaptiveRun, _Rate, narrowed_tokens
from mmspec.eval.batch_sweep import collate
from mmspec.eval.code_suite import code_prompts, diffusion_factories
from mmspec.generator import SpeculativeGenerator
from mmspec.registry import CHAIN_CONFIDENCE, build_drafter
from mmspec.zoo import load


@pytest.fixture(scope="module")
def code():
    return load("code-target")


def _inners(code):
    draft = load("code-drafter").model
    extra = diffusion_factories()
    inners = {"chain": build_drafter("chain", draft, num_tokens=8, confidence=CHAIN_CONFIDENCE),
              "prompt-lookup": PromptLookupDrafter(num_tokens=4)}
    for name in ("eagle-chain", "dflash-tree"):
        if name in extra:
            inners[name] = extra[name]()
    return inners


class PlainFirst(AdaptiveDrafter):
    """The policy forced to run ``plain_steps`` plain steps, then to draft."""
    plain_steps = 0

    def _choose(self, run):
        return run.step >= self.plain_steps


def _plain_then_drafting(code, inner, seen: list):
    """Two greedy calls of ``inner`` under :class:`PlainFirst`: every step plain (``seen``, what a hook on the
    drafter's work records, must stay empty), then six plain steps before it drafts; both equal plain decoding's.
    Returns the prompt's length and the second call's output."""
    ids = code_prompts(code.tokenizer, 1)[0]
    ref = code.model.generate(ids, do_sample=False, max_new_tokens=24, min_new_tokens=24, pad_token_id=0)
    policy = PlainFirst(inner)
    policy.plain_steps = 10**6  # every step plain
    out = SpeculativeGenerator(code.model, policy).generate(ids, max_new_tokens=24, eos_token_id=[])
    assert torch.equal(out.sequences, ref) and seen == []
    policy.plain_steps = 6  # six plain steps, then drafts
    out = SpeculativeGenerator(code.model, policy).generate(ids, max_new_tokens=24, eos_token_id=[])
    assert torch.equal(out.sequences, ref)
    return ids.shape[1], out


class Alternating(AdaptiveDrafter):
    """The policy forced to switch kind every step: every hand-over between drafted and plain steps is exercised."""

    def _choose(self, run):
        return run.step % 2 == 0


@pytest.mark.parametrize("policy", [AdaptiveDrafter, Alternating])
def test_greedy_output_is_plain_decodings_whatever_it_drafts(code, policy):
    batch = collate(code_prompts(code.tokenizer, 3), code.tokenizer.pad_token_id)
    ref = code.model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=40,
                              do_sample=False, pad_token_id=0, eos_token_id=None)
    for name, inner in _inners(code).items():
        out = SpeculativeGenerator(code.model, policy(inner, probe_every=2)).generate(
            batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=40, eos_token_id=[])
        assert torch.equal(out.sequences, ref), name
        if policy is Alternating and name != "prompt-lookup":
            assert out.stats.mean_accepted_tokens > 1.2, name  # its drafted steps did accept drafts


def _run(drafted: tuple[float, float], plain: tuple[float, float], since: int = 1, drafting: bool = True,
         probe_every: int = 4):
    run = _AdaptiveRun(None, since_switch=since, drafting=drafting, probe_every=probe_every)
    for _ in range(8):
        run.drafted.add(*drafted)
        run.plain.add(*plain)
    return run


def test_the_policy_takes_the_faster_kind_and_probes_the_other():
    policy = AdaptiveDrafter(PromptLookupDrafter(), probe_every=4)
    assert policy._choose(_AdaptiveRun(None)) is True  # draft first
    first = _AdaptiveRun(None)
    for n in range(4):
        assert policy._choose(first) is True  # four measured drafted steps first
        first.drafted.add(0.03, 3.0)
    assert policy._choose(first) is False  # then one plain step, measured
    assert policy._choose(_run(drafted=(0.030, 3.0), plain=(0.015, 1.0))) is True  # 100 vs 67 tokens/s
    assert policy._choose(_run(drafted=(0.060, 2.0), plain=(0.015, 1.0), drafting=False)) is False  # 33 vs 67
    # a probe of drafting waits as many times longer as a drafted step costs more (4x here)
    assert policy._choose(_run(drafted=(0.060, 2.0), plain=(0.015, 1.0), since=15, drafting=False)) is False
    assert policy._choose(_run(drafted=(0.060, 2.0), plain=(0.015, 1.0), since=16, drafting=False)) is True
    assert policy._choose(_run(drafted=(0.030, 3.0), plain=(0.015, 1.0), since=4)) is False  # probe the plain kind
    slow = _run(drafted=(0.030, 3.0), plain=(0.015, 1.0))
    for _ in range(3):
        slow.drafted.add(9.0, 3.0)  # one odd slow step does not swing the median
    assert policy._choose(slow) is True


def test_the_measuring_plain_step_leaves_drafting_in_use():
    """The call's first plain step only measures plain steps: drafting stays the kind in use and goes on where it is
    at least as fast (10% ahead here), not only where it is 15% ahead (the band for leaving plain steps). At one row
    only: from two rows up the band applies."""
    policy = AdaptiveDrafter(PromptLookupDrafter(), probe_every=4)
    run = _AdaptiveRun(None)
    for _ in range(4):
        run.drafted.add(0.020, 2.2)  # 110 tokens/s
    assert policy._choose(run) is False and run.probing  # the measuring step
    run.drafting, run.since_switch = False, 0
    run.plain.add(0.010, 1.0)  # 100 tokens/s
    assert policy._choose(run) is True and not run.probing
    behind = _AdaptiveRun(None)  # 90 against 100 tokens/s: plain steps
    for _ in range(4):
        behind.drafted.add(0.020, 1.8)
    assert policy._choose(behind) is False
    behind.drafting, behind.plain.samples = False, [(0.010, 1.0)]
    assert policy._choose(behind) is False
    wide = _AdaptiveRun(None, rows=2)  # two rows, drafting 10% ahead: the measuring step hands over to plain steps
    for _ in range(4):
        wide.drafted.add(0.020, [2.2, 2.2])
    assert policy._choose(wide) is False and not wide.probing
    wide.drafting, wide.since_switch = False, 0
    wide.plain.add(0.010, 1.0)
    assert policy._choose(wide) is False


def test_drafting_that_won_in_a_recent_call_is_judged_afresh():
    """One call where drafting lost does not set a batch size's later calls on plain steps while it won in one of
    the calls before that ran the last four prompts (a prompt the drafter could not guess, among ones it could); a
    run of lost calls does. From four rows up, the last call alone says."""
    from mmspec.drafters.adaptive import _plain_and_lost, _recent_calls
    lost = dict(drafting=False, won=False, opening_won=False)
    assert not _plain_and_lost(dict(lost, won_before=(True, False)))
    assert _plain_and_lost(dict(lost, won_before=(False,) * 3))
    assert [_recent_calls(rows) for rows in (1, 2, 3, 4, 16)] == [4, 2, 2, 1, 1]  # the calls of the last 4 prompts
    policy = AdaptiveDrafter(PromptLookupDrafter(), probe_every=4)
    # a drafted step that lost, at twice a plain step's cost (not dear: a dear one resumes with an unverified draft)
    memory = dict(arms=[[(0.02, [1])] * 8], arm=0, plain=[(0.01, 1.0)] * 8, drafting=False, since_switch=3,
                  probe_every=MAX_PROBE_EVERY, since_shadow=0, won=False, opening_won=False, plain_calls=0)
    policy._memory[1] = dict(memory, won_before=(False, True))
    context = SimpleNamespace(state=SimpleNamespace(tokens=torch.zeros(1, 3, dtype=torch.long),
                                                    sampling=SimpleNamespace(do_sample=False)),
                              hidden=None, rows_leave=False)
    run = policy.begin(context)
    assert run.drafting and run.drafted.samples == [] and run.won_before == (False, True, False)
    policy._memory[1] = dict(memory, won_before=(True, False, False))  # won four calls ago: judged afresh once more
    run = policy.begin(context)
    assert run.drafting and run.won_before == (False, False, False)  # (what the next call will remember)
    policy._memory[1] = dict(memory, won_before=(False, False, False))  # lost in each of the last four calls
    run = policy.begin(context)
    assert not run.drafting and run.drafted.samples == [(0.02, [1])] * 8
    policy._memory[4] = dict(memory, arms=[[(0.02, [1] * 4)] * 8], won_before=())
    wide = SimpleNamespace(state=SimpleNamespace(tokens=torch.zeros(4, 3, dtype=torch.long),
                                                 sampling=context.state.sampling), hidden=None, rows_leave=False)
    run = policy.begin(wide)  # the last call at four rows lost: resumed on plain steps, no history kept
    assert not run.drafting and run.won_before == ()


def test_losing_probes_space_out_and_a_later_call_starts_from_what_was_measured():
    policy = AdaptiveDrafter(PromptLookupDrafter(), probe_every=4)
    # a batch of two rows: the slowest accepts 1 token a step (53 tokens/s against 67), the average 1.5 (79)
    run = _run(drafted=(0.019, [1, 2]), plain=(0.015, 1.0), since=8, drafting=False)
    intervals = []
    for _ in range(5):
        assert policy._choose(run) is True and run.probing  # the probe
        run.drafting, run.since_switch = True, 0
        assert policy._choose(run) is True  # its first step only re-feeds the drafter: one more, measured
        run.since_switch = 1
        assert policy._choose(run) is False  # it lost: back to plain steps, probing half as often
        run.drafting, run.since_switch = False, 2 * run.probe_every
        intervals.append(run.probe_every)
    assert intervals == [8, 16, 32, 64, MAX_PROBE_EVERY]


def test_a_later_call_at_the_same_batch_size_remembers(code):
    draft = load("code-drafter").model
    policy = AdaptiveDrafter(build_drafter("chain", draft, num_tokens=8, confidence=CHAIN_CONFIDENCE))
    ids = code_prompts(code.tokenizer, 1)[0]
    SpeculativeGenerator(code.model, policy).generate(ids, max_new_tokens=48, eos_token_id=[])
    assert 1 in policy._memory and policy._memory[1]["arms"][0] and policy._memory[1]["plain"]


def test_a_batch_is_rated_by_its_slowest_row():
    from mmspec.drafters.adaptive import _Rate
    rate = _Rate(window=4)
    rate.add(0.010, [5, 1, 3])
    rate.add(0.010, [5, 2, None])  # row 2 has finished
    assert rate.tokens == 1.5  # rows generating in the latest step: 0 (mean 5) and 1 (mean 1.5)
    rate.add(0.010, [None, 4, None])
    assert rate.tokens == (1 + 2 + 4) / 3  # only row 1 is still generating
    single = _Rate()
    for t in (1.0, 3.0):
        single.add(0.01, t)
    assert single.tokens == 2.0  # batch 1 (or a float per step): the mean


def test_a_hopeless_probe_backs_off_to_the_longest_interval():
    policy = AdaptiveDrafter(PromptLookupDrafter(), probe_every=4)
    run = _run(drafted=(0.060, 1.0), plain=(0.015, 1.0), since=1, drafting=True)  # 17 vs 67 tokens/s
    run.probing = True
    assert policy._choose(run) is False and run.probe_every == MAX_PROBE_EVERY
    # lost by its slowest row (1 token a step: 33 vs 67 tokens/s) but not at the rows' average (2.5 a step: 83):
    # a batch whose rows accept unevenly; worth probing again, at twice the interval
    near = _run(drafted=(0.030, [1, 4]), plain=(0.015, 1.0), since=1, drafting=True)
    near.probing = True
    assert policy._choose(near) is False and near.probe_every == 8


def test_a_later_call_resumes_the_kind_in_use_and_the_probe_interval(code):
    draft = load("code-drafter").model
    policy = AdaptiveDrafter(build_drafter("chain", draft, num_tokens=8, confidence=CHAIN_CONFIDENCE))
    ids = code_prompts(code.tokenizer, 1)[0]
    gen = SpeculativeGenerator(code.model, policy)
    gen.generate(ids, max_new_tokens=48, eos_token_id=[])
    policy._memory[1].update(drafting=False, since_switch=3, probe_every=MAX_PROBE_EVERY, won=False, won_before=(),
                             opening_won=False,
                             arms=[[(1.0, [1])] * 8])  # as if drafting had measured far slower than plain steps
    # the next call starts with plain steps (the remembered kind) and keeps the remembered interval: no probe in
    # 12 tokens, so every step emits exactly one token
    out = gen.generate(ids, max_new_tokens=12, eos_token_id=[])
    assert out.stats.accept_lengths[0] == [1] * 12
    assert policy._memory[1]["probe_every"] == MAX_PROBE_EVERY and policy._memory[1]["drafting"] is False
    assert policy._memory[1]["since_switch"] == 3 + 10  # 11 plain steps; the call's last one is not observed


def test_the_routes_adaptive_option_wraps_the_drafter_and_keeps_the_output():
    import mmspec
    from mmspec.registry import build_drafter as build

    auto = mmspec.pipeline("zoo:code-target", adaptive=True)
    plain = mmspec.pipeline("zoo:code-target", method="plain")
    assert isinstance(auto.engine.drafter, AdaptiveDrafter)
    prompts = ["def add(a, b):\n", "import os\nimport sys\n"]
    a, p = auto(prompts, max_new_tokens=24), plain(prompts, max_new_tokens=24)
    assert torch.equal(a.sequences, p.sequences)
    assert not isinstance(build("mmspec-plain", adaptive=True), AdaptiveDrafter)  # nothing to adapt
    with pytest.raises(ValueError, match="adaptive"):
        mmspec.pipeline("zoo:code-target", adaptive="yes")


def test_a_call_after_one_where_drafting_won_measures_drafting_afresh(code, monkeypatch):
    """The last call ended on plain steps, far apart probes, but drafting had won in it (a VLM answer's tail the
    drafter could not guess): the next call drafts its opening steps and judges drafting on them, against the
    remembered plain steps. After a call where drafting never won, the next resumes on plain steps (no probe)."""
    draft = load("code-drafter").model
    inner = build_drafter("chain", draft, num_tokens=8, confidence=CHAIN_CONFIDENCE)
    drafted = []
    original = type(inner).propose
    inner.propose = lambda context, run: drafted.append(1) or original(inner, context, run)
    policy = AdaptiveDrafter(inner)
    ids = code_prompts(code.tokenizer, 1)[0]
    gen = SpeculativeGenerator(code.model, policy)
    # a clock that ticks 1 ms a reading makes every step's measured time the same, a drafted step 3 ms and a plain
    # one 2 ms: the policy's choices depend on the tokens per step alone, not on how busy the machine is
    clock = iter(range(10**9))
    monkeypatch.setattr(adaptive, "time", SimpleNamespace(perf_counter=lambda: next(clock) * 1e-3))
    gen.generate(ids, max_new_tokens=48, eos_token_id=[])
    assert policy._memory[1]["won"] is True  # this chain beats plain steps on the suite's prompts
    lost = dict(drafting=False, since_switch=3, probe_every=MAX_PROBE_EVERY, arms=[[(1.0, [1])] * 8],
                plain=[(0.015, 1.0)] * 8)
    policy._memory[1].update(lost, won=True)
    drafted.clear()
    out = gen.generate(ids, max_new_tokens=24, eos_token_id=[])
    steps = len(out.stats.accept_lengths[0])
    assert len(drafted) >= min(steps, 5)  # the feeding step and four measured ones drafted
    assert policy._memory[1]["plain"][:8] == [(0.015, 1.0)] * 8  # the plain steps' measurements were kept
    assert (1.0, [1]) not in policy._memory[1]["arms"][0]  # drafting was judged on this call's steps alone
    policy._memory[1].update(lost, won=False, won_before=(), opening_won=False)
    drafted.clear()
    out = gen.generate(ids, max_new_tokens=12, eos_token_id=[])
    assert out.stats.accept_lengths[0] == [1] * 12 and drafted == []

    # drafting lost, but the last call's first drafted step beat plain steps: the call drafts its first step (the
    # block that often holds a known answer whole), outside the windows
    policy._memory[1].update(lost, won=False, won_before=(), opening_won=True)
    drafted.clear()
    out = gen.generate(ids, max_new_tokens=24, eos_token_id=[])
    # >= 1 token in 3 ms beats 67 plain tokens a second: at one row the prompt is one the drafter knows, and the call
    # drafts on, judged afresh on its own steps (the opening, then four measured ones at least)
    assert policy._memory[1]["opening_won"] is True
    assert len(drafted) >= 5 and (1.0, [1]) not in policy._memory[1]["arms"][0]
    # plain steps far faster: the opening loses, and the call resumes plain steps after it
    policy._memory[1].update(lost, plain=[(1e-4, 1.0)] * 8, won=False, won_before=(), opening_won=True)
    drafted.clear()
    out = gen.generate(ids, max_new_tokens=24, eos_token_id=[])
    assert len(drafted) == 1 and set(out.stats.accept_lengths[0][1:]) == {1}
    assert policy._memory[1]["arms"][0] == [(1.0, [1])] * 8  # the opening was measured outside the window
    assert policy._memory[1]["since_switch"] > 3 and policy._memory[1]["drafting"] is False
    assert policy._memory[1]["opening_won"] is False  # and is dropped
    drafted.clear()
    out = gen.generate(ids, max_new_tokens=24, eos_token_id=[])
    assert drafted == [] and set(out.stats.accept_lengths[0]) == {1}


def test_a_drafter_that_catches_up_begins_only_when_it_first_drafts(code):
    """A call resumed on plain steps does not run the drafter's begin (its prompt prefill) until a probe drafts,
    mid-call; the output is still plain decoding's."""
    draft = load("code-drafter").model
    inner = build_drafter("chain", draft, num_tokens=8, confidence=CHAIN_CONFIDENCE)
    begins = []
    original = type(inner).begin

    def counting_begin(context):
        begins.append(int(context.state.lengths.max()))
        return original(inner, context)

    inner.begin = counting_begin
    policy = AdaptiveDrafter(inner)
    batch = collate(code_prompts(code.tokenizer, 2), code.tokenizer.pad_token_id)
    gen = SpeculativeGenerator(code.model, policy)
    gen.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=32, eos_token_id=[])
    assert len(begins) == 1  # the first call drafts from its first step
    policy._memory[2].update(drafting=False, since_switch=0, probe_every=2, won=False, won_before=(), opening_won=False,
                             arms=[[(0.06, [1, 1])] * 8], plain=[(0.015, 1.0)] * 8)  # plain wins; probe at step 8
    prompt_len = batch["input_ids"].shape[1]
    out = gen.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=40, eos_token_id=[])
    ref = code.model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=40,
                              do_sample=False, pad_token_id=0, eos_token_id=None)
    assert torch.equal(out.sequences, ref)
    assert len(begins) == 2 and begins[1] > prompt_len + 1  # begun mid-call, after plain steps


def test_a_feature_drafter_keeps_every_positions_features_through_plain_steps(code):
    """Plain steps do not advance a feature drafter's own counters (it did not draft): the features it stores
    must still land at their tokens' positions, or its drafts after a plain stretch read the wrong features."""
    extra = diffusion_factories()
    if "eagle-chain" not in extra:
        pytest.skip("zoo:code-eagle is not built")
    runs = {}

    def keep(policy_cls, name):
        class Keeping(policy_cls):
            def begin(self, context):
                run = super().begin(context)
                runs[name] = run
                return run
        return Keeping

    ids = code_prompts(code.tokenizer, 1)[0]
    always = extra["eagle-chain"]()
    original = type(always).begin

    def keep_inner(context):
        run = original(always, context)
        runs["always"] = run
        return run

    always.begin = keep_inner
    a = SpeculativeGenerator(code.model, always).generate(ids, max_new_tokens=30, eos_token_id=[])
    b = SpeculativeGenerator(code.model, keep(Alternating, "alternating")(extra["eagle-chain"](), probe_every=2)) \
        .generate(ids, max_new_tokens=30, eos_token_id=[])
    assert torch.equal(a.sequences, b.sequences)
    # the call's last step is not observed: features are stored up to (not including) its root
    n = min(out.sequences.shape[1] - out.stats.accept_lengths[0][-1] - 1 for out in (a, b))
    mine, ref = runs["alternating"].inner.features[:, :n], runs["always"].features[:, :n]
    torch.testing.assert_close(mine, ref, rtol=1e-4, atol=1e-4)


def test_a_feature_drafter_runs_its_network_only_once_it_drafts(code):
    """A feature drafter's pass over the prompt waits for its first draft: a call the policy keeps on plain steps
    never runs the drafter's network (the large-batch case, where that prefill costs most), and a call that starts
    drafting after plain steps prefills then, catches up from the features stored meanwhile, and stays exact."""
    extra = diffusion_factories()
    if "eagle-chain" not in extra:
        pytest.skip("zoo:code-eagle is not built")
    inner = extra["eagle-chain"]()
    calls = []
    forward = inner.net.append

    def counting(cache, x, *args, **kwargs):
        calls.append(x.shape[1])
        return forward(cache, x, *args, **kwargs)

    inner.net.append = counting
    prompt_length, _ = _plain_then_drafting(code, inner, calls)
    assert calls[0] == prompt_length - 1  # the prompt pass (one entry per token after the first) ...
    assert calls[1] == 7  # ... then, in one feed, the prefill's token and the six the plain steps emitted


def test_a_dflash_drafter_builds_its_context_only_once_it_drafts(code):
    """DFlash stores the verifier's features at each step and appends them to its context cache when it next
    drafts: a call the policy keeps on plain steps never runs a drafter op beyond that copy, and one that starts
    drafting after plain steps appends the prompt, then the plain steps' positions in one go, and stays exact."""
    extra = diffusion_factories()
    if "dflash-tree" not in extra:
        pytest.skip("zoo:code-dflash is not built")
    inner = extra["dflash-tree"]()
    widths = []
    append, entries = inner._append, inner._new_entries
    inner._append = lambda cache, ctx, valid: widths.append(ctx.shape[1]) or append(cache, ctx, valid)  # the prompt

    def new_entries(context, run):  # the positions verified since, which the next block forward appends
        found = entries(context, run)
        if found is not None:
            widths.append(found[0].shape[1])
        return found
    inner._new_entries = new_entries
    prompt_length, out = _plain_then_drafting(code, inner, widths)
    assert out.stats.mean_accepted_tokens > 1.0
    assert widths[:2] == [prompt_length, 6]  # the prompt's positions, then the six the plain steps verified


def test_drafting_is_kept_only_while_it_is_at_least_as_fast():
    """The hysteresis band lies on drafting's side: a drafting run whose rate falls below plain steps' switches to
    plain at once, while plain steps wait for drafting to be 15% faster before switching back."""
    policy = AdaptiveDrafter(PromptLookupDrafter(), probe_every=64)
    # 95 tokens/s drafted against 100 plain: a 5% loss
    assert policy._choose(_run(drafted=(0.020, 1.9), plain=(0.010, 1.0), drafting=True)) is False
    # 110 against 100: drafting is kept while drafting, not taken up while on plain steps
    assert policy._choose(_run(drafted=(0.020, 2.2), plain=(0.010, 1.0), drafting=True)) is True
    assert policy._choose(_run(drafted=(0.020, 2.2), plain=(0.010, 1.0), drafting=False)) is False
    assert policy._choose(_run(drafted=(0.020, 2.4), plain=(0.010, 1.0), drafting=False)) is True  # 120: 20% faster


def test_a_narrowed_batch_is_judged_afresh_and_not_remembered_for_the_calls_batch_size():
    """The loop dropping finished rows halves the batch at least: steps measured on the wider batch no longer say
    what a step costs, so both windows start over (drafting first, as at a call's start), and what this call
    measures from then on is not stored as the memory of its starting batch size."""
    policy = AdaptiveDrafter(PromptLookupDrafter(), probe_every=4)
    run = _run(drafted=(0.060, 2.0), plain=(0.015, 1.0), since=3, drafting=False, probe_every=16)
    run.rows = 8
    assert policy._choose(run) is False  # plain steps win at the wide batch
    run = policy.select_rows(run, torch.tensor([1, 5]))
    assert run.narrowed and not run.drafted.samples and not run.plain.samples
    assert run.probe_every == 4 and run.since_switch == 0
    assert policy._choose(run) is True  # re-judged: drafting first
    state = SimpleNamespace(active=torch.tensor([True, True]), roots=torch.tensor([3, 4]))
    result = SimpleNamespace(num_accepted=torch.tensor([2, 1]))
    run.active_before, run.drafting, run.fed, run.t_proposed, run.t_draft = [True, True], True, True, 0.0, 0.0
    policy.observe(SimpleNamespace(state=state), run, None, result)
    run.plain.add(0.01, 1.0)
    policy.observe(SimpleNamespace(state=state), run, None, result)
    assert run.drafted.samples and run.plain.samples and 8 not in policy._memory


def test_where_finished_rows_leave_a_batch_is_rated_by_what_the_narrowing_loop_gets():
    """Rows emitting 8 and 2 tokens a step: without dropping rows the pair waits for the slow one (2 a step); with
    it, the fast row's 1/8 step a token is paid by both rows and the slow one's rest alone, 2 / (2/8 + 3/8) = 3.2.
    Half a batch leaving at once is dropped at once; a lone straggler among four waits for the half."""
    assert narrowed_tokens([2.0]) == 2.0
    assert narrowed_tokens([8.0, 2.0]) == pytest.approx(3.2)
    assert narrowed_tokens([8.0] * 8 + [2.0] * 8) == pytest.approx(16 / (16 / 8 + 8 * 3 / 8))
    # four rows, one fast: nothing leaves until two have ended, so the fast row buys nothing until then
    assert narrowed_tokens([8.0, 2.0, 2.0, 2.0]) == pytest.approx(4 / (4 * 0.5))
    assert min([8.0, 2.0]) < narrowed_tokens([8.0, 2.0]) < (8.0 + 2.0) / 2
    per_row = [(0.01, [8.0, 2.0])] * 3
    assert _Rate(8, list(per_row)).tokens == 2.0
    assert _Rate(8, list(per_row), rows_leave=True).tokens == pytest.approx(3.2)
    # the loop drops rows for this drafter on a CPU: the policy rates drafted steps so
    policy = AdaptiveDrafter(PromptLookupDrafter())
    context = SimpleNamespace(state=SimpleNamespace(tokens=torch.zeros(2, 4, dtype=torch.long),
                                                    sampling=SimpleNamespace(do_sample=False)), rows_leave=True)
    assert policy.begin(context).drafted.rows_leave


def test_a_dear_trial_far_behind_plain_steps_stops_after_two_steps():
    """A call judging drafting afresh against remembered plain steps stops its trial after two measured steps when
    they are far behind and each costs three plain steps or more (a large batch); a cheap trial, or one at one row,
    runs to its end."""
    policy = AdaptiveDrafter(PromptLookupDrafter(), probe_every=8)
    run = _AdaptiveRun(None, rows=2)
    for _ in range(8):
        run.plain.add(0.020, 1.0)  # 50 tokens/s
    run.drafted.add(0.100, [3, 1])
    assert policy._choose(run) is True  # one measured step: the trial goes on
    run.drafted.add(0.100, [4, 2])  # the slowest row's 1.5 tokens in 100 ms: 15 tokens/s, five plain steps' cost
    assert policy._choose(run) is False and run.cut_short and run.probe_every == 16
    run.drafting, run.since_switch = False, 0
    assert policy._choose(run) is False  # plain steps go on (the trial's remaining steps are not drafted)
    cheap = _AdaptiveRun(None, rows=2)
    for _ in range(8):
        cheap.plain.add(0.020, 1.0)
    for _ in range(2):
        cheap.drafted.add(0.050, [1, 1])  # 20 tokens/s, but only 2.5 plain steps' cost
    assert policy._choose(cheap) is True and not cheap.cut_short
    one_row = _AdaptiveRun(None, rows=1)  # never at one row
    for _ in range(8):
        one_row.plain.add(0.020, 1.0)
    for _ in range(2):
        one_row.drafted.add(0.100, [1])
    assert policy._choose(one_row) is True and not one_row.cut_short


def test_a_probe_is_judged_by_the_band_of_the_kind_in_use():
    """A drafting probe (plain steps in use) wins only when drafting is 15% faster; a plain probe (drafting in use)
    takes drafting off only when drafting is slower than plain steps."""
    policy = AdaptiveDrafter(PromptLookupDrafter(), probe_every=64)
    for tokens, wins in ((2.2, False), (2.4, True)):  # 110 and 120 tokens/s against plain steps' 100
        run = _run(drafted=(0.020, tokens), plain=(0.010, 1.0), since=1, drafting=True)
        run.probing = True  # the drafting probe's measured step just ran
        assert policy._choose(run) is wins
    for tokens, keeps in ((2.2, True), (1.9, False)):  # 110 and 95 tokens/s
        run = _run(drafted=(0.020, tokens), plain=(0.010, 1.0), since=0, drafting=False)
        run.probing = True  # the plain probe just ran
        assert policy._choose(run) is keeps


def test_a_window_spanning_calls_takes_each_rows_mean_within_its_call():
    """Row j of one call and row j of the next are different prompts: a batch whose first row drafted 2 tokens a
    step, then one whose second row did, get 2 tokens a step from each call's slowest row, not the 5 that mixing the
    two calls' rows gives (both rows at a mean of 5: the stragglers hidden). Calls of different rates add up by
    their steps in the window."""
    from mmspec.drafters.adaptive import RowTokens
    tagged = _Rate(8, [(1.0, RowTokens([2, 8], 1))] * 2 + [(1.0, RowTokens([8, 2], 2))] * 2)
    assert tagged.tokens == pytest.approx(2.0)
    untagged = _Rate(8, [(1.0, [2, 8])] * 2 + [(1.0, [8, 2])] * 2)  # one call
    assert untagged.tokens == pytest.approx(5.0)
    mixed = _Rate(8, [(1.0, RowTokens([8, 8], 1))] * 1 + [(1.0, RowTokens([8, 2], 2))] * 3)
    assert mixed.tokens == pytest.approx((1 * 8 + 3 * 2) / 4)
    leave = _Rate(8, [(1.0, RowTokens([8, 8], 1))] * 2 + [(1.0, RowTokens([8, 2], 2))] * 2, rows_leave=True)
    assert leave.tokens == pytest.approx((2 * 8 + 2 * narrowed_tokens([8.0, 2.0])) / 4)


def test_a_step_cost_that_stays_as_rows_leave_narrows_the_gain_of_dropping_them():
    """With a share of every step's cost that stays whatever rows it holds, dropping finished rows gains less: the
    batch's tokens per step go from the proportional case (share 0) down to its slowest row's (share 1). The share
    comes from two measured costs on a straight line: 12 + 7 k ms at 1 row (19 ms) and 8 rows (68 ms) leaves 12 of
    an 8-row step's 68 ms."""
    rows = [8.0, 8.0, 8.0, 2.0]
    assert narrowed_tokens(rows, 0.0) == narrowed_tokens(rows)
    assert narrowed_tokens(rows, 1.0) == pytest.approx(2.0)
    assert min(rows) < narrowed_tokens(rows, 0.3) < narrowed_tokens(rows)
    rate = _Rate(8, [(0.068, [4] * 8)] * 4, rows_leave=True, reference=(1, 0.019))
    assert rate.fixed_share(8) == pytest.approx(0.012 / 0.068)
    assert rate.fixed_share(1) == 0.0 and _Rate(8, [(0.068, [4] * 8)], rows_leave=True).fixed_share(8) == 0.0
    straggler = _Rate(8, [(0.068, [8] * 7 + [2])] * 4, rows_leave=True, reference=(1, 0.019))
    assert straggler.tokens == pytest.approx(narrowed_tokens([8.0] * 7 + [2.0], 0.012 / 0.068))
    assert straggler.tokens < _Rate(8, [(0.068, [8] * 7 + [2])] * 4, rows_leave=True).tokens


def test_at_one_row_a_fresh_judgement_pools_the_recent_calls_acceptance():
    """A one-row call after calls where drafting won judges drafting on its own steps pooled with the recent calls'
    tokens a step (worth PRIOR_STEPS steps): four opening steps of 1.25 tokens, after calls that drafted 3, keep
    drafting (the window alone would switch to plain steps); a run of steps that stay poor still switches. A batch
    judges its own steps alone, and windows made with ``like`` (a probe's own steps, one draft's verdict) drop the
    prior."""
    from mmspec.drafters.adaptive import PRIOR_STEPS, RowTokens
    policy = AdaptiveDrafter(PromptLookupDrafter(), probe_every=64)
    memory = dict(arms=[[(0.020, RowTokens([3], c)) for c in (1, 2) for _ in range(8)]], arm=0,
                  plain=[(0.010, 1.0)] * 8, drafting=True, since_switch=5, probe_every=64, since_shadow=0,
                  won=True, won_before=(), opening_won=True, plain_calls=0)
    policy._memory[1] = dict(memory)
    context = SimpleNamespace(state=SimpleNamespace(tokens=torch.zeros(1, 3, dtype=torch.long),
                                                    sampling=SimpleNamespace(do_sample=False)),
                              hidden=None, rows_leave=False)
    run = policy.begin(context)
    assert run.drafted.samples == [] and run.drafted.prior == (pytest.approx(3.0), PRIOR_STEPS)
    run.fed, run.since_switch = True, 1
    for _ in range(4):
        run.drafted.add(0.020, RowTokens([1.25], run.call))
    assert run.drafted.tokens == pytest.approx((PRIOR_STEPS * 3 + 4 * 1.25) / (PRIOR_STEPS + 4))
    assert policy._choose(run) is True  # pooled: 2.1 tokens in 20 ms against 1 in 10 ms
    assert run.drafted.like(4, run.drafted.samples).tokens == pytest.approx(1.25)
    alone = _AdaptiveRun(None, since_switch=1, plain=_Rate(8, [(0.010, 1.0)] * 8))
    alone.drafted.samples = list(run.drafted.samples)
    assert policy._choose(alone) is False  # the same steps judged alone: plain steps
    for _ in range(4):
        run.drafted.add(0.020, RowTokens([1.25], run.call))
    assert policy._choose(run) is False  # eight poor steps outweigh the recent calls
    policy._memory[4] = dict(memory, arms=[[(0.050, RowTokens([3] * 4, 1))] * 8])
    wide = SimpleNamespace(state=SimpleNamespace(tokens=torch.zeros(4, 3, dtype=torch.long),
                                                 sampling=context.state.sampling), hidden=None, rows_leave=False)
    assert policy.begin(wide).drafted.prior is None
