"""The image route runs where it is asked to: every model (target, drafters, VQ decoder), the codebook and the
per-call guidance mask move together, so a GPU run cannot mix devices."""

import pytest
import torch

import mmspec
from mmspec.eval.config import EvalConfig
from mmspec.guidance import CFGModel
from mmspec.image_gen import ImageGenerator


def test_image_generator_moves_every_model_and_the_codebook():
    gen = ImageGenerator.from_zoo().to("meta")  # meta: a device other than the CPU that a CPU machine has
    models = [gen.target, gen.drafter_model, gen.vq, *[n for n in gen.feature_drafters.values() if n is not None]]
    assert len(models) == 6  # image-eagle, image-sar and image-dflash are committed
    for model in models:
        assert {p.device.type for p in model.parameters()} == {"meta"}, type(model).__name__
    assert gen.codebook.device.type == "meta"
    guided = CFGModel(gen.target, 3.0, gen.layout.null_id, [0, 1, 2])
    assert guided.allowed.device.type == "meta"  # built where the model is


def test_eval_image_device_is_checked():
    assert EvalConfig(suites="image", image_device="cpu").image_device == "cpu"
    with pytest.raises(ValueError, match="is not a device"):
        EvalConfig(suites="image", image_device="gpu0")
    with pytest.raises(ValueError, match="no image suite"):
        EvalConfig(suites="code", image_device="cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_image_route_on_cuda_matches_plain_ar_under_greedy():
    pipe = mmspec.pipeline("zoo:image-target", method="spec", drafter_device="cuda")
    plain = pipe.generate([0, 3], method="ar", temperature=0.0, seed=0)
    for drafter in ("ar", "feature", "sar", "dflash"):
        out = pipe.generate([0, 3], temperature=0.0, seed=0, drafter=drafter)
        assert out.codes.device.type == "cuda" and torch.equal(out.codes, plain.codes), drafter
    relaxed = pipe.generate([0, 3], method="lantern++", seed=0, measure_output_tv=True)
    assert relaxed.images.device.type == "cuda" and relaxed.stats.output_tv
