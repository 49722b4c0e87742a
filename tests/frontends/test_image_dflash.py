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


def test_gumbel_coupling_gives_plain_ar_pictures(pipe):
    """Under the Gumbel coupling every drafter gives plain AR's codes for a seed (CFG-guided target, T = 1), and the
    block drafter's slots are accepted (drafted by log q + the position's noise)."""
    ref = pipe.generate([4], method="ar", seed=1, coupling="gumbel")
    assert ref.config["coupling"] == "gumbel"
    for kw in (dict(tree="ddtree"), dict(tree="chain", num_tokens=8), dict(drafter="feature", tree="chain")):
        out = pipe.generate([4], seed=1, coupling="gumbel", **kw)
        assert torch.equal(out.codes, ref.codes), kw
        assert out.config["coupling"] == "gumbel" and out.stats.mean_accepted_tokens > 1.0
    assert not torch.equal(pipe.generate([4], method="ar", seed=1).codes, ref.codes)  # p/q rejection: other draws
    with pytest.raises(ValueError, match="coupling"):
        pipe.generate([4], method="lantern++", coupling="gumbel", seed=1)
    greedy = pipe.generate([4], seed=1, temperature=0, coupling="gumbel")  # greedy: the coupling is not applied
    assert "coupling" not in greedy.config


def test_image_cli_samples_under_the_gumbel_coupling(tmp_path):
    from mmspec.cli import main

    outs = {}
    for method in ("ar", "spec"):
        out = tmp_path / method
        assert main(["image", "--method", method, "--coupling", "gumbel", "--classes", "3", "--seed", "2",
                     "--out", str(out)] + (["--drafter", "dflash", "--tree", "ddtree"] if method == "spec" else [])) == 0
        outs[method] = json.loads((out / "stats.json").read_text())
        assert outs[method]["coupling"] == "gumbel"
    assert outs["spec"]["tau"] > 1.0
    assert (tmp_path / "ar" / "grid.png").read_bytes() == (tmp_path / "spec" / "grid.png").read_bytes()
