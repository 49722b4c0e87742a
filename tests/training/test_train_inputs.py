"""`mmspec train ...` inputs mean what they say:

* a refused start (arguments, data, target) leaves no checkpoint folder, and a checkpoint folder of a run that
  never saved a checkpoint does not block the corrected command (nor ``--resume``);
* a target of the wrong kind is one ``mmspec: error:`` line naming the kind, for every command;
* msd / flash / eagle train against a float16 or bfloat16 target (most real VLM checkpoints) and the drafter
  they save decodes with that target.

The targets are tiny: the zoo's (already built) and a Qwen2-VL checkpoint of a few hundred kB."""

import json

import pytest
import torch

import mmspec
from mmspec.cli import main
from mmspec.training import artifact
from tests.vlm_families import pictures, qwen_processor, tiny_qwen_vl, write_picture_rows

PROMPT = "Look: <|vision_start|><|image_pad|><|vision_end|> what is it?"
FEATURE = ["--stage1-steps", "2", "--stage2-steps", "2", "--batch-size", "2"]


def _qwen(home, dtype):
    proc, vocab, ids = qwen_processor()
    target = home / f"target-{str(dtype).split('.')[-1]}"
    tiny_qwen_vl("2", vocab_size=vocab, ids=ids).to(dtype).save_pretrained(target)
    proc.save_pretrained(target)
    return target


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_picture_rows(tmp_path_factory.mktemp("rows"), PROMPT)


@pytest.fixture(scope="module")
def fp16(data):
    return _qwen(data, torch.float16)


def _msd(target, data, out, *extra, method="msd"):
    more = ["--compress-tokens", "2", "--sar-tokens", "2"] if method == "flash" else []
    return main(["train", method, "--target", str(target), "--data", str(data / "rows.jsonl"), *FEATURE, *more,
                 "--out", str(out), *extra])


