"""Options mean what they say: messages name the actual fault, image options that do not apply are refused,
and timing reports warn when the machine was busy."""

import json

import pytest
import torch

import mmspec
from mmspec.cli import build_parser, main
from mmspec.eval.load import load_check


def test_load_check_names_both_signs_of_a_busy_machine():
    quiet = load_check(0.5, [1.0, 1.1], end=0.7, n_cores=2)
    assert not quiet["busy"] and quiet["warning"] is None
    loaded = load_check(3.5, [1.0, 1.1], end=0.7, n_cores=2)
    assert loaded["busy"] and "load average 3.5" in loaded["warning"] and "2 cores" in loaded["warning"]
    uneven = load_check(0.5, [1.0, 2.4], end=0.5, n_cores=2)
    assert uneven["busy"] and "2.4× apart" in uneven["warning"]


def test_bench_report_carries_the_load_check(tmp_path):
    out = tmp_path / "bench"
    assert main(["bench", "--methods", "plain,chain", "--prompts", "1", "--prompt-length", "8",
                 "--max-new-tokens", "4", "--repeats", "2", "--out", str(out)]) == 0
    load = json.loads((out / "bench.json").read_text())["load"]
    assert set(load) >= {"cores", "load_start", "load_end", "busy", "warning"}
    assert (load["warning"] is not None) == load["busy"]
    md = (out / "bench.md").read_text()
    assert ("**Warning:**" in md) == load["busy"]


def test_messages_name_the_fault(tmp_path, capsys):
    assert main(["eval", "--suite", "code", "--methods", "plain,lookahead", "--out", str(tmp_path / "x"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "belongs to none of the suites" in err and "chain" in err and "deer" in err
    bench = next(a for a in build_parser()._subparsers._group_actions[0].choices["bench"]._actions
                 if "--model" in a.option_strings)
    assert "zoo:" in bench.help


def test_wrongly_sized_image_for_the_zoo_vlm_says_so():
    from PIL import Image

    pipe = mmspec.pipeline("zoo:vlm-target", method="prompt-lookup")
    with pytest.raises(ValueError, match=r"image 0 is 50x40 pixels.*does not resize"):
        pipe.generate(images=[Image.new("RGB", (50, 40))], prompts=["<image>\nCaption:"], max_new_tokens=4)


def test_image_options_that_do_not_apply_are_refused(tmp_path, capsys):
    for argv, message in ((["--method", "spec", "--delta", "0.9"], "delta"),
                          (["--method", "lantern", "--lam", "5"], "lam"),
                          (["--method", "ar", "--delta", "0.2"], "delta"),
                          (["--method", "spec", "--lantern-k", "4"], "lantern_k"),
                          (["--temperature", "-1"], "--temperature must be >= 0")):
        assert main(["image", *argv, "--out", str(tmp_path / "x")]) == 2, argv
        assert message in capsys.readouterr().err, argv
    assert not (tmp_path / "x").exists()  # refused before any work
    for kw in (dict(method="spec", delta=0.9), dict(method="lantern++", delta=0.1), dict(method="ar", lam=2.0),
               dict(temperature=-1.0)):
        with pytest.raises(ValueError):
            mmspec.pipeline("zoo:image-target", **kw)
    with pytest.raises(ValueError, match="image drafter kind|feature drafter trained"):
        mmspec.pipeline("zoo:image-target", drafter="zoo:image-drafter")


def test_image_run_records_what_it_applied(tmp_path):
    out = tmp_path / "run"
    assert main(["image", "--method", "lantern", "--classes", "0", "--tree", "chain", "--out", str(out)]) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["delta"] == 0.1 and stats["lantern_k"] == 8 and "lam" not in stats  # the default bound, resolved
    # image-dflash is built: the default drafter; an explicit chain is its whole block
    assert stats["method"] == "lantern" and stats["num_tokens"] == 15 and stats["drafter"] == "dflash"
    out = tmp_path / "lpp"
    assert main(["image", "--classes", "0", "--out", str(out)]) == 0  # the default method, LANTERN++
    stats = json.loads((out / "stats.json").read_text())
    # the default method and the block drafter's own defaults: the first 8 slots as a chain, λ = 50
    assert (stats["method"], stats["lam"], stats["lantern_k"], stats["drafter"]) == ("lantern++", 50.0, 16, "dflash")
    assert "delta" not in stats and stats["tree"] == "chain" and stats["num_tokens"] == 8
    out = tmp_path / "eagle"
    assert main(["image", "--classes", "0", "--drafter", "feature", "--out", str(out)]) == 0  # image-eagle's own
    stats = json.loads((out / "stats.json").read_text())
    assert (stats["lam"], stats["tree"], stats["drafter"]) == (10.0, "static", "feature")
    out = tmp_path / "ar"
    assert main(["image", "--method", "ar", "--classes", "0", "--out", str(out)]) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert not {"delta", "lam", "lantern_k", "tree", "num_tokens", "drafter"} & set(stats)  # plain AR applies none


def test_demo_shows_progress_and_checks_the_load(tmp_path, capsys):
    from mmspec.demo import run_demo

    run_demo(tmp_path, num_prompts=1, max_new_tokens=4)
    out = capsys.readouterr()
    assert "… code: timing" in out.out and "… vlm: timing" in out.out and "… image:" in out.out
    load = json.loads((tmp_path / "load.json").read_text())
    assert load["busy"] == (load["warning"] is not None)
    assert json.loads((tmp_path / "code.json").read_text())["load"]["cores"] >= 1


def test_zoo_device_places_every_later_load_and_refuses_a_bad_device():
    """``mmspec bench --device``: zoo.use_device sends each later load (drafters included) to that device; an
    unusable device is one ValueError before any work. ("meta" stands in for a GPU on this CPU.)"""
    from mmspec import zoo
    from mmspec.training.loop import to_device as on_device

    try:
        zoo.use_device("meta")
        assert next(zoo.load("code-drafter").model.parameters()).device.type == "meta"
        assert next(zoo.load("code-drafter", device="cpu").model.parameters()).device.type == "cpu"
    finally:
        zoo.use_device(None)
    assert next(zoo.load("code-drafter").model.parameters()).device.type == "cpu"
    with pytest.raises(ValueError, match="device 'nonsense' cannot be used"):
        zoo.use_device("nonsense")
    moved = on_device({"input_ids": torch.ones(1, 3, dtype=torch.long), "note": 1}, "meta")
    assert moved["input_ids"].device.type == "meta" and moved["note"] == 1
