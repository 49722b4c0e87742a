"""generate rejects what it would otherwise pass on silently, and one generator is safe from two threads."""

import threading

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters import AutoregressiveDrafter, FeatureDrafter, PromptLookupDrafter


@pytest.mark.parametrize("bad", [{"foo": 1}, {"num_beams": 2}, {"past_key_values": None},
                                 {"cache": None}])
def test_unknown_keyword_named(tiny_pair, bad):
    gen = SpeculativeGenerator(tiny_pair[0], PromptLookupDrafter(num_tokens=3))
    with pytest.raises(ValueError, match=f"unknown keyword argument.*{next(iter(bad))}"):
        gen.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=4, **bad)


@pytest.mark.parametrize("n", [2.5, "8", True])
def test_max_new_tokens_must_be_an_int(tiny_pair, n):
    gen = SpeculativeGenerator(tiny_pair[0], PromptLookupDrafter(num_tokens=3))
    with pytest.raises(ValueError, match="max_new_tokens"):
        gen.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=n)


def test_input_ids_as_list(tiny_pair):
    gen = SpeculativeGenerator(tiny_pair[0], PromptLookupDrafter(num_tokens=3))
    with pytest.raises(ValueError, match="input_ids must be a LongTensor"):
        gen.generate([[5, 6, 7]], max_new_tokens=4)


def test_pixel_values_as_list_and_compress_to_zero():
    from mmspec.zoo import load
    from mmspec.zoo.vlm_data import scenes, with_image

    target, flash = load("vlm-target"), load("vlm-flash")
    proc = target.tokenizer
    inputs = proc(images=[scenes("test", 1)[0].image()], text=[with_image("Caption:")], return_tensors="pt")
    gen = SpeculativeGenerator(target.model, PromptLookupDrafter(num_tokens=3))
    with pytest.raises(ValueError, match="pixel_values must be a torch.Tensor"):
        gen.generate(inputs["input_ids"], max_new_tokens=4, pixel_values=inputs["pixel_values"].tolist())
    for bad in (0, -1, flash.model.config.compress_tokens + 1, 2.0):
        with pytest.raises(ValueError, match="compress_to must be an int"):
            FeatureDrafter(flash.model, target.model, compress_to=bad)


def test_one_generator_two_threads_exact(tiny_pair, greedy_reference):
    target, draft = tiny_pair
    gen = SpeculativeGenerator(target, AutoregressiveDrafter(draft, num_tokens=3))
    prompts = [torch.randint(0, 96, (1, 6), generator=torch.Generator().manual_seed(s)) for s in range(6)]
    want = [greedy_reference(target, p, 24, attention_mask=torch.ones_like(p)) for p in prompts]
    got, errors = {}, []

    def work(rows):
        try:
            for i in rows:
                got[i] = gen.generate(prompts[i], max_new_tokens=24, eos_token_id=[]).sequences
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(range(k, 6, 2),)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(6):
        assert torch.equal(got[i], want[i]), i


def test_pipelines_name_unknown_keywords():
    import mmspec

    text = mmspec.pipeline("zoo:code-target", method="prompt-lookup")
    with pytest.raises(ValueError, match=r"unknown keyword argument\(s\) \['foo'\]"):
        text("def f():\n", max_new_tokens=4, foo=1)
    vlm = mmspec.pipeline("zoo:vlm-target", method="prompt-lookup")
    with pytest.raises(ValueError, match=r"unknown keyword argument\(s\) \['num_beams'\]"):
        vlm.generate(prompts=["Caption:"], max_new_tokens=4, num_beams=2)
    image = mmspec.pipeline("zoo:image-target", method="spec")
    with pytest.raises(ValueError, match=r"unknown keyword argument\(s\) \['guidance'\]"):
        image.generate([0], guidance=2.0)
    for bad in ({"lantern_k": 0, "method": "lantern"}, {"num_tokens": 0}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be an int >= 1"):
            image.generate([0], **bad)
    with pytest.raises(ValueError, match="lantern_k .*does not apply to method 'spec'"):
        image.generate([0], lantern_k=8)  # a neighbour count the lossless method would ignore
