"""The adaptive policy (drafts only where it pays) never changes the output: greedy equals plain decoding whatever
the steps it drafts, for every kind of inner drafter and ragged batches; and it picks the faster kind of step."""

import pytest
import torch

from mmspec.drafters import PromptLookupDrafter
from mmspec.drafters.adaptive import MAX_PROBE_EVERY, AdaptiveDrafter, _AdaptiveRun
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
    for _ in range(3):
        run.drafted.add(*drafted)
        run.plain.add(*plain)
    return run


def test_the_policy_takes_the_faster_kind_and_probes_the_other():
    policy = AdaptiveDrafter(PromptLookupDrafter(), probe_every=4)
    assert policy._choose(_AdaptiveRun(None)) is True  # draft first
    first = _AdaptiveRun(None)
    first.drafted.add(0.03, 3.0)
    assert policy._choose(first) is False  # then one plain step, measured
    assert policy._choose(_run(drafted=(0.030, 3.0), plain=(0.015, 1.0))) is True  # 100 vs 67 tokens/s
    assert policy._choose(_run(drafted=(0.060, 2.0), plain=(0.015, 1.0), drafting=False)) is False  # 33 vs 67
    # a probe of drafting waits as many times longer as a drafted step costs more (4x here)
    assert policy._choose(_run(drafted=(0.060, 2.0), plain=(0.015, 1.0), since=15, drafting=False)) is False
    assert policy._choose(_run(drafted=(0.060, 2.0), plain=(0.015, 1.0), since=16, drafting=False)) is True
    assert policy._choose(_run(drafted=(0.030, 3.0), plain=(0.015, 1.0), since=4)) is False  # probe the plain kind
    slow = _run(drafted=(0.030, 3.0), plain=(0.015, 1.0))
    slow.drafted.add(9.0, 3.0)  # one odd slow step does not swing the median
    assert policy._choose(slow) is True


def test_losing_probes_space_out_and_a_later_call_starts_from_what_was_measured():
    policy = AdaptiveDrafter(PromptLookupDrafter(), probe_every=4)
    run = _run(drafted=(0.020, 1.0), plain=(0.015, 1.0), since=8, drafting=False)
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
    SpeculativeGenerator(code.model, policy).generate(ids, max_new_tokens=16, eos_token_id=[])
    assert 1 in policy._memory and all(policy._memory[1])
