"""Bounded work: draft trees have a node cap refused up front (a label like '100x100' used to verify 10k nodes per
step for minutes), and every method, plain decoding included, refuses a request past the model's positions."""

import time

import pytest

import mmspec
from mmspec.drafters import AutoregressiveDrafter
from mmspec.generator import SpeculativeGenerator
from mmspec.tree import MAX_TREE_NODES, TreeTemplate
from mmspec.zoo import load
from mmspec.zoo import vlm_data as vd


@pytest.mark.parametrize("label", ["100x100", "100x100x100x100x100", f"spine{MAX_TREE_NODES}+1"])
def test_tree_labels_are_capped_before_any_work(label):
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=f"at most {MAX_TREE_NODES}"):
        TreeTemplate.from_label(label)
    assert time.perf_counter() - t0 < 5  # refused, not built: 100^5 paths would never finish


def test_image_route_refuses_a_huge_tree():
    pipe = mmspec.pipeline("zoo:image-target", method="lantern++", drafter="feature")
    with pytest.raises(ValueError, match=f"at most {MAX_TREE_NODES}"):
        pipe.generate([0], tree="30x30")
    with pytest.raises(ValueError, match="drafts tree='chain'"):  # image-dflash drafts no templates
        mmspec.pipeline("zoo:image-target", method="lantern++", drafter="dflash").generate([0], tree="30x30")
    with pytest.raises(ValueError, match=f"at most {MAX_TREE_NODES}"):  # a template asked of the default: eagle's
        mmspec.pipeline("zoo:image-target", method="lantern++", tree="30x30").generate([0])


def test_any_drafter_step_is_capped():
    code = load("code-target")
    with pytest.raises(ValueError, match="AutoregressiveDrafter has 1001 nodes"):
        SpeculativeGenerator(code.model, AutoregressiveDrafter(load("code-drafter").model, num_tokens=1000))
    with pytest.raises(ValueError, match=f"at most {MAX_TREE_NODES}"):
        mmspec.pipeline("zoo:code-target", method="dynamic", num_nodes=4000)("x", max_new_tokens=4)


@pytest.mark.parametrize("method", ["plain", "mmspec-plain", "chain"])
def test_every_text_method_refuses_past_the_positions(method):
    pipe = mmspec.pipeline("zoo:code-target", method=method)
    positions = pipe.model.config.max_position_embeddings
    with pytest.raises(ValueError, match="longer than the model supports"):
        pipe("def f():", max_new_tokens=positions)


@pytest.mark.parametrize("method", ["plain", "msd"])
def test_every_vlm_method_refuses_past_the_positions(method):
    pipe = mmspec.pipeline("zoo:vlm-target", method=method)
    scene = vd.scenes("test", 1)[0]
    with pytest.raises(ValueError, match="longer than the model supports"):
        pipe.generate(images=[scene.image()], prompts=[vd.with_image(vd.CAPTION_PROMPT)], max_new_tokens=1000)
