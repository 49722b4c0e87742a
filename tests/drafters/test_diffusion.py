"""Diffusion-LM drafting: the backend's context modes and conventions, DEER through the engine."""

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters import DEERDrafter, DiffusionLM
from mmspec.drafters.base import confident_length
from mmspec.drafters.diffusion import check_vocabularies
from mmspec.tiny import tiny_model

MASK = 2


def prompts(batch=2, length=10, seed=0):
    return torch.randint(4, 96, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("context", ["cache", "window", "full"])
@pytest.mark.parametrize("convention", ["dream", "llada"])
def test_deer_is_exact_under_greedy(tiny_pair, greedy_reference, context, convention):
    target, dm = tiny_pair
    ids = prompts()
    mask = torch.ones_like(ids)
    ids[1, :3] = 0
    mask[1, :3] = 0  # a left-padded row
    ref = greedy_reference(target, ids, 18, attention_mask=mask)
    dlm = DiffusionLM(dm, MASK, convention=convention, context=context, window=6)
    out = SpeculativeGenerator(target, DEERDrafter(dlm, num_tokens=5)).generate(
        ids, attention_mask=mask, max_new_tokens=18, eos_token_id=[])
    assert torch.equal(out.sequences, ref)


def test_cached_self_draft_predicts_the_target_exactly(tiny_pair):
    """Dream convention + cache: slot 0 comes from the last clean token, which never sees the slots, so a
    target drafting for itself is always right about the first slot."""
    target, _ = tiny_pair
    ids = prompts(batch=1)
    dlm = DiffusionLM(target, MASK, convention="dream", context="cache")
    out = SpeculativeGenerator(target, DEERDrafter(dlm, num_tokens=1)).generate(ids, max_new_tokens=16,
                                                                                eos_token_id=[])
    steps = out.stats.accept_lengths[0]  # the prefill's token first, the last step cut by max_new_tokens
    assert steps[0] == 1 and all(a == 2 for a in steps[1:-1]) and len(steps) == 9


def test_deer_confidence_cuts_the_block_after_the_first_doubtful_slot():
    p = torch.tensor([[0.9, 0.2, 0.3, 0.9], [0.1, 0.5, 0.1, 0.1]])
    both, first_only = torch.tensor([True, True]), torch.tensor([True, False])
    assert confident_length(p, both, 0.4) == 3  # slot 2 trusted by no row: kept, the rest cut
    assert confident_length(p, first_only, 0.4) == 2  # a finished row's confidence does not count
    assert confident_length(torch.full((2, 4), 0.5), both, 0.4) == 4
    assert confident_length(p, both, None) == 4  # no threshold


def test_confident_deer_is_exact_and_drafts_shorter_blocks(tiny_pair, greedy_reference):
    target, dm = tiny_pair
    sharp = type(dm)(dm.config)
    with torch.no_grad():
        for w in sharp.parameters():
            w.normal_(0, 0.2)  # confident slots, so the threshold cuts some blocks and keeps others
    ids = prompts()
    ref = greedy_reference(target, ids, 24)
    sizes = {}
    for conf in (None, 0.5):
        drafter = DEERDrafter(DiffusionLM(sharp.eval(), MASK, context="cache"), num_tokens=6, confidence=conf)
        propose, sizes[conf] = drafter.propose, []

        def spy(context, run, propose=propose, seen=sizes[conf]):
            tree = propose(context, run)
            seen.append(tree.num_nodes - 1)
            return tree

        drafter.propose = spy
        out = SpeculativeGenerator(target, drafter).generate(ids, max_new_tokens=24, eos_token_id=[])
        assert torch.equal(out.sequences, ref)
    assert set(sizes[None]) == {6}
    assert min(sizes[0.5]) < 6 and all(1 <= n <= 6 for n in sizes[0.5])  # some blocks cut, none emptied


def _bidirectional_reference(model, ids: torch.Tensor, vis: torch.Tensor) -> torch.Tensor:
    T = ids.shape[1]
    return model(input_ids=ids, attention_mask=vis[None, None], position_ids=torch.arange(T)[None]).logits[0]


def test_slot_logits_match_an_explicit_forward(tiny_pair):
    """Cache mode: the prefix causal, the k slots seeing everything. Full mode: all bidirectional."""
    from mmspec.state import DecodeState
    from mmspec.verifiers.logits import SamplingConfig

    _, dm = tiny_pair
    seq = prompts(batch=1, length=10)[0]  # a 9-token prompt, then one generated token (the root)
    k, n = 4, 10
    state = DecodeState(tokens=torch.cat([seq, torch.zeros(40, dtype=torch.long)])[None].clone(),
                        lengths=torch.tensor([n]), starts=torch.tensor([0]), prompt_length=9,
                        active=torch.tensor([True]), sampling=SamplingConfig())
    ids = torch.cat([seq, torch.full((k,), MASK)])[None]
    T = ids.shape[1]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    causal[n:, :] = True
    full = torch.ones(T, T, dtype=torch.bool)
    with torch.no_grad():
        for context, vis in (("cache", causal), ("full", full)):
            for convention in ("dream", "llada"):
                dlm = DiffusionLM(dm, MASK, convention=convention, context=context)
                cache = dlm.begin(state, 48, k)
                got = dlm.slot_logprobs(state, k, cache)[0]
                ref = _bidirectional_reference(dm, ids, vis)
                ref = ref[n:n + k] if convention == "llada" else ref[n - 1:n - 1 + k]
                torch.testing.assert_close(got, torch.log_softmax(ref.float(), -1), atol=1e-5, rtol=1e-5)


def test_vocabulary_rules(tiny_pair):
    assert check_vocabularies(100, 96) == 96
    with pytest.raises(ValueError, match="smaller than the target"):
        check_vocabularies(90, 96)
    target, _ = tiny_pair
    big = tiny_model("llama", seed=3, vocab_size=128, num_layers=1)
    with torch.no_grad():
        big.lm_head.bias = None
        big.lm_head.weight[96:] += 100.0  # extra ids would win every slot if not masked out
    dlm = DiffusionLM(big, MASK, target_vocab_size=96)
    assert dlm.vocab_size == 96
    ids = prompts(batch=1)
    out = SpeculativeGenerator(target, DEERDrafter(dlm, num_tokens=3)).generate(ids, max_new_tokens=6,
                                                                                eos_token_id=[])
    assert out.sequences.max() < 96
    with pytest.raises(ValueError, match="does not match the target"):
        SpeculativeGenerator(target, DEERDrafter(DiffusionLM(big, MASK), num_tokens=3))


def test_bad_configuration_is_an_error(tiny_pair):
    _, dm = tiny_pair
    with pytest.raises(ValueError, match="convention"):
        DiffusionLM(dm, MASK, convention="bert")
    with pytest.raises(ValueError, match="context"):
        DiffusionLM(dm, MASK, context="everything")
    with pytest.raises(ValueError, match="mask_token_id"):
        DiffusionLM(dm, 10_000)
    with pytest.raises(ValueError, match="needs attention='mask'"):
        DiffusionLM(dm, MASK, attention="native", context="cache")
    with pytest.raises(ValueError, match="num_tokens"):
        DEERDrafter(DiffusionLM(dm, MASK), num_tokens=0)
    for bad in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="confidence must be a probability"):
            DEERDrafter(DiffusionLM(dm, MASK), confidence=bad)


