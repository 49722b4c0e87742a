"""The drafter protocol: a call's drafting state lives in what ``begin`` returns, so one drafter object serves two
generators and concurrent calls, and gives each the output it gives alone."""

import threading

import pytest
import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

from mmspec import DEFAULT_TREE, SpeculativeGenerator, TreeTemplate
from mmspec.drafters import (AutoregressiveDrafter, DEERDrafter, DiffusionLM, Drafter, FeatureDrafter,
                             FeatureDrafterConfig, FeatureDraftModel, PromptLookupDrafter)
from mmspec.drafters.diffuspec import DiffuSpecDrafter
from mmspec.verifiers.relaxed import MEMORY_ENTRIES, _MEMORY, cached_neighbours

VOCAB, IMAGE_ID, PER_IMAGE = 96, 90, 4


class BeginTogether(Drafter):
    """Delegates to a shared drafter; each call waits after ``begin`` until every call has begun, so their
    per-call states coexist before anyone drafts. Records what ``begin`` returned."""

    def __init__(self, inner: Drafter, barrier: threading.Barrier, runs: list):
        self.inner, self.barrier, self.runs = inner, barrier, runs
        self.vocab_size, self.needs_target_hidden = inner.vocab_size, inner.needs_target_hidden
        # finished rows leave the batch as they do alone (a sampled step's draws depend on the batch's rows)
        self.drops_rows = inner.drops_rows

    @property
    def max_nodes(self) -> int:
        return self.inner.max_nodes

    def check_inputs(self, prefill_inputs):
        self.inner.check_inputs(prefill_inputs)

    def begin(self, context):
        run = self.inner.begin(context)
        self.runs.append(run)
        self.barrier.wait(timeout=120)
        return run

    def propose(self, context, run):
        return self.inner.propose(context, run)

    def observe(self, context, run, tree, result, hidden=None):
        self.inner.observe(context, run, tree, result, hidden)

    def select_rows(self, run, keep):
        return self.inner.select_rows(run, keep)


def two_threads(target, drafter, calls: list[dict]) -> tuple[list, list]:
    """Each call on its own generator (all sharing ``drafter``) in its own thread; returns (outputs, runs)."""
    barrier, runs, outs, errors = threading.Barrier(len(calls)), [], [None] * len(calls), []

    def work(i):
        try:
            gen = SpeculativeGenerator(target, BeginTogether(drafter, barrier, runs))
            outs[i] = gen.generate(**calls[i])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return outs, runs


def assert_same_as_alone(target, drafter, make_calls):
    """``make_calls()`` builds the calls afresh (their torch.Generators seeded anew) for each run."""
    alone = [SpeculativeGenerator(target, drafter).generate(**c) for c in make_calls()]
    together, _ = two_threads(target, drafter, make_calls())
    for a, t in zip(alone, together):
        assert torch.equal(a.sequences, t.sequences)
        assert a.stats.accept_lengths == t.stats.accept_lengths


def text_calls(do_sample=False):
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(4, VOCAB, (2, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # a left-padded row
    other = torch.randint(4, VOCAB, (1, 5), generator=g)
    calls = [dict(input_ids=ids, attention_mask=mask, max_new_tokens=20), dict(input_ids=other, max_new_tokens=14)]
    for i, c in enumerate(calls):
        c.update(eos_token_id=[], pad_token_id=0)
        if do_sample:
            c.update(do_sample=True, temperature=0.8, generator=torch.Generator().manual_seed(i))
    return calls


@pytest.mark.parametrize("tree,do_sample", [(None, False), (None, True), (DEFAULT_TREE, True), ("dynamic", False)])
def test_autoregressive_drafter_shared_by_concurrent_calls(tiny_pair, tree, do_sample):
    target, draft = tiny_pair
    drafter = AutoregressiveDrafter(draft, num_tokens=4, tree=tree)  # chains adapt their length per call
    assert_same_as_alone(target, drafter, lambda: text_calls(do_sample))


@pytest.mark.parametrize("make", [
    lambda dlm: DEERDrafter(dlm, num_tokens=4),
    lambda dlm: DiffuSpecDrafter(dlm, causal=None, num_tokens=6, cps=True, adl=True, lattice=True),
    lambda dlm: PromptLookupDrafter(num_tokens=4)])
def test_diffusion_and_lookup_drafters_shared_by_concurrent_calls(tiny_pair, make):
    target, draft = tiny_pair
    dlm = DiffusionLM(draft, 2, convention="dream", context="cache")  # the prefix cache is per call
    assert_same_as_alone(target, make(dlm), text_calls)


def tiny_llava():
    torch.manual_seed(0)
    vision = CLIPVisionConfig(image_size=28, patch_size=14, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                              num_attention_heads=2, projection_dim=32)
    text = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0)
    cfg = LlavaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_ID, vision_feature_layer=-2,
                      vision_feature_select_strategy="default", image_seq_length=PER_IMAGE)
    return LlavaForConditionalGeneration(cfg).eval()


def image_calls():
    g = torch.Generator().manual_seed(2)
    text = lambda n: torch.randint(3, 80, (n,), generator=g).tolist()  # noqa: E731
    img = [IMAGE_ID] * PER_IMAGE
    one = torch.tensor([text(2) + img + text(5)])
    two = torch.tensor([img + text(3) + img + text(2)])
    return [dict(input_ids=ids, pixel_values=torch.randn(n, 3, 28, 28, generator=g), max_new_tokens=12,
                 eos_token_id=[], pad_token_id=0) for ids, n in ((one, 1), (two, 2))]


@pytest.mark.parametrize("method,tree,compress", [("msd", None, None), ("flash", TreeTemplate.full((2, 2)), 2)])
def test_feature_drafter_shared_by_concurrent_calls(method, tree, compress):
    """Each call's features, cache and captured image embeddings stay its own; the drafter's prompt_entries
    is what a call's cache holds for its prompt."""
    target = tiny_llava()
    extra = dict(compress_tokens=3, sar_tokens=2) if method == "flash" else {}
    torch.manual_seed(3)
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, method, **extra))
    drafter = FeatureDrafter(net, target, tree=tree, compress_to=compress)
    assert_same_as_alone(target, drafter, image_calls)
    calls = image_calls()
    _, runs = two_threads(target, drafter, calls[:1])
    assert runs[0].prompt_entries == drafter.prompt_entries(calls[0]["input_ids"])
    if compress is not None:  # one pair per token after the first, the image's run compressed
        pairs = calls[0]["input_ids"].shape[1] - 1
        assert drafter.prompt_entries(calls[0]["input_ids"]) == pairs - PER_IMAGE + compress


def test_neighbour_tables_in_memory_are_bounded():
    g = torch.Generator().manual_seed(0)
    for _ in range(MEMORY_ENTRIES + 3):
        cached_neighbours(torch.randn(12, 3, generator=g), 2)
    assert len(_MEMORY) <= MEMORY_ENTRIES
