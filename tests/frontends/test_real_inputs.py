"""Inputs in the forms users have (issue 44): pictures as PIL images, numpy arrays or torch tensors in either
layout, a single picture or class id without a list, checkpoint directories in float32 unless a dtype is asked,
and greedy decoding that ignores sampling settings the way HF's ``generate`` does."""

import numpy as np
import pytest
import torch

import mmspec
from mmspec.image_gen import as_class_ids
from mmspec.loading import load_drafter, load_target
from mmspec.zoo import zoo_home
from mmspec.zoo import vlm_data as vd


@pytest.fixture(scope="module")
def vlm_pipe():
    return mmspec.pipeline("zoo:vlm-target")


# ---------------------------------------------------------------------------------------------- 1. VLM pictures
def test_vlm_takes_pictures_in_every_form(vlm_pipe, tmp_path):
    gen = vlm_pipe.generator
    img = vd.scenes("test", 1)[0].image()
    prompt = vd.with_image(vd.CAPTION_PROMPT)
    ref = gen.prepare([img], [prompt])["pixel_values"]
    hwc = np.asarray(img)  # [H, W, 3] uint8, what np.asarray gives
    chw = torch.from_numpy(hwc.copy()).permute(2, 0, 1)  # [3, H, W] uint8, what torchvision gives
    forms = {"numpy HWC uint8": hwc, "numpy HWC float": hwc / 255.0, "numpy CHW uint8": hwc.transpose(2, 0, 1),
             "torch CHW uint8": chw, "torch CHW float": chw.float() / 255, "torch HWC uint8": chw.permute(1, 2, 0),
             "torch HWC float32": torch.from_numpy(hwc / np.float32(255)), "numpy int64": hwc.astype(np.int64),
             "file path": tmp_path / "scene.png"}
    img.save(forms["file path"])
    for name, pic in forms.items():
        for images, prompts in (([pic], [prompt]), ([[pic]], [prompt]), (pic, prompt), (pic, [prompt])):
            got = gen.prepare(images, prompts)["pixel_values"]
            assert torch.equal(got, ref), name
    # two prompts, a picture each in different forms
    two = gen.prepare([hwc, chw], [prompt, prompt])["pixel_values"]
    assert torch.equal(two, torch.cat([ref, ref]))
    assert torch.equal(gen.prepare(torch.stack([chw, chw]), [prompt, prompt])["pixel_values"], two)  # a 4-D stack
    # the pipeline's generate: one picture and one prompt, no lists
    bare = vlm_pipe.generate(images=img, prompts=prompt, max_new_tokens=4)
    listed = vlm_pipe.generate(images=[hwc], prompts=[prompt], max_new_tokens=4)
    assert bare.texts == listed.texts and torch.equal(bare.sequences, listed.sequences)


def test_vlm_refuses_what_is_not_a_picture(vlm_pipe):
    gen = vlm_pipe.generator
    img = vd.scenes("test", 1)[0].image()
    prompt = vd.with_image(vd.CAPTION_PROMPT)
    hwc = np.asarray(img)
    accepted = "PIL image, a numpy array or torch tensor"
    for bad in (3, {"image": img}, np.zeros((2, 60, 60, 3, 1), np.uint8), np.zeros(60, np.uint8),
                np.zeros((60, 60, 5), np.uint8), hwc.astype(bool), [[[img]]]):
        with pytest.raises(ValueError, match=accepted):
            gen.prepare([bad], [prompt])
    with pytest.raises(ValueError, match=r"values in \[0, 1\]"):
        gen.prepare([hwc.astype(np.float32)], [prompt])  # float 0..255: says what it means instead of guessing
    with pytest.raises(ValueError, match=r"0\.\.255"):
        gen.prepare([hwc.astype(np.int64) * 2], [prompt])
    with pytest.raises(ValueError, match="one entry per prompt"):
        gen.prepare(img, [prompt, prompt])  # one picture for two prompts: which one?
    with pytest.raises(ValueError, match="image entries"):
        gen.prepare([img, img], [prompt])
    with pytest.raises(ValueError, match="placeholder"):
        gen.prepare(hwc, "Caption:")  # a picture for a prompt without the placeholder stays a clear error
    with pytest.raises(ValueError, match="placeholder"):
        gen.prepare(None, prompt)


# ---------------------------------------------------------------------------------------------- 2. class ids
@pytest.fixture(scope="module")
def image_pipe():
    return mmspec.pipeline("zoo:image-target", method="ar")


def test_image_route_takes_one_class_id_or_a_sequence(image_pipe):
    for one in (3, np.int64(3), torch.tensor(3), np.array(3), [3], (3,), torch.tensor([3]), np.array([3], np.uint8)):
        assert as_class_ids(one) == [3]
    for seq in ((3, 5), torch.tensor([3, 5]), np.array([3, 5]), [np.int32(3), torch.tensor(5)]):
        assert as_class_ids(seq) == [3, 5]
    # through the pipeline: a bare id is the list of that one id (the zoo target draws 64 codes a picture)
    ref = image_pipe.generate([3], seed=0)
    out = image_pipe.generate(torch.tensor(3), seed=0)
    assert torch.equal(out.codes, ref.codes) and out.config["class_ids"] == [3]


