"""The image suite sweeps LANTERN++ static tree shapes (what the default tree is chosen from) and reports each
shape by its label."""

import json

import pytest

from mmspec.eval.image_suite import TREE_SHAPES, run_image_suite, tree_sweep_methods
from mmspec.eval.suites import image_table
from mmspec.registry import BOUND_DEFAULTS
from mmspec.tree import TreeTemplate


def test_tree_labels():
    assert TreeTemplate.full((2, 2, 1, 1, 1)).label == "2x2x1x1x1"
    assert TreeTemplate.chain(3).label == "1x1x1"
    # not every node at a depth has the same number of children: counted instead
    assert TreeTemplate(((0,), (1,), (0, 0), (0, 1), (1, 0))).label == "5nodes-depth2"
    assert TreeTemplate.spine(7, 1).label == "spine7+1" and TreeTemplate.spine(7, 1).num_nodes == 9
    assert TreeTemplate(((0,), (1,), (2,), (0, 0))).label == "spine2+2"
    assert TreeTemplate.spine(3, 0).label == "1x1x1"  # no alternative: a chain


@pytest.mark.parametrize("template", [TreeTemplate.full((2, 2, 1, 1, 1)), TreeTemplate.full((2, 1, 1, 1, 1, 1)),
                                      TreeTemplate.spine(7, 1), TreeTemplate.spine(2, 2), TreeTemplate.chain(4)])
def test_a_label_names_its_template(template):
    assert TreeTemplate.from_label(template.label) == template


@pytest.mark.parametrize("bad", ["", "2x0x1", "spine", "spine0+1", "2x", "x2", "tree7", "spine7+-1"])
def test_a_label_that_names_no_shape_is_refused(bad):
    with pytest.raises(ValueError, match="tree"):
        TreeTemplate.from_label(bad)


def test_the_image_cli_takes_a_tree_label(tmp_path, capsys):
    """`mmspec image --tree spine3+1` drafts on that shape and stats.json records its label; a label that names
    no shape is refused before any picture is drawn."""
    from mmspec.cli import main

    out = tmp_path / "img"
    assert main(["image", "--method", "lantern++", "--tree", "spine3+1", "--temperature", "0", "--classes", "0",
                 "--out", str(out)]) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["tree"] == "spine3+1" and stats["tau"] >= 1.0
    assert stats["drafter"] == "feature"  # a template: the default drafter that drafts one (image-dflash does not)
    assert main(["image", "--method", "lantern++", "--tree", "wide", "--classes", "0", "--out",
                 str(tmp_path / "bad")]) == 2
    assert "spine<depth>+<alternatives at the root>" in capsys.readouterr().err
    assert not (tmp_path / "bad" / "grid.png").exists()


@pytest.mark.parametrize("have", [["feature", "sar"], []])
def test_tree_shapes_in_the_eval_table(have):
    """One command-line entry per shape, with the feature drafter when it is built, else the AR drafter."""
    table = image_table(True, have)
    shaped = {slug: kw for slug, (_, method, kw) in table.items() if isinstance(kw.get("tree"), TreeTemplate)}
    sweep_names = {name for name, _, _ in tree_sweep_methods("feature" if have else "ar")}
    rows = {slug: kw for slug, (name, _, kw) in table.items() if name in sweep_names}
    assert len(rows) == len(TREE_SHAPES) == len(sweep_names)
    for slug, kw in rows.items():
        assert kw["tree"].label in slug
        assert kw.get("drafter", "ar") == ("feature" if have else "ar")
        # at LANTERN++'s default bound, the one the default tree serves
        assert (kw["lam"], kw["lantern_k"]) == (BOUND_DEFAULTS["lantern++"]["lam"], BOUND_DEFAULTS["lantern++"]["lantern_k"])
    # besides the sweep, with image-eagle only: the default bound on the narrow tree, the loosest bound on the
    # fastest tree measured
    others = sorted(set(shaped) - set(rows))
    assert others == (["lantern++-2x1x1x1x1-lam10.0-k16-feature", "lantern++-2x1x1x1x1x1-lam50.0-k16-feature",
                       "lantern++-spine7+1-lam10.0-k16-feature", "lantern++-spine7+1-lam50.0-k16-feature"]
                      if have else [])


def test_a_tree_shape_runs_through_the_suite(tmp_path):
    name = tree_sweep_methods()[0][0]
    report = run_image_suite(per_class=1, sweep=True, latency_images=1, out_dir=tmp_path, progress=False, only=[name])
    row = next(r for r in report["results"] if r["name"] == name)
    assert row["tree"] == "2x1x1x1" and row["tau"] >= 1.0 and row["max_output_tv"] is not None
    saved = json.loads((tmp_path / "image_bench.json").read_text())
    assert any(r["name"] == name and r["tree"] == "2x1x1x1" for r in saved["results"])