def _error(capsys) -> str:
    """The one ``mmspec: error:`` line a refused command prints (loading progress bars aside), no traceback."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("mmspec: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------------------------------------- checkpoint folders
def _corpus(tmp_path):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("def f(x):\n    return x\n")
    return str(tmp_path / "*.txt")


REFUSED = {  # a start refused after the arguments were read: each used to leave <out>.ckpt behind
    "deer": (lambda tmp: ["train", "deer", "--mask-token-id", "99999999"], "outside the diffusion LM's vocabulary"),
    "dflash": (lambda tmp: ["train", "dflash", "--generate", "8", "--corpus", _corpus(tmp)], "too little"),
    "dflash-layers": (lambda tmp: ["train", "dflash", "--generate", "8", "--target-layers", "0,99"], "layer"),
    "msd": (lambda tmp: ["train", "msd", "--target", "zoo:code-target"], "not a VLM target"),
    "eagle": (lambda tmp: ["train", "eagle", "--target", "zoo:code-target"], "not a VLM target"),
    "flash": (lambda tmp: ["train", "flash", "--target", "zoo:code-target"], "not a VLM target"),
    "image-drafter": (lambda tmp: ["train", "image-drafter", "--target", "zoo:vlm-target"], "not a visual AR"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refused_start_leaves_no_checkpoint_folder(case, tmp_path, capsys):
    argv, message = REFUSED[case]
    out = tmp_path / "drafter"
    assert main([*argv(tmp_path), "--out", str(out)]) == 2
    err = _error(capsys)
    assert message in err
    assert not artifact.checkpoint_dir(out).exists() and not out.exists()


def test_a_run_that_never_saved_a_checkpoint_does_not_block_the_next(fp16, data, tmp_path, capsys):
    out = tmp_path / "drafter"
    stale = artifact.checkpoint_dir(out)
    stale.mkdir()
    (stale / "run.json").write_text(json.dumps({"stage1_steps": 99}))  # started, died before any checkpoint
    assert _msd(fp16, data, out) == 0  # the corrected command
    assert (out / "mmspec.json").exists() and not stale.exists()
    stale.mkdir()
    (stale / "run.json").write_text("{}")
    assert _msd(fp16, data, tmp_path / "drafter", "--resume") == 0  # --resume: nothing to resume, starts fresh
    # a folder holding checkpoints still is a run to resume: refused without --resume
    stale.mkdir()
    (stale / "stage1.pt").write_bytes(b"a checkpoint")
    assert _msd(fp16, data, out) == 2
    assert "pass --resume" in capsys.readouterr().err and (stale / "stage1.pt").exists()


# ---------------------------------------------------------------------------------------------- target kinds
@pytest.mark.parametrize("command,target,kind", [
    ("msd", "zoo:code-target", "not a VLM target"),
    ("deer", "zoo:vlm-target", "not a causal LM (text) target"),
    ("dflash", "zoo:vlm-target", "a VLM target trains on --data rows of image / prompt"),  # not --generate
    ("dflash", "zoo:image-target", "not a causal LM (text) or VLM target"),
    ("image-drafter", "zoo:code-target", "not a visual AR (image generation) target"),
])
def test_a_target_of_the_wrong_kind_is_one_error_line(command, target, kind, tmp_path, capsys):
    extra = ["--generate", "8"] if command == "dflash" else []
    assert main(["train", command, "--target", target, *extra, "--out", str(tmp_path / "d")]) == 2
    assert kind in _error(capsys)


def test_a_text_checkpoint_given_to_msd_is_refused_as_not_a_vlm(data, tmp_path, capsys):
    from mmspec.tiny import tiny_model

    tiny_model("llama").save_pretrained(tmp_path / "code")
    assert _msd(tmp_path / "code", data, tmp_path / "d") == 2
    assert "is not a VLM target" in capsys.readouterr().err
    assert not artifact.checkpoint_dir(tmp_path / "d").exists()


# ---------------------------------------------------------------------------------------------- half-precision targets
@pytest.mark.parametrize("method,dtype", [("msd", torch.float16), ("flash", torch.float16), ("eagle", torch.float16),
                                          ("msd", torch.bfloat16)])
def test_feature_drafters_train_against_half_precision_targets(method, dtype, data, tmp_path):
    """The trainer itself against a target computing in half precision (as a GPU run loads a real LLaVA): the
    drafter trains in float32 on float32 copies of the target's features, embeddings and LM head."""
    from transformers import AutoModelForImageTextToText

    from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel
    from mmspec.training.feature import FeatureTrainConfig, jsonl_batches, train_feature_drafter

    path = _qwen(tmp_path, dtype)
    target = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype).eval()
    assert target.dtype == dtype
    batches = jsonl_batches(str(data / "rows.jsonl"), qwen_processor()[0], 2, 0)
    extra = dict(compress_tokens=2, sar_tokens=2) if method == "flash" else {}
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, method, **extra)).float()
    cfg = FeatureTrainConfig(stage1_steps=2, stage2_steps=2, batch_size=2, warmup=1)
    report = train_feature_drafter(net, target, batches, [batches(-1, 1.0)], cfg, progress=False)
    assert all(v == v for v in (report["stage1"]["best_val_loss"], report["stage2"]["best_val_loss"]))  # no NaN
    assert net.fc.weight.dtype == torch.float32 and all(p.dtype == dtype for p in target.parameters())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_train_msd_on_a_half_precision_checkpoint_then_decode_with_it(dtype, data, tmp_path):
    target = _qwen(tmp_path, dtype)
    out = tmp_path / "msd"
    assert _msd(target, data, out) == 0
    pipe = mmspec.pipeline(str(target), drafter=str(out), dtype=dtype)  # the saved drafter against the half target
    assert pipe.method == "msd" and pipe.target.model.dtype == dtype
    res = pipe.generate(images=[pictures()[0]], prompts=[PROMPT], max_new_tokens=4)
    assert res.sequences.shape[1] >= 4
