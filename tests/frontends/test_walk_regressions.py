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
    assert type(pipe.drafter).__name__ == "DFlashDrafter"  # image-dflash: the measured default
    assert mmspec.pipeline("zoo:image-target", method="ar").drafter is None
    eagle = mmspec.pipeline("zoo:image-target", drafter="feature")
    assert type(eagle.drafter).__name__ == "FeatureDrafter"
    for p, kw in ((eagle, dict(method="lantern++", tree="static", num_tokens=6)), (eagle, dict(method="spec", num_tokens=6)),
                  (pipe, dict(method="spec", tree="ddtree", num_tokens=6))):
        with pytest.raises(ValueError, match="num_tokens sets the length of a chain"):
            p.generate([0], **kw)
    assert eagle.generate([0], method="spec", tree="chain", num_tokens=6).config["num_tokens"] == 6
    assert pipe.generate([0], method="spec", num_tokens=6).config["num_tokens"] == 6  # its default tree: a chain


@pytest.mark.parametrize("argv,message", [
    (["bench", "--model", "tiny:llama", "--prompts", "0"], "--prompts must be an int >= 1"),
    (["bench", "--model", "tiny:llama", "--num-tokens", "0"], "--num-tokens must be an int >= 1"),
    (["bench", "--suite", "code", "--deer-tokens", "0"], "--deer-tokens must be an int >= 1"),
    (["bench", "--suite", "vlm", "--deer-tokens", "4"], "--deer-tokens does not apply to --suite 'vlm'"),
    (["bench", "--suite", "code", "--vlm-prompts", "caption"], "--vlm-prompts does not apply to --suite 'code'"),
    (["bench", "--suite", "image", "--per-class", "0"], "--per-class must be an int >= 1"),
    (["bench", "--suite", "vlm", "--methods", "plain,msd"], "msd-chain"),  # the suite's own names are listed
    (["eval", "--suite", "code", "--classes", "0,1"], "applies to the image suite"),
    (["image", "--classes", "0", "--method", "ar", "--measure-tv"], "--measure-tv measures how far a relaxed"),
    (["image", "--classes", "", "--method", "ar"], "--classes takes a comma list of class ids"),
    (["image", "--classes", "0", "--method", "lantern++", "--coupling", "gumbel"], "--coupling gumbel samples losslessly"),
    (["zoo", "record-hashes", "--home", "{tmp}/none"], "holds no zoo model"),
    (["zoo", "build", "--only", "nope", "--home", "{tmp}/zh"], "unknown zoo models"),
])
def test_flags_that_would_be_dropped_or_run_forever_are_one_error_line(tmp_path, capsys, argv, message):
    from mmspec.cli import main

    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    extra = ["--out", str(tmp_path / "out")] if argv[0] in ("bench", "eval", "image") else []
    assert main(argv + extra) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "zh").exists()  # refused before any folder


def test_eval_config_selecting_methods_of_a_suite_it_does_not_run(tmp_path, capsys):
    from mmspec.cli import main

    cfg = tmp_path / "run.yaml"
    cfg.write_text("suites: [code]\nmethods: {vlm: [msd-chain]}\n")
    assert main(["eval", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "which this run does not select" in capsys.readouterr().err


def test_every_bad_data_row_is_named_at_once(tmp_path):
    from mmspec.eval.datasets import read_jsonl

    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "a"}\n{"x": 1}\nnot json\n[1]\n')
    with pytest.raises(ValueError) as err:
        read_jsonl(path, ("prompt",))
    assert all(f"rows.jsonl:{n}" in str(err.value) for n in (2, 3, 4))


def test_a_missing_dlm_is_called_a_diffusion_lm(tmp_path, capsys):
    from mmspec.cli import main

    assert main(["train", "deer", "--target", "zoo:code-target", "--dlm", str(tmp_path / "none"),
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--dlm: diffusion LM" in err and "target '" not in err


def test_an_interrupted_command_is_one_line_and_exit_130(monkeypatch, capsys):
    import mmspec.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_zoo", interrupted)
    assert cli.main(["zoo", "list"]) == 130
    assert capsys.readouterr().err.startswith("mmspec: interrupted")


def test_second_walk_inputs_are_checked(tmp_path, capsys):
    import torch

    from mmspec.cli import main
    from mmspec.drafters import AdaptiveDrafter, PromptLookupDrafter
    from mmspec.generator import SpeculativeGenerator
    from mmspec.vlm_generator import VLMGenerator
    from mmspec.zoo import load

    for kw in (dict(margin=float("nan")), dict(probe_every=2.5), dict(probe_every=True)):
        with pytest.raises(ValueError):
            AdaptiveDrafter(PromptLookupDrafter(), **kw)
    with pytest.raises(ValueError, match="wraps a Drafter"):
        AdaptiveDrafter("chain")
    code = load("code-target")
    with pytest.raises(ValueError, match="input_ids must be a LongTensor.*float32"):
        SpeculativeGenerator(code.model, PromptLookupDrafter()).generate(torch.tensor([[1.0, 2.0]]), max_new_tokens=2)
    with pytest.raises(ValueError, match="measure_output_tv must be a bool"):
        mmspec.pipeline("zoo:image-target").generate([0], method="lantern", measure_output_tv="yes")
    with pytest.raises(ValueError, match="not a vision-language model"):
        VLMGenerator.from_pretrained("zoo:code-target")
    for argv, message in ((["--batch-sizes", "4", "--prompts", "2"], "needs at least that many prompts"),
                          (["--batch-sizes", "2,2", "--prompts", "2"], "names a size twice")):
        assert main(["bench", "--suite", "code", *argv, "--out", str(tmp_path / "o")]) == 2
        assert message in capsys.readouterr().err


def test_auto_methods_run_in_the_plain_suites_and_configs_take_comma_strings(tmp_path, capsys):
    import json

    from mmspec.cli import main

    assert main(["bench", "--suite", "code", "--methods", "chain-auto", "--prompts", "1", "--max-new-tokens", "4",
                 "--out", str(tmp_path / "b")]) == 0
    rows = {r["method"]: r for r in json.loads((tmp_path / "b" / "bench.json").read_text())["results"]}
    assert rows["chain-auto"]["exact"] == 1.0
    cfg = tmp_path / "run.yaml"
    cfg.write_text("suites: [code]\nmethods: {code: 'plain,prompt-lookup'}\nmax_new_tokens: 4\nnum_prompts: 1\n")
    assert main(["eval", "--config", str(cfg), "--out", str(tmp_path / "e"), "--no-plots", "--no-progress"]) == 0
    results = json.loads((tmp_path / "e" / "results.json").read_text())
    assert results["suites"]["code"]["methods"] == ["plain", "prompt-lookup"]
    capsys.readouterr()
    cfg.write_text("suites: [code]\nmethods: {code: plain}\nmax_new_tokens: 4\nnum_prompts: 1\n")
    assert main(["eval", "--config", str(cfg), "--out", str(tmp_path / "e2"), "--no-plots", "--no-progress"]) == 0
    assert "only the baseline ran" in (tmp_path / "e2" / "report.md").read_text()
