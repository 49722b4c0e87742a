"""One vocabulary across the front-ends (mmspec.pipeline's routes, VLMGenerator, ImageGenerator,
JanusImageGenerator): outputs with the same fields in the same order, seeds through ``generator=`` (``seed=``
only builds one), the caller's tokenizer and torch's global RNG left as they were."""

import copy
from dataclasses import fields

import pytest
import torch

import mmspec
from mmspec import ImageOutput, TextOutput, VLMGenerator
from mmspec.janus import JanusImageGenerator
from mmspec.registry import METHODS
from mmspec.tiny import JANUS_BOI, JANUS_BOS, tiny_janus
from mmspec.zoo import load
from mmspec.zoo import vlm_data as vd

PROMPTS = ["def add(a, b):\n", "import os\n\n\ndef main():\n"]


def names(out) -> list[str]:
    return [f.name for f in fields(out)]


@pytest.fixture(scope="module")
def vlm():
    entry = load("vlm-target")
    scenes = vd.scenes("test", 2)
    return entry, dict(images=[s.image() for s in scenes], prompts=[vd.with_image("Caption:")] * 2,
                       max_new_tokens=6)


def test_every_front_end_output_has_the_same_fields_in_the_same_order(vlm):
    entry, kw = vlm
    texts = [mmspec.pipeline("zoo:code-target", method="prompt-lookup")(PROMPTS[0], max_new_tokens=4),
             mmspec.pipeline("zoo:code-target", method="plain")(PROMPTS[0], max_new_tokens=4),
             mmspec.pipeline("zoo:vlm-target", method="prompt-lookup").generate(**kw),
             VLMGenerator(entry.model, entry.tokenizer, method="plain").generate(**kw)]
    janus = mmspec.pipeline(tiny_janus(0), drafter=tiny_janus(1, num_layers=1), method="spec")
    prompt = torch.tensor([[JANUS_BOS, 17, 99, 42, 8, JANUS_BOI]])
    images = [mmspec.pipeline("zoo:image-target", method="spec", tree="chain").generate([0], temperature=0),
              mmspec.pipeline("zoo:image-target", method="ar").generate([0], temperature=0),
              janus.generate(prompt, decode=False),
              JanusImageGenerator(tiny_janus(0)).generate(prompt, method="ar", decode=False)]
    assert all(type(o) is TextOutput for o in texts) and all(type(o) is ImageOutput for o in images)
    # what was produced (decoded, then ids), then how: the same names in the same order everywhere
    assert names(texts[0]) == ["texts", "sequences", "stats", "seconds", "config", "new_tokens"]
    assert names(images[0]) == ["images", "codes", "stats", "seconds", "config", "new_tokens"]
    assert names(texts[0])[2:] == names(images[0])[2:]
    for out in texts + images:
        assert out.seconds > 0 and out.config["method"] in METHODS["text"] | METHODS["vlm"] | METHODS["image"]
        assert (out.stats is None) == (out.config["method"] in ("plain", "ar"))
        assert out.new_tokens == (out.stats.new_tokens if out.stats is not None else out.new_tokens) > 0


def test_caller_tokenizer_is_left_as_it_was(vlm):
    code = load("code-target")
    tok = copy.deepcopy(code.tokenizer)
    tok.pad_token = None  # batched prompts then pad with EOS, without setting it here
    before = (tok.padding_side, tok.pad_token, tok.pad_token_id)
    for method in ("prompt-lookup", "plain"):
        pipe = mmspec.pipeline(code.model, method=method, tokenizer=tok)
        out = pipe(PROMPTS, max_new_tokens=4)
        assert out.sequences.shape[0] == 2
        assert (tok.padding_side, tok.pad_token, tok.pad_token_id) == before
    entry, kw = vlm
    side = entry.tokenizer.tokenizer.padding_side
    VLMGenerator(entry.model, entry.tokenizer, method="prompt-lookup").generate(**kw)
    mmspec.pipeline(entry.model, processor=entry.tokenizer, method="plain").generate(**kw)
    assert entry.tokenizer.tokenizer.padding_side == side


def test_seed_builds_the_generator_and_the_global_rng_is_untouched():
    pipe = mmspec.pipeline("zoo:code-target", method="prompt-lookup")
    kw = dict(max_new_tokens=8, do_sample=True, temperature=1.5)
    by_seed = pipe(PROMPTS, seed=3, **kw)
    assert torch.equal(by_seed.sequences, pipe(PROMPTS, generator=torch.Generator().manual_seed(3), **kw).sequences)
    assert torch.equal(pipe(PROMPTS, **kw).sequences, pipe(PROMPTS, seed=0, **kw).sequences)  # default seed 0
    with pytest.raises(ValueError, match="not both"):
        pipe(PROMPTS, seed=3, generator=torch.Generator(), **kw)
    plain = mmspec.pipeline("zoo:code-target", method="plain")
    state = torch.get_rng_state()
    a = plain(PROMPTS, seed=5, **kw)
    assert torch.equal(torch.get_rng_state(), state)  # HF sampling ran on a forked, seeded RNG
    assert torch.equal(a.sequences, plain(PROMPTS, generator=torch.Generator().manual_seed(5), **kw).sequences)


def test_method_switches_per_call():
    pipe = mmspec.pipeline("zoo:code-target", method="prompt-lookup")
    ids = pipe.tokenizer(PROMPTS[0], return_tensors="pt", add_special_tokens=False).input_ids
    plain = pipe(ids, max_new_tokens=6, method="plain")
    assert plain.config["method"] == "plain" and plain.stats is None
    assert torch.equal(pipe(ids, max_new_tokens=6).sequences, plain.sequences)  # greedy: lossless
    assert pipe(ids, max_new_tokens=6, method="chain").config["method"] == "chain"  # the zoo's AR drafter, loaded
    assert pipe.method == "prompt-lookup"
