"""The zoo's DFlash block drafter of the guided image target (image-dflash) through the user-facing entry points:
``mmspec.pipeline``, ``ImageGenerator`` and ``mmspec image``."""

import json
import os

import pytest
import torch

import mmspec
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.tree import TreeTemplate

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def pipe():
    return mmspec.pipeline("zoo:image-target", drafter="dflash", method="spec")


def test_dflash_pipeline_drafts_blocks_and_is_exact_under_greedy(pipe):
    assert isinstance(pipe.drafter, DFlashDrafter) and pipe.drafter.num_tokens == 8  # its default: 8 slots
    assert pipe.drafter.block == 9  # from a block of 9 positions (the root and 8 slots)
    chain = mmspec.pipeline("zoo:image-target", drafter="dflash", method="spec", tree="chain")
    assert chain.drafter.num_tokens == 15 and chain.drafter.block == 16  # an explicit chain: the whole block
    ref = pipe.generate([2], method="ar", temperature=0, seed=0).codes
    for tree in ("chain", "ddtree"):
        out = pipe.generate([2], tree=tree, temperature=0, seed=0)
        assert torch.equal(out.codes, ref)
        assert out.config["drafter"] == "dflash" and out.stats.mean_accepted_tokens > 1.0
        assert out.config.get("num_tokens") == (15 if tree == "chain" else None)
    out = pipe.generate([2], method="lantern++", lam=1.0, tree="chain", num_tokens=6, temperature=0, seed=0)
    assert torch.equal(out.codes, ref) and out.config["num_tokens"] == 6  # λ = 1 moves nothing: exact


def test_dflash_refuses_tree_shapes_it_does_not_draft(pipe):
    with pytest.raises(ValueError, match="'chain' \\(its block\\) or 'ddtree'"):
        pipe.generate([0], tree=TreeTemplate.full((2, 1)))
    with pytest.raises(ValueError, match="num_tokens sets the length of a chain"):
        pipe.generate([0], tree="ddtree", num_tokens=4)
    with pytest.raises(ValueError, match="num_tokens must be in 1..15"):
        pipe.generate([0], tree="chain", num_tokens=16)


def test_image_cli_runs_the_dflash_drafter(tmp_path):
    from mmspec.cli import main

    out = tmp_path / "img"
    assert main(["image", "--drafter", "dflash", "--method", "spec", "--tree", "ddtree", "--classes", "0",
                 "--temperature", "0", "--out", str(out)]) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["drafter"] == "dflash" and stats["tree"] == "ddtree" and stats["tau"] > 1.0
