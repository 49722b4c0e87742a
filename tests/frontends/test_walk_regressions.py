"""Cases a walk over every face found (issue 44's closing walk): each was a traceback, a false refusal or a setting
accepted and silently dropped; each is now a clear ValueError naming it, or works."""

import pytest

import mmspec
from mmspec.zoo import vlm_data as vd


@pytest.mark.parametrize("device", ["cuda", "cuda:3", "tpu"])
@pytest.mark.parametrize("target", ["zoo:code-target", "zoo:image-target"])
def test_absent_or_unknown_devices_are_refused_by_name(device, target):
    import torch

    if torch.cuda.is_available() and device == "cuda":
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(ValueError, match="device"):
        mmspec.pipeline(target, device=device)
    with pytest.raises(ValueError, match="drafter_device"):
        mmspec.pipeline(target, drafter_device=device)


@pytest.mark.parametrize("method", ["eagle", "dflash", "chain"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_targets_take_the_zoo_feature_drafters(method, dtype):
    """The zoo's drafters follow the target's dtype, and a rounded LM head is still recognised as its own."""
    out = mmspec.pipeline("zoo:code-target", method=method, dtype=dtype)("def f():\n", max_new_tokens=8)
    assert out.new_tokens == 8


def test_half_precision_vlm_with_feature_drafters():
    scene = vd.scenes("test", 1)[0]
    for method in ("msd", "flash"):
        pipe = mmspec.pipeline("zoo:vlm-target", method=method, dtype="bfloat16")
        assert pipe.generate(images=[scene.image()], prompts=[vd.with_image("Caption:")], max_new_tokens=6).texts[0]


def test_prompts_of_the_wrong_kind_and_misplaced_arguments_are_named():
    with pytest.raises(ValueError, match="prompts must be a string or a list of strings"):
        mmspec.pipeline("zoo:code-target")(123)
    with pytest.raises(ValueError, match="got 'prompt-lookup' \\(no drafter model\\)"):
        mmspec.pipeline("zoo:code-target", drafter="prompt-lookup", method="chain")
    with pytest.raises(ValueError, match="first argument is the pictures"):
        mmspec.pipeline("zoo:vlm-target")("Caption:", max_new_tokens=4)


def test_image_pipeline_names_its_drafter_and_refuses_a_chain_length_for_a_tree():
    pipe = mmspec.pipeline("zoo:image-target")
    assert type(pipe.drafter).__name__ == "FeatureDrafter"
    assert mmspec.pipeline("zoo:image-target", method="ar").drafter is None
    for kw in (dict(method="lantern++", tree="static", num_tokens=6), dict(method="spec", num_tokens=6)):
        with pytest.raises(ValueError, match="num_tokens sets the length of a chain"):
            pipe.generate([0], **kw)
    assert pipe.generate([0], method="spec", tree="chain", num_tokens=6).config["num_tokens"] == 6