def test_from_pretrained_reads_conventions(tmp_path, tiny_pair):
    _, dm = tiny_pair
    dm.save_pretrained(tmp_path / "plain")
    with pytest.raises(ValueError, match="cannot tell the logits convention"):
        DiffusionLM.from_pretrained(tmp_path / "plain", mask_token_id=MASK)
    dlm = DiffusionLM.from_pretrained(tmp_path / "plain", convention="llada", mask_token_id=MASK)
    assert dlm.convention == "llada" and dlm.attention == "mask" and dlm.context == "cache"
    with pytest.raises(ValueError, match="no mask token id"):
        DiffusionLM.from_pretrained(tmp_path / "plain", convention="dream")


@pytest.mark.parametrize("convention", ["dream", "llada"])
def test_cached_drafts_during_decoding_are_what_training_computes(tiny_pair, convention):
    """Across the steps of a real decode (ragged batch, the drafter's cache grown step by step), every DEER block
    equals the argmax of one forward over the row's tokens + k masks under the training attention pattern
    ("cache": the prefix causal, the slots seeing everything): what the DEER stages train is what drafts."""
    from mmspec.training.dlm import attention_mask, slot_logits

    target, _ = tiny_pair
    dm = target  # two layers: the prefix's own outputs reach the slots only through a second layer
    k = 4
    drafter = DEERDrafter(DiffusionLM(dm, MASK, convention=convention, context="cache"), num_tokens=k)
    seen = []
    propose = drafter.propose

    def spy(context, run):
        rows = [context.state.row(b).clone() for b in range(context.state.batch_size)]
        tree = propose(context, run)
        seen.append((rows, tree.tokens[:, 1:].clone()))
        return tree

    drafter.propose = spy
    ids = prompts(batch=2, length=9, seed=3)
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0  # a left-padded row
    SpeculativeGenerator(target, drafter).generate(ids, attention_mask=mask, max_new_tokens=20, eos_token_id=[])
    assert len(seen) > 3
    with torch.no_grad():
        for rows, drafts in seen:
            for b, row in enumerate(rows):
                n = row.numel()
                x = torch.cat([row, torch.full((k,), MASK)])[None]
                vis = attention_mask(torch.ones(1, n + k, dtype=torch.bool), torch.tensor([n]), "cache")
                ref = slot_logits(dm, x, vis, convention)[0, n:n + k].argmax(-1)
                assert torch.equal(drafts[b], ref), (b, n)