@pytest.mark.parametrize("bad, problem", [(True, "bool"), ([1, False], "bool"), (torch.tensor([True]), "bool"),
                                          (2.0, "float"), ([1, 2.5], "float"), (torch.tensor([1.0]), "float"),
                                          (np.array([1.0]), "float"), ("3", "str"), (["3"], "str"),
                                          (torch.tensor([[1, 2]]), "2-D"), ([], "no class ids")])
def test_image_route_refuses_what_is_not_a_class_id(image_pipe, bad, problem):
    with pytest.raises(ValueError, match=problem):
        image_pipe.generate(bad, seed=0)


# ---------------------------------------------------------------------------------------------- 3. dtype on loading
def test_checkpoint_directories_load_in_float32_unless_asked():
    home = zoo_home()
    stored = home / "code-target"
    assert '"float16"' in (stored / "config.json").read_text()  # the zoo stores its weights compactly
    t = load_target(str(stored))
    assert t.model.dtype == torch.float32
    assert load_drafter(str(home / "code-drafter"), t).dtype == torch.float32
    assert load_target(str(home / "vlm-target")).model.dtype == torch.float32
    assert load_target(str(stored), dtype="bfloat16").model.dtype == torch.bfloat16
    assert load_target("zoo:code-target").model.dtype == torch.float32
    half = mmspec.pipeline(str(stored), drafter=str(home / "code-drafter"), dtype=torch.float16)
    assert half.model.dtype == torch.float16
    # loaded from the directory, the zoo's model is the zoo's model: same greedy tokens as zoo:code-target
    ids = t.tokenizer("def add(a, b):\n", return_tensors="pt").input_ids
    zoo = load_target("zoo:code-target").model
    assert torch.equal(t.model.generate(ids, max_new_tokens=8, do_sample=False),
                       zoo.generate(ids, max_new_tokens=8, do_sample=False))


# ---------------------------------------------------------------------------------------------- 4. greedy settings
def test_greedy_ignores_sampling_settings_like_hf():
    pipe = mmspec.pipeline("zoo:code-target", method="chain")
    ref = pipe("def add(a, b):\n", max_new_tokens=8)
    for kw in (dict(temperature=0), dict(temperature=0.0, top_k=1, top_p=0.5)):  # none of them applies: greedy
        for method in ("chain", "plain"):
            out = pipe("def add(a, b):\n", max_new_tokens=8, method=method, **kw)
            assert torch.equal(out.sequences, ref.sequences), (method, kw)
            assert out.config["do_sample"] is False
            assert all(out.config.get(k) is None for k in ("temperature", "top_k", "top_p")), out.config  # not applied
    with pytest.raises(ValueError, match="temperature"):
        pipe("def add(a, b):\n", max_new_tokens=8, do_sample=True, temperature=0)
    sampled = pipe("def add(a, b):\n", max_new_tokens=4, do_sample=True, temperature=0.7, top_k=5)
    assert sampled.config["temperature"] == 0.7 and sampled.config["top_k"] == 5


def test_vlm_greedy_ignores_sampling_settings(vlm_pipe):
    img = vd.scenes("test", 1)[0].image()
    prompt = vd.with_image(vd.CAPTION_PROMPT)
    ref = vlm_pipe.generate(images=[img], prompts=[prompt], max_new_tokens=4)
    out = vlm_pipe.generate(images=[img], prompts=[prompt], max_new_tokens=4, temperature=0)
    assert torch.equal(out.sequences, ref.sequences)
    assert out.config.get("temperature") is None and out.config["do_sample"] is False


# ---------------------------------------------------------------------------------------------- Janus prompt ids
def test_janus_takes_prompt_ids_as_lists_or_one_row():
    from mmspec.janus import JanusImageGenerator
    from mmspec.tiny import JANUS_BOI, JANUS_BOS, tiny_janus

    gen = JanusImageGenerator(tiny_janus(seed=0))
    row = [JANUS_BOS, 17, 99, 42, 8, JANUS_BOI]
    ref = gen.generate(torch.tensor([row]), method="ar", cfg_scale=4.0, decode=False).codes
    for ids in (row, torch.tensor(row), np.array(row), [row]):
        assert torch.equal(gen.generate(ids, method="ar", cfg_scale=4.0, decode=False).codes, ref)
    with pytest.raises(ValueError, match="integers"):
        gen.generate(torch.tensor([row], dtype=torch.float32), method="ar", cfg_scale=4.0, decode=False)
    with pytest.raises(ValueError, match="token ids"):
        gen.generate([[JANUS_BOS, 17], [JANUS_BOI]], method="ar", cfg_scale=4.0, decode=False)  # ragged
